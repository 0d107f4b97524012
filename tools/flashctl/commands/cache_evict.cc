// flashctl cache evict KEY... [--kind block|swa] [--force] [--json]
#include <iostream>

#include "tools/flashctl/commands/cache_common.h"

namespace flashserve::flashctl {

int RunCacheEvict(const CacheEvictOptions& options) {
  absl::StatusOr<std::vector<cache::EntryRef>> refs = ParseEntryRefs(options.keys, options.kind);
  if (!refs.ok()) return Fail("evict", refs.status(), true);
  auto client = ConnectCache(options.conn);
  if (!client.ok()) return Fail("evict", client.status(), true);
  absl::StatusOr<cache::EvictCounts> r = (*client)->Evict(*refs, options.force);
  if (!r.ok()) return Fail("evict", r.status());
  if (options.conn.json) {
    std::cout << nlohmann::ordered_json{{"evicted", r->evicted},
                                        {"not_found", r->not_found},
                                        {"skipped_pinned", r->skipped_pinned}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << "evicted " << r->evicted << ", not found " << r->not_found;
  if (r->skipped_pinned > 0) std::cout << ", pinned and kept " << r->skipped_pinned << " (--force)";
  std::cout << "\n";
  return 0;
}

}  // namespace flashserve::flashctl
