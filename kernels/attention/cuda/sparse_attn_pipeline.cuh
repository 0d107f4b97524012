// PTX wrappers for the warp-specialised wgmma kernel (sparse_attn_wgmma_ws.cuh): shared-memory
// mbarriers (phase-parity waits), CTA named barriers over a subset of warps, and the per-warpgroup
// register reallocation. Device code only, sm_90a.
//
// References (PTX ISA 9.1; docs.nvidia.com/cuda/parallel-thread-execution):
// - §9.7.13.15 "Parallel Synchronization and Communication Instructions: mbarrier": init (count of
//   expected arrivals per phase), arrive (release at CTA scope by default), try_wait.parity
//   (acquire at CTA scope by default; true once the phase whose parity is given has completed —
//   a freshly initialised barrier is in phase 0, so waiting on parity 1 returns at once, the
//   "previous phase" convention every producer / consumer ring on it uses).
// - §9.7.13.1 bar.sync a, b: named barrier a (0..15; 0 is __syncthreads) over b threads (a
//   multiple of the warp size), so two warpgroups can meet without the producer warpgroup.
// - §9.7.17.1 setmaxnreg.{inc,dec}.sync.aligned.u32 N (sm_90a): every warp of the warpgroup
//   executes it; N in 24..256, a multiple of 8. The producer gives registers back, the consumers
//   take them, within the CTA's allocation.
#pragma once

#include <cstdint>

namespace flashserve::kernels::attn_device {

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// One arrival on the barrier's current phase (release, CTA scope).
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
               : "memory");
}

// Spins until the phase of parity `parity` has completed (acquire, CTA scope).
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// Whether the phase of parity `parity` has completed, without waiting (test_wait: acquire, CTA
// scope, when it returns true).
__device__ __forceinline__ bool MbarTest(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Named barrier kId over kThreads threads that also returns whether `v` is true in all of them
// (bar.red.and.pred).
template <uint32_t kId, uint32_t kThreads>
__device__ __forceinline__ bool NamedBarrierAnd(bool v) {
  uint32_t r = 0;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.and.pred q, %2, %3, p;\n"
      "selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(v)), "n"(kId), "n"(kThreads)
      : "memory");
  return r != 0;
}

// Named barrier kId (1..15) over kThreads threads (immediates, so ptxas sees which barrier).
template <uint32_t kId, uint32_t kThreads>
__device__ __forceinline__ void NamedBarrier() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

// Arrives on named barrier kId without waiting (release; a bar.sync of the other participants
// completes the phase): the producer side of a one-way hand-off between warp groups.
template <uint32_t kId, uint32_t kThreads>
__device__ __forceinline__ void NamedArrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

template <uint32_t kRegs>
__device__ __forceinline__ void SetMaxRegsInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void SetMaxRegsDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace flashserve::kernels::attn_device
