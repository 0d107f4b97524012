// flashctl cache ls [--kind block|swa|all] [--fingerprint HEX] [--pinned yes|no|any]
//                   [--limit N] [--page-token T] [--all] [--json]
#include <iostream>

#include "tools/flashctl/commands/cache_common.h"
#include "tools/flashctl/table.h"

namespace flashserve::flashctl {
namespace {

absl::StatusOr<cache::EntryFilterSpec> FilterFrom(const CacheLsOptions& o) {
  cache::EntryFilterSpec f;
  if (o.kind == "block") {
    f.swa = false;
  } else if (o.kind == "swa") {
    f.blocks = false;
  } else if (o.kind != "all") {
    return absl::InvalidArgumentError("--kind must be block, swa or all");
  }
  if (!o.fingerprint.empty()) {
    absl::StatusOr<cache::Sha256Digest> d = ParseHexDigest(o.fingerprint, "--fingerprint");
    if (!d.ok()) return d.status();
    f.fingerprint = *d;
  }
  if (o.pinned == "yes") {
    f.pinned = true;
  } else if (o.pinned == "no") {
    f.pinned = false;
  } else if (o.pinned != "any") {
    return absl::InvalidArgumentError("--pinned must be yes, no or any");
  }
  return f;
}

}  // namespace

int RunCacheLs(const CacheLsOptions& options) {
  absl::StatusOr<cache::EntryFilterSpec> filter = FilterFrom(options);
  if (!filter.ok()) return Fail("ls", filter.status(), true);
  auto client = ConnectCache(options.conn);
  if (!client.ok()) return Fail("ls", client.status(), true);

  std::vector<cache::EntryDetails> entries;
  std::string token = options.page_token;
  do {
    absl::StatusOr<cache::EntryPageInfo> page = (*client)->List(*filter, options.limit, token);
    if (!page.ok()) return Fail("ls", page.status());
    for (cache::EntryDetails& e : page->entries) entries.push_back(std::move(e));
    token = page->next_page_token;
  } while (options.all && !token.empty());

  if (options.conn.json) {
    nlohmann::ordered_json doc;
    doc["entries"] = nlohmann::ordered_json::array();
    for (const cache::EntryDetails& e : entries) doc["entries"].push_back(EntryJson(e));
    doc["next_page_token"] = token;
    std::cout << doc.dump(2) << "\n";
    return 0;
  }
  const absl::Time now = absl::Now();
  Table table({"kind", "key", "fingerprint", "tier", "size", "age", "ttl left", "pinned"},
              {false, false, false, false, true, true, true, false});
  for (const cache::EntryDetails& e : entries) {
    table.AddRow(
        {std::string(KindName(e.ref)), cache::DigestToHex(e.ref.key),
         cache::DigestToHex(e.fingerprint).substr(0, 16), std::string(cache::CacheTierName(e.tier)),
         HumanBytes(static_cast<double>(e.size_bytes)), ShortDuration(now - e.created),
         e.expires.has_value() ? ShortDuration(*e.expires - now) : "-", e.pinned ? "yes" : ""});
  }
  std::cout << table.Render();
  std::cout << entries.size() << " entries";
  if (!token.empty()) std::cout << "; more with --page-token " << token << " (or --all)";
  std::cout << "\n";
  return 0;
}

}  // namespace flashserve::flashctl
