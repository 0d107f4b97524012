// Tagged arrival counters in the workspace, for kernels whose last-arriving CTA sums a tile's
// split partials (the weight-streaming kernel's split-K fix-up, linear_fp8_stream.cuh).
//
// A counter is a 64-bit word (tag | arrivals): the launcher gives every call a fresh nonzero
// 48-bit tag (NextCounterTag: bits 16..63; the low 16 bits count, at most 65535 arrivals), and an
// arrival that finds another tag in the word (0 after a finished call, or whatever the workspace
// held before) starts the count at 1. The CTA that completes the count resets the word to 0. So
// the counters need no zeroing before the first call, tolerate the workspace being used for
// anything between calls (a foreign word matches the tag with probability 2^-48), and a CUDA
// graph replaying the same tag finds its counters reset to 0.
#pragma once

#include <atomic>
#include <cstdint>

namespace flashserve::kernels::gemm_device {

// Counts one arrival at `counter`; returns the arrivals of this call so far, this one included.
// The word is normally 0 (reset by the previous call's last CTA) or already carries this call's
// tag: one CAS 0 -> tag + 1 (the first arrival) or one atomicAdd (the rest), no retries however
// many arrive at once (a CAS-increment loop made the k-th of s simultaneous arrivals wait ~k L2
// round trips). Only a foreign word (first use, the workspace used for something else) takes the
// CAS loop that replaces it with tag + 1.
__device__ __forceinline__ uint32_t Arrive(unsigned long long* counter, unsigned long long tag) {
  unsigned long long seen = atomicCAS(counter, 0ull, tag + 1);
  if (seen == 0ull) return 1;
  while (true) {
    if ((seen & ~0xFFFFull) == tag) {
      return static_cast<uint32_t>((atomicAdd(counter, 1ull) + 1) & 0xFFFFull);
    }
    const unsigned long long got = atomicCAS(counter, seen, tag + 1);
    if (got == seen) return 1;
    seen = got;
  }
}

// A fresh counter tag for one call (per capture for a CUDA graph, whose replays reuse it): the
// process's call count times an odd constant, shifted above the 16-bit arrival count — distinct
// for 2^48 calls, and unlike the small integers, zeros and floats a counter word may hold from
// other uses. One sequence for every kernel (an inline function's static is one object).
inline unsigned long long NextCounterTag() {
  static std::atomic<uint64_t> calls{0};
  uint64_t tag = 0;
  while (tag == 0) {
    tag = ((calls.fetch_add(1, std::memory_order_relaxed) + 1) * 0x9E3779B97F4A7C15ull) << 16;
  }
  return tag;
}

}  // namespace flashserve::kernels::gemm_device
