#include "cache_service/swa_pool/swa_key.h"

#include <vector>

#include "common/base/check.h"

namespace flashserve::cache {
namespace {
constexpr std::string_view kSwaTag = "fs.swa.1";
}  // namespace

absl::StatusOr<SwaKey> ComputeSwaKey(const BlockKey& last_full_block, std::span<const TokenId> tail,
                                     const ModelFingerprint& fingerprint,
                                     std::string_view tenant_salt) {
  if (tail.size() >= static_cast<size_t>(kBlockTokens)) {
    return absl::InvalidArgumentError(
        "SWA key: the tail after the last full block has >= 64 tokens");
  }
  uint8_t tail_bytes[kBlockTokens * 4];
  for (size_t i = 0; i < tail.size(); ++i) {
    const uint32_t t = static_cast<uint32_t>(tail[i]);
    for (int b = 0; b < 4; ++b) tail_bytes[4 * i + b] = static_cast<uint8_t>(t >> (8 * b));
  }
  Sha256 h;
  h.Update(kSwaTag);
  h.UpdateField(last_full_block.bytes.data(), last_full_block.bytes.size());
  h.UpdateField(tail_bytes, 4 * tail.size());
  h.UpdateField(fingerprint.digest.data(), fingerprint.digest.size());
  h.UpdateField(tenant_salt);
  return SwaKey{h.Finish()};
}

SwaKey SwaKeyForPrefix(std::span<const TokenId> prefix, const ModelFingerprint& fingerprint,
                       std::string_view tenant_salt) {
  const std::vector<BlockKey> chain = ChainKeys(prefix, fingerprint, tenant_salt);
  const BlockKey last = chain.empty() ? BlockKey::Root() : chain.back();
  absl::StatusOr<SwaKey> key =
      ComputeSwaKey(last, prefix.subspan(chain.size() * kBlockTokens), fingerprint, tenant_salt);
  CHECK_OK(key.status());  // the tail is shorter than a block by construction
  return *key;
}

}  // namespace flashserve::cache
