// flashctl cache verify [--fingerprint HEX] [--budget N] [--page N] [--evict] [--json]
#include <algorithm>
#include <iostream>

#include "tools/flashctl/commands/cache_common.h"

namespace flashserve::flashctl {

int RunCacheVerify(const CacheVerifyOptions& options) {
  cache::EntryFilterSpec filter;
  filter.swa = false;  // snapshots are verified on every read; the scan covers the SSD blocks
  if (!options.fingerprint.empty()) {
    absl::StatusOr<cache::Sha256Digest> d = ParseHexDigest(options.fingerprint, "--fingerprint");
    if (!d.ok()) return Fail("verify", d.status(), true);
    filter.fingerprint = *d;
  }
  if (options.page == 0) {
    return Fail("verify", absl::InvalidArgumentError("--page must be positive"), true);
  }
  auto client = ConnectCache(options.conn);
  if (!client.ok()) return Fail("verify", client.status(), true);

  uint64_t checked = 0, corrupt = 0, evicted = 0;
  std::vector<std::string> corrupt_keys;
  std::string token;
  bool complete = false;
  while (options.budget == 0 || checked < options.budget) {
    uint32_t n = options.page;
    if (options.budget != 0)
      n = static_cast<uint32_t>(std::min<uint64_t>(n, options.budget - checked));
    absl::StatusOr<cache::VerifyPageInfo> page =
        (*client)->Verify(filter, n, token, options.evict_corrupt);
    if (!page.ok()) return Fail("verify", page.status());
    checked += page->checked;
    corrupt += page->corrupt;
    evicted += page->evicted;
    for (const cache::EntryRef& r : page->corrupt_keys) {
      corrupt_keys.push_back(cache::DigestToHex(r.key));
    }
    token = page->next_page_token;
    if (token.empty()) {
      complete = true;
      break;
    }
  }

  if (options.conn.json) {
    std::cout << nlohmann::ordered_json{{"checked", checked},
                                        {"corrupt", corrupt},
                                        {"corrupt_keys", corrupt_keys},
                                        {"evicted", evicted},
                                        {"complete", complete}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << "checked " << checked << " blocks" << (complete ? "" : " (budget reached)") << ": "
              << corrupt << " corrupt";
    if (options.evict_corrupt) std::cout << ", " << evicted << " evicted";
    std::cout << "\n";
    for (const std::string& k : corrupt_keys) std::cout << "  corrupt " << k << "\n";
    if (corrupt > 0 && !options.evict_corrupt) {
      std::cout << "corrupt blocks are served as misses; remove them with --evict\n";
    }
  }
  return corrupt > 0 ? 3 : 0;
}

}  // namespace flashserve::flashctl
