// flashctl cache flush (--fingerprint HEX | --all) [--kind block|swa|all] [--include-pinned]
//                      [--dry-run] [--json]
#include <iostream>

#include "tools/flashctl/commands/cache_common.h"
#include "tools/flashctl/table.h"

namespace flashserve::flashctl {

int RunCacheFlush(const CacheFlushOptions& options) {
  if (options.fingerprint.empty() == !options.all) {
    return Fail("flush", absl::InvalidArgumentError("give exactly one of --fingerprint HEX, --all"),
                true);
  }
  cache::EntryFilterSpec filter;
  if (options.kind == "block") {
    filter.swa = false;
  } else if (options.kind == "swa") {
    filter.blocks = false;
  } else if (options.kind != "all") {
    return Fail("flush", absl::InvalidArgumentError("--kind must be block, swa or all"), true);
  }
  if (!options.fingerprint.empty()) {
    absl::StatusOr<cache::Sha256Digest> d = ParseHexDigest(options.fingerprint, "--fingerprint");
    if (!d.ok()) return Fail("flush", d.status(), true);
    filter.fingerprint = *d;
  }
  auto client = ConnectCache(options.conn);
  if (!client.ok()) return Fail("flush", client.status(), true);
  absl::StatusOr<cache::FlushCounts> r =
      (*client)->Flush(filter, options.include_pinned, options.dry_run);
  if (!r.ok()) return Fail("flush", r.status());
  if (options.conn.json) {
    std::cout << nlohmann::ordered_json{{"entries", r->entries},
                                        {"bytes", r->bytes},
                                        {"dry_run", options.dry_run}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << (options.dry_run ? "would remove " : "removed ")
            << WithThousands(static_cast<long long>(r->entries)) << " entries ("
            << HumanBytes(static_cast<double>(r->bytes)) << ")"
            << (options.include_pinned ? "" : "; pinned blocks kept (--include-pinned)") << "\n";
  return 0;
}

}  // namespace flashserve::flashctl
