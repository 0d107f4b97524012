// Helpers for the global store's tests, crash test and benchmark (not part of the library).
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cache_service/global_store/block_key.h"
#include "common/base/check.h"

namespace flashserve::cache::testing {

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/fs_cache_XXXXXX";
    CHECK(mkdtemp(tmpl.data()) != nullptr) << "mkdtemp failed";
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline ModelFingerprint TestFingerprint(const std::string& name, uint32_t layout_version = 1) {
  return ComputeModelFingerprint(
      ModelIdentity{"config:" + name, "weights:" + name, "tokenizer:" + name, layout_version});
}

// A block key derived from a number (distinct numbers, distinct keys).
inline BlockKey KeyFor(uint64_t i) {
  BlockKey k;
  for (int b = 0; b < 8; ++b) k.bytes[b] = static_cast<uint8_t>(i >> (8 * b));
  k.bytes[31] = 0xA5;
  return k;
}

// Deterministic pseudo-random bytes for (seed, i): what a test expects to read back.
inline std::string PayloadFor(uint64_t seed, uint64_t i, size_t size) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + i);
  std::string out(size, '\0');
  for (size_t j = 0; j < size; j += 8) {
    const uint64_t r = rng();
    for (size_t b = 0; b < 8 && j + b < size; ++b) out[j + b] = static_cast<char>(r >> (8 * b));
  }
  return out;
}

// `n` tokens, deterministic in `seed`.
inline std::vector<TokenId> Tokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> t(n);
  for (TokenId& x : t) x = static_cast<TokenId>(rng() % 129280);
  return t;
}

}  // namespace flashserve::cache::testing
