#include "model/sampling/philox.h"

namespace flashserve::sampling {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

inline PhiloxCounter Round(const PhiloxCounter& c, const PhiloxKey& k) {
  uint32_t hi0, lo0, hi1, lo1;
  MulHiLo(kMul0, c[0], &hi0, &lo0);
  MulHiLo(kMul1, c[2], &hi1, &lo1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

}  // namespace

std::array<uint32_t, 4> Philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  counter = Round(counter, key);
  for (int round = 1; round < 10; ++round) {
    key[0] += kWeyl0;
    key[1] += kWeyl1;
    counter = Round(counter, key);
  }
  return counter;
}

double PhiloxUniform(uint64_t seed, uint64_t position, RandomStream stream) {
  const std::array<uint32_t, 4> bits =
      Philox4x32_10({static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32),
                     static_cast<uint32_t>(stream), 0u},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  // 27 + 26 = 53 bits: every double k / 2^53, k in [0, 2^53), is equally likely.
  const uint64_t mantissa = (static_cast<uint64_t>(bits[0] >> 5) << 26) | (bits[1] >> 6);
  return static_cast<double>(mantissa) * 0x1.0p-53;
}

}  // namespace flashserve::sampling
