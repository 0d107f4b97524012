#include "cache_service/global_store/sha256.h"

#include <openssl/evp.h>

#include "absl/status/status.h"
#include "common/base/check.h"

namespace flashserve::cache {
namespace {
EVP_MD_CTX* Ctx(void* p) { return static_cast<EVP_MD_CTX*>(p); }
}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  CHECK(ctx_ != nullptr) << "EVP_MD_CTX_new: out of memory";
  Reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(Ctx(ctx_)); }

void Sha256::Reset() {
  CHECK(EVP_DigestInit_ex(Ctx(ctx_), EVP_sha256(), nullptr) == 1) << "EVP_DigestInit_ex(sha256)";
}

void Sha256::Update(const void* data, size_t size) {
  if (size == 0) return;
  CHECK(EVP_DigestUpdate(Ctx(ctx_), data, size) == 1) << "EVP_DigestUpdate";
}

void Sha256::UpdateU64(uint64_t v) {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(v >> (8 * i));
  Update(le, sizeof(le));
}

void Sha256::UpdateField(const void* data, size_t size) {
  UpdateU64(size);
  Update(data, size);
}

Sha256Digest Sha256::Finish() {
  Sha256Digest out{};
  unsigned int len = 0;
  CHECK(EVP_DigestFinal_ex(Ctx(ctx_), out.data(), &len) == 1) << "EVP_DigestFinal_ex";
  CHECK_EQ(len, out.size());
  return out;
}

Sha256Digest Sha256Of(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.Finish();
}

std::string DigestToHex(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(digest.size() * 2, '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xF];
  }
  return out;
}

absl::StatusOr<Sha256Digest> DigestFromHex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Sha256Digest out{};
  if (hex.size() != out.size() * 2) {
    return absl::InvalidArgumentError("a SHA-256 digest is 64 hex characters");
  }
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]);
    int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return absl::InvalidArgumentError("not a hex digit in digest");
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace flashserve::cache
