#include "model/engram/numpy_random.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flashserve::model::engram {
namespace {

// numpy/random/bit_generator.pyx constants.
constexpr uint32_t kInitA = 0x43b0d7e5;
constexpr uint32_t kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd;
constexpr uint32_t kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd;
constexpr uint32_t kMixMultR = 0x4973f715;
constexpr int kXShift = 16;

// Hashes one word; `hash_const` advances on every call (it is carried across calls).
uint32_t HashMix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t Mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// The 128-bit LCG multiplier of PCG64.
const absl::uint128 kPcgMultiplier =
    absl::MakeUint128(2549297995355413924ULL, 4865540595714422341ULL);

uint64_t RotateRight(uint64_t x, unsigned r) { return (x >> r) | (x << ((64 - r) & 63)); }

}  // namespace

SeedSequence SeedSequence::FromEntropy(uint64_t entropy) {
  std::vector<uint32_t> words;
  do {
    words.push_back(static_cast<uint32_t>(entropy));
    entropy >>= 32;
  } while (entropy != 0);

  SeedSequence seq;
  auto& pool = seq.pool_;
  uint32_t hash_const = kInitA;
  for (size_t i = 0; i < pool.size(); ++i) {
    pool[i] = HashMix(i < words.size() ? words[i] : 0, hash_const);
  }
  // Every word influences every other, so late entropy bits reach early pool words.
  for (size_t src = 0; src < pool.size(); ++src) {
    for (size_t dst = 0; dst < pool.size(); ++dst) {
      if (src != dst) pool[dst] = Mix(pool[dst], HashMix(pool[src], hash_const));
    }
  }
  for (size_t src = pool.size(); src < words.size(); ++src) {
    for (size_t dst = 0; dst < pool.size(); ++dst) {
      pool[dst] = Mix(pool[dst], HashMix(words[src], hash_const));
    }
  }
  return seq;
}

std::vector<uint32_t> SeedSequence::GenerateState(int n_words) const {
  std::vector<uint32_t> state(n_words > 0 ? n_words : 0);
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < state.size(); ++i) {
    uint32_t value = pool_[i % pool_.size()];
    value ^= hash_const;
    hash_const *= kMultB;
    value *= hash_const;
    value ^= value >> kXShift;
    state[i] = value;
  }
  return state;
}

Pcg64 Pcg64::FromSeed(uint64_t seed) {
  // generate_state(4, np.uint64) is the uint32 stream viewed as little-endian uint64 pairs.
  std::vector<uint32_t> w = SeedSequence::FromEntropy(seed).GenerateState(8);
  uint64_t u[4];
  for (int i = 0; i < 4; ++i) u[i] = uint64_t{w[2 * i]} | (uint64_t{w[2 * i + 1]} << 32);
  return FromWords(absl::MakeUint128(u[0], u[1]), absl::MakeUint128(u[2], u[3]));
}

Pcg64 Pcg64::FromWords(absl::uint128 seed, absl::uint128 increment) {
  Pcg64 rng;
  rng.increment_ = (increment << 1) | 1;
  rng.state_ = 0;
  rng.Step();
  rng.state_ += seed;
  rng.Step();
  return rng;
}

void Pcg64::Step() { state_ = state_ * kPcgMultiplier + increment_; }

uint64_t Pcg64::NextUint64() {
  Step();
  uint64_t folded = absl::Uint128High64(state_) ^ absl::Uint128Low64(state_);
  return RotateRight(folded, static_cast<unsigned>(absl::Uint128High64(state_) >> 58));
}

absl::StatusOr<int64_t> NumpyIntegersInt64(Pcg64& rng, int64_t low, int64_t high) {
  if (high <= low) {
    return absl::InvalidArgumentError(absl::StrCat("integers: low ", low, " >= high ", high));
  }
  // numpy works on the inclusive range width `rng` = high - 1 - low, in uint64.
  const uint64_t range = static_cast<uint64_t>(high) - 1 - static_cast<uint64_t>(low);
  if (range == 0) return low;
  if (range <= std::numeric_limits<uint32_t>::max()) {
    return absl::UnimplementedError(
        absl::StrCat("integers: range ", range, " uses numpy's 32-bit path, not implemented"));
  }
  // Lemire's nearly-divisionless rejection: the high word of draw * (range + 1) is uniform once
  // draws whose low word falls below (2^64 - (range + 1)) mod (range + 1) are rejected. The
  // threshold is only computed when the low word is small enough to possibly be rejected.
  const uint64_t range_excl = range + 1;
  absl::uint128 m = absl::uint128(rng.NextUint64()) * range_excl;
  uint64_t leftover = absl::Uint128Low64(m);
  if (leftover < range_excl) {
    const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - range) % range_excl;
    while (leftover < threshold) {
      m = absl::uint128(rng.NextUint64()) * range_excl;
      leftover = absl::Uint128Low64(m);
    }
  }
  return static_cast<int64_t>(static_cast<uint64_t>(low) + absl::Uint128High64(m));
}

}  // namespace flashserve::model::engram
