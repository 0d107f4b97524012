// The Ampere-style copy and MMA primitives every kernel family uses: shared-memory addresses,
// cp.async (16-byte zero-filling and 4-byte copies, commit, wait) and the bf16 mma.sync
// m16n8k16 with fp32 accumulators, as inline PTX. Device code only. The families' device headers
// (kernels/attention, gemm, mhc, moe) bring these names into their own namespaces with using
// declarations, so their kernels call them unqualified.
//
// PTX ISA 9.1: cp.async (§9.7.9.25.3.1: with src-size < cp-size the rest of the destination is
// zero-filled and nothing past src-size is read; .cg caches in L2 only and allows 16 bytes only,
// .ca allows 4, 8 and 16), cp.async.commit_group / wait_group (§9.7.9.25.3.2–3), mma.sync
// m16n8k16 .bf16 (§9.7.14.5.8: A row-major 16 × 16, B column-major 16 × 8, the fragment layouts
// of "Matrix Fragments for mma.m16n8k16").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashserve::kernels::cuda_common {

// The shared-memory window address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The copies, the commit and the waits carry a "memory" clobber, so that the compiler keeps this
// thread's own shared-memory accesses on their side of each (session 68; no cubin changed).

// 16 bytes global -> shared (L2 only); zero-filled, and the source not read, when !valid.
__device__ __forceinline__ void CpAsync16(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  CpAsync16(SmemAddr(smem), gmem, valid);
}

// 4 bytes global -> shared (cp.async.ca); source and destination 4-byte aligned.
__device__ __forceinline__ void CpAsync4(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem) {
  CpAsync4(SmemAddr(smem), gmem);
}
// The same, zero-filled (the source not read) when !valid.
__device__ __forceinline__ void CpAsync4(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still in flight. Copies not
// yet committed belong to no group and are NOT waited for (use CpAsyncWaitAll).
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// An arrival on mbarrier `bar`'s current phase, made by the hardware once every cp.async this
// thread issued before it has landed; .noinc: it counts against the barrier's expected arrivals
// (the init count includes it). The thread does not wait. Such copies are never committed: wait
// for them with CpAsyncWaitAll, not CpAsyncWait.
__device__ __forceinline__ void CpAsyncMbarrierArriveNoinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Waits for every copy this thread issued, committed or not (cp.async.wait_all: a commit, then a
// wait for all groups). The form for copies tracked by an mbarrier (cp.async.mbarrier.arrive),
// which are never committed: CpAsyncWait<0> would return with them still in flight.
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// c += a · b: m16n8k16, a row-major 16 × 16 bf16, b column-major 16 × 8 bf16, fp32 accumulators.
// Not volatile: it has no side effect, so the compiler may interleave it with other work (the
// weight decoders of the GEMMs).
__device__ __forceinline__ void MmaBf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace flashserve::kernels::cuda_common
