#include "cache_service/server/prefix_lookup.h"

#include <algorithm>

namespace flashserve::cache {

PrefixLookup LookupPrefix(GlobalStore& store, const SwaPool& swa,
                          const ModelFingerprint& fingerprint, std::span<const TokenId> tokens,
                          std::string_view tenant_salt, bool touch) {
  PrefixLookup out;
  out.chain = ChainKeys(tokens, fingerprint, tenant_salt);
  std::vector<std::optional<StoreEntryInfo>> present =
      store.Describe(fingerprint.digest, out.chain, /*touch=*/false);
  size_t n = 0;
  while (n < present.size() && present[n].has_value()) ++n;
  if (touch && n > 0) {
    // Touch only the prefix that will be used; an entry may have gone since the first probe.
    present = store.Describe(fingerprint.digest, std::span(out.chain).first(n), /*touch=*/true);
    n = 0;
    while (n < present.size() && present[n].has_value()) ++n;
  }
  out.blocks.reserve(n);
  for (size_t i = 0; i < n; ++i) out.blocks.push_back(*present[i]);
  out.hit_tokens = n * kBlockTokens;

  const BlockKey last = n > 0 ? out.chain[n - 1] : BlockKey::Root();
  const std::span<const TokenId> tail = tokens.subspan(out.hit_tokens);
  const size_t max_tail = std::min<size_t>(kBlockTokens - 1, tail.size());
  for (size_t t = max_tail + 1; t-- > 0;) {
    if (out.hit_tokens + t == 0) break;  // the empty prefix has no state to resume
    absl::StatusOr<SwaKey> key = ComputeSwaKey(last, tail.first(t), fingerprint, tenant_salt);
    if (!key.ok()) continue;  // t < 64 always holds; kept for safety
    std::optional<SwaEntryInfo> info = swa.Describe(fingerprint, *key);
    if (info.has_value()) {
      out.swa = PrefixSnapshot{out.hit_tokens + t, *info};
      break;
    }
  }
  return out;
}

}  // namespace flashserve::cache
