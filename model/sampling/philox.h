// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Output is a pure function of (counter, key), so a request's random
// numbers depend only on its seed and the position of the token being drawn — never on how
// many other requests share the batch or on how many numbers were drawn before. The same
// function is cheap on a GPU, so a device sampler can reproduce this stream.
#pragma once

#include <array>
#include <cstdint>

namespace flashserve::sampling {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// The 10-round Philox4x32 bijection; matches Random123's philox4x32_10 known-answer vectors.
std::array<uint32_t, 4> Philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// Independent random streams per token position; each draw uses its own counter.
enum class RandomStream : uint32_t {
  kSample = 0,    // inverse-CDF draw of a sampled token (plain decoding, bonus token)
  kAccept = 1,    // speculative acceptance test of a draft token
  kResidual = 2,  // draw from the residual distribution after a rejection
};

// A uniform double in [0, 1) carrying 53 random bits: Philox of counter (position low, position
// high, stream, 0) under key (seed low, seed high). Pure; thread-safe; ~20 ns.
double PhiloxUniform(uint64_t seed, uint64_t position, RandomStream stream);

}  // namespace flashserve::sampling
