// Test / bench support: deterministic FP4 expert weights as a pure function of (seed, projection,
// expert, row, column), computed identically on the host (the CPU reference builds only the
// experts a test routes to) and on the device (cuda/moe_test_weights.cu fills all E experts, up
// to the released 384 × 3 × 2304 × 5120 without a host copy). Compiles as C++17 host + device
// code and as plain C++.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FS_MOE_TEST_HD __host__ __device__ __forceinline__
#else
#define FS_MOE_TEST_HD inline
#endif

namespace flashserve::kernels::moe_test {

// kRealistic: all 16 E2M1 codes uniformly, UE8M0 scales 2^-9 .. 2^-5 (|w| up to 0.19).
// kExactArith: all 16 codes, scales 2^-4 .. 2^2 (bytes 123 .. 129, so the decoder's two-multiply
// path for scales above 2 is used): every weight is a multiple of 2^-5, which with small integer
// activations keeps every fp32 partial sum of a GEMM exact, in any order (see moe_test_util.h).
enum class WeightKind : uint8_t { kRealistic = 0, kExactArith = 1 };

// Projections: 0 = w1 [I, D], 1 = w3 [I, D], 2 = w2 [D, I].
inline constexpr int kW1 = 0;
inline constexpr int kW3 = 1;
inline constexpr int kW2 = 2;

FS_MOE_TEST_HD uint64_t Mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

FS_MOE_TEST_HD uint64_t WeightHash(uint64_t seed, int proj, int64_t expert, int64_t row,
                                   int64_t col) {
  uint64_t h = Mix64(seed ^ (static_cast<uint64_t>(proj) << 56));
  h = Mix64(h ^ static_cast<uint64_t>(expert));
  h = Mix64(h ^ static_cast<uint64_t>(row));
  return Mix64(h ^ static_cast<uint64_t>(col));
}

// Packed code byte `byte` (elements 2·byte, 2·byte + 1) of row `row`: 8 bytes per hash.
FS_MOE_TEST_HD uint8_t WeightCodeByte(uint64_t seed, int proj, int64_t expert, int64_t row,
                                      int64_t byte) {
  return static_cast<uint8_t>(WeightHash(seed, proj, expert, row, byte / 8) >> (8 * (byte % 8)));
}

FS_MOE_TEST_HD uint8_t WeightScaleByte(uint64_t seed, WeightKind kind, int proj, int64_t expert,
                                       int64_t row, int64_t block) {
  const uint64_t h = WeightHash(seed ^ 0x5CA1Eull, proj, expert, row, block);
  return kind == WeightKind::kExactArith ? static_cast<uint8_t>(123 + h % 7)
                                         : static_cast<uint8_t>(118 + h % 5);
}

}  // namespace flashserve::kernels::moe_test
