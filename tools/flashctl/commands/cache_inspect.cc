// flashctl cache inspect KEY [--kind block|swa] [--verify] [--json]
#include <iostream>

#include "absl/strings/escaping.h"
#include "tools/flashctl/commands/cache_common.h"
#include "tools/flashctl/table.h"

namespace flashserve::flashctl {

int RunCacheInspect(const CacheInspectOptions& options) {
  absl::StatusOr<std::vector<cache::EntryRef>> refs = ParseEntryRefs({options.key}, options.kind);
  if (!refs.ok()) return Fail("inspect", refs.status(), true);
  auto client = ConnectCache(options.conn);
  if (!client.ok()) return Fail("inspect", client.status(), true);
  absl::StatusOr<cache::InspectInfo> info = (*client)->Inspect((*refs)[0], options.verify);
  if (!info.ok()) return Fail("inspect", info.status());
  const std::string checksum = absl::BytesToHexString(info->checksum);

  if (options.conn.json) {
    nlohmann::ordered_json doc = EntryJson(info->entry);
    doc["layout_version"] = info->entry.layout_version;
    doc["header_bytes"] = info->header_bytes;
    doc["checksum_algorithm"] = info->checksum_algorithm;
    doc["checksum"] = checksum;
    doc["checksum_ok"] = info->checksum_ok.has_value() ? nlohmann::ordered_json(*info->checksum_ok)
                                                       : nlohmann::ordered_json(nullptr);
    std::cout << doc.dump(2) << "\n";
    return 0;
  }
  const cache::EntryDetails& e = info->entry;
  const absl::Time now = absl::Now();
  Table t({"field", "value"});
  t.AddRow({"kind", std::string(KindName(e.ref))});
  t.AddRow({"key", cache::DigestToHex(e.ref.key)});
  t.AddRow({"fingerprint", cache::DigestToHex(e.fingerprint)});
  t.AddRow({"tier", std::string(cache::CacheTierName(e.tier))});
  t.AddRow({"size", absl::StrCat(HumanBytes(static_cast<double>(e.size_bytes)), " (", e.size_bytes,
                                 " bytes)")});
  t.AddRow(
      {"created", absl::StrCat(UtcTime(e.created), " (", ShortDuration(now - e.created), " ago)")});
  t.AddRow({"last access", UtcTime(e.last_access)});
  t.AddRow({"expires", e.expires.has_value() ? absl::StrCat(UtcTime(*e.expires), " (in ",
                                                            ShortDuration(*e.expires - now), ")")
                                             : std::string("never (pinned)")});
  t.AddRow({"pinned", e.pinned ? "yes" : "no"});
  if (e.ref.is_block) {
    t.AddRow({"layout version", absl::StrCat(e.layout_version)});
    t.AddRow({"header bytes", absl::StrCat(info->header_bytes)});
  }
  t.AddRow(
      {"checksum", absl::StrCat(info->checksum_algorithm, checksum.empty() ? "" : " " + checksum)});
  t.AddRow({"checksum ok", !info->checksum_ok.has_value() ? "not checked (use --verify)"
                           : *info->checksum_ok           ? "yes"
                                                          : "NO: corrupt (served as a miss)"});
  std::cout << t.Render();
  return 0;
}

}  // namespace flashserve::flashctl
