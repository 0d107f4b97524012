// A re-implementation of the parts of numpy's random stack that the Engram hash multipliers
// need (spec §4.8, fixture README quirk 7): `np.random.default_rng(seed)` for a non-negative
// integer seed (SeedSequence -> PCG64) and `Generator.integers(low, high, dtype=np.int64)`.
// Bit-exact with numpy >= 1.17 for these calls.
//
//   Pcg64 rng = Pcg64::FromSeed(10007 * layer_id);
//   ASSIGN_OR_RETURN(int64_t u, NumpyIntegersInt64(rng, 0, bound));
//
// Thread safety: SeedSequence is an immutable value; a Pcg64 must not be shared between threads
// without external locking (it mutates on every draw).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/status/statusor.h"

namespace flashserve::model::engram {

// numpy.random.SeedSequence(entropy) with no spawn key and the default pool of 4 words.
class SeedSequence {
 public:
  // Mixes `entropy` (split into little-endian 32-bit words; 0 is the single word 0) into the pool.
  static SeedSequence FromEntropy(uint64_t entropy);

  // SeedSequence.generate_state(n_words, np.uint32).
  std::vector<uint32_t> GenerateState(int n_words) const;

  // The mixed entropy pool (SeedSequence.pool).
  const std::array<uint32_t, 4>& pool() const { return pool_; }

 private:
  std::array<uint32_t, 4> pool_{};
};

// numpy's PCG64 bit generator (128-bit LCG state, XSL-RR output).
class Pcg64 {
 public:
  // PCG64(SeedSequence(seed)), which is what default_rng(seed) builds.
  static Pcg64 FromSeed(uint64_t seed);
  // pcg64_set_seed: state from seed words, stream from increment words (hi, lo order as numpy).
  static Pcg64 FromWords(absl::uint128 seed, absl::uint128 increment);

  // Advances and returns the next 64-bit output (PCG64.random_raw()).
  uint64_t NextUint64();

  absl::uint128 state() const { return state_; }
  absl::uint128 increment() const { return increment_; }

 private:
  void Step();
  absl::uint128 state_ = 0;
  absl::uint128 increment_ = 0;
};

// Generator.integers(low, high, dtype=np.int64, endpoint=False): one draw in [low, high), using
// numpy's unmasked (Lemire) bounded path on 64-bit outputs. Errors: InvalidArgument when
// high <= low; Unimplemented when 1 < high - low <= 2^32 (numpy then draws 32-bit halves, a
// path the Engram multipliers never take: it needs a compressed vocab above 1e9).
// A range of width 1 returns low without drawing, as numpy does.
absl::StatusOr<int64_t> NumpyIntegersInt64(Pcg64& rng, int64_t low, int64_t high);

}  // namespace flashserve::model::engram
