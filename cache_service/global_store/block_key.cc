#include "cache_service/global_store/block_key.h"

#include "common/base/status_macros.h"

namespace flashserve::cache {
namespace {

// Domain tags: the first 8 bytes of each hashed message, so that a block key, a fingerprint and
// a SWA key can never be computed from the same bytes. The trailing digit is the encoding version.
constexpr std::string_view kFingerprintTag = "fs.mdl.1";
constexpr std::string_view kBlockTag = "fs.blk.1";
static_assert(kFingerprintTag.size() == 8 && kBlockTag.size() == 8);

void HashBlock(Sha256& h, const BlockKey& parent, std::span<const TokenId, kBlockTokens> tokens,
               const ModelFingerprint& fingerprint, std::string_view tenant_salt) {
  uint8_t token_bytes[kBlockTokens * 4];
  for (int i = 0; i < kBlockTokens; ++i) {
    const uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) token_bytes[4 * i + b] = static_cast<uint8_t>(t >> (8 * b));
  }
  h.Reset();
  h.Update(kBlockTag);
  h.UpdateField(parent.bytes.data(), parent.bytes.size());
  h.UpdateField(token_bytes, sizeof(token_bytes));
  h.UpdateField(fingerprint.digest.data(), fingerprint.digest.size());
  h.UpdateField(tenant_salt);
}

}  // namespace

absl::StatusOr<BlockKey> BlockKey::FromHex(std::string_view hex) {
  ASSIGN_OR_RETURN(Sha256Digest digest, DigestFromHex(hex), "block key");
  return BlockKey{digest};
}

ModelFingerprint ComputeModelFingerprint(const ModelIdentity& identity) {
  uint8_t version_le[4];
  for (int b = 0; b < 4; ++b)
    version_le[b] = static_cast<uint8_t>(identity.layout_version >> 8 * b);
  Sha256 h;
  h.Update(kFingerprintTag);
  h.UpdateField(identity.config_text);
  h.UpdateField(identity.weights_identity);
  h.UpdateField(identity.tokenizer_identity);
  h.UpdateField(version_le, sizeof(version_le));
  return ModelFingerprint{h.Finish(), identity.layout_version};
}

BlockKey ComputeBlockKey(const BlockKey& parent, std::span<const TokenId, kBlockTokens> tokens,
                         const ModelFingerprint& fingerprint, std::string_view tenant_salt) {
  Sha256 h;
  HashBlock(h, parent, tokens, fingerprint, tenant_salt);
  return BlockKey{h.Finish()};
}

std::vector<BlockKey> ChainKeys(std::span<const TokenId> tokens,
                                const ModelFingerprint& fingerprint, std::string_view tenant_salt) {
  const size_t blocks = tokens.size() / kBlockTokens;
  std::vector<BlockKey> keys;
  keys.reserve(blocks);
  Sha256 h;  // one EVP context for the whole chain
  BlockKey parent = BlockKey::Root();
  for (size_t i = 0; i < blocks; ++i) {
    HashBlock(h, parent, tokens.subspan(i * kBlockTokens).first<kBlockTokens>(), fingerprint,
              tenant_salt);
    parent = BlockKey{h.Finish()};
    keys.push_back(parent);
  }
  return keys;
}

}  // namespace flashserve::cache
