// bench_moe_wgmma_rate's kernel (moe_wgmma_rate.h): wgmma alone, in the register-sourced expert
// GEMM's shapes, so that its issue rate can be compared with the dense peak in the same run.
// The operands are constant bf16 1.0 (the tensor cores' rate does not depend on the values) and
// the accumulators are kept alive by a never-taken store.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/base/check.h"
#include "kernels/common/cp_async_mma.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/common/wgmma.cuh"
#include "kernels/moe/moe_wgmma_rate.h"

namespace flashserve::kernels::moe_bench {
namespace {

constexpr int kThreads = 256;               // two warpgroups
constexpr uint32_t kLbo = 16;               // unused by K-major swizzled layouts
constexpr uint32_t kSbo = 1024;             // 8 rows of 128 bytes
constexpr uint32_t kBBytes = 256 * 128;     // B: up to 256 rows × one 64-K column block
constexpr uint32_t kABytes = 2 * 64 * 128;  // SS A: 64 rows per warpgroup
constexpr int kSmemBytes = static_cast<int>(kBBytes + kABytes) + 1024;

using ::flashserve::kernels::cuda_common::SmemAddr;

// One commit group of kPerGroup wgmmas reading A set kSet (RS) / the warpgroup's A tile (SS).
template <int kN, bool kRs, int kPerGroup, int kSets, int kAcc, int kSet>
__device__ __forceinline__ void Group(float (&acc)[kSets][kAcc], uint32_t (&a)[2][kPerGroup][4],
                                      uint32_t b_addr, uint32_t a_addr) {
#pragma unroll
  for (int s = 0; s < kSets; ++s) wgmma::FenceOperands(acc[s]);
    // The A set's last writes (touch_a) stay before the fence (register ops may otherwise move
    // across it, and ptxas would inject a warpgroup.arrive: C7519).
#pragma unroll
  for (int i = 0; i < kPerGroup; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) wgmma::FenceOperand(a[kSet][i][r]);
  }
  wgmma::Fence();
#pragma unroll
  for (int i = 0; i < kPerGroup; ++i) {
    // k16 step i % 4 of the 64-K column block (+32 bytes inside the swizzle row); m-block
    // (i / 2) % kSets as the RS GEMM's (m-block, k16 step) order.
    const uint64_t db = wgmma::MakeSw128Desc(b_addr + (i % 4) * 32, kLbo, kSbo);
    float* d = acc[(i / 2) % kSets];
    if constexpr (kRs) {
      if constexpr (kN == 128) {
        wgmma::WgmmaM64N128K16RS(d, a[kSet][i], db, true);
      } else if constexpr (kN == 96) {
        wgmma::WgmmaM64N96K16RS(d, a[kSet][i], db, true);
      } else if constexpr (kN == 32) {
        wgmma::WgmmaM64N32K16RS(d, a[kSet][i], db, true);
      } else if constexpr (kN == 16) {
        wgmma::WgmmaM64N16K16RS(d, a[kSet][i], db, true);
      } else {
        wgmma::WgmmaM64N64K16RS(d, a[kSet][i], db, true);
      }
    } else {
      const uint64_t da = wgmma::MakeSw128Desc(a_addr + (i % 4) * 32, kLbo, kSbo);
      if constexpr (kN == 256) {
        wgmma::WgmmaM64N256K16SS(*reinterpret_cast<float(*)[128]>(d), da, db, true);
      } else if constexpr (kN == 32) {
        wgmma::WgmmaM64N32K16SS(*reinterpret_cast<float(*)[16]>(d), da, db, true);
      } else {
        wgmma::WgmmaM64N64K16SS(*reinterpret_cast<float(*)[32]>(d), da, db, true);
      }
    }
  }
  wgmma::CommitGroup();
#pragma unroll
  for (int s = 0; s < kSets; ++s) wgmma::FenceOperands(acc[s]);
}

template <int kN, bool kRs, int kPerGroup, bool kTouchA>
__global__ void __launch_bounds__(kThreads, 1)
    WgmmaRateKernel(int groups, long long* cycles, float* sink) {
  constexpr int kSets = kN == 256 ? 1 : 2;  // accumulator sets (m-blocks)
  constexpr int kAcc = kN / 2;              // fp32 per thread and m64 block
  extern __shared__ uint8_t rate_smem_raw[];
  const uint32_t raw = SmemAddr(rate_smem_raw);
  uint8_t* smem = rate_smem_raw + (((raw + 1023u) & ~1023u) - raw);
  for (uint32_t i = threadIdx.x; i < (kBBytes + kABytes) / 16; i += kThreads) {
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0x3F803F80u, 0x3F803F80u, 0x3F803F80u,
                                                   0x3F803F80u);  // bf16 1.0
  }
  wgmma::FenceProxyAsyncShared();
  __syncthreads();
  const int wg = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 128, 0);
  const uint32_t b_addr = SmemAddr(smem);
  const uint32_t a_addr = b_addr + kBBytes + static_cast<uint32_t>(wg) * 64 * 128;
  float acc[kSets][kAcc];
#pragma unroll
  for (int s = 0; s < kSets; ++s) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[s][i] = 0.0f;
  }
  uint32_t a[2][kPerGroup][4];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
#pragma unroll
    for (int i = 0; i < kPerGroup; ++i) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[s][i][r] = 0x3F803F80u;
    }
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int g = 0; g < groups; g += 2) {
    Group<kN, kRs, kPerGroup, kSets, kAcc, 0>(acc, a, b_addr, a_addr);
    wgmma::WaitGroup<1>();  // the previous group (set 1) has finished
    if constexpr (kRs && kTouchA) {
#pragma unroll
      for (int i = 0; i < kPerGroup; ++i) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[1][i][r] ^= static_cast<uint32_t>(g) & 0x00010001u;
      }
    }
    Group<kN, kRs, kPerGroup, kSets, kAcc, 1>(acc, a, b_addr, a_addr);
    wgmma::WaitGroup<1>();
    if constexpr (kRs && kTouchA) {
#pragma unroll
      for (int i = 0; i < kPerGroup; ++i) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[0][i][r] ^= static_cast<uint32_t>(g) & 0x00010001u;
      }
    }
  }
  wgmma::WaitGroup<0>();
#pragma unroll
  for (int s = 0; s < kSets; ++s) wgmma::FenceOperands(acc[s]);
  const long long t1 = clock64();
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float total = 0.0f;
#pragma unroll
  for (int s = 0; s < kSets; ++s) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) total += acc[s][i];
  }
  if (total == -1.0f) sink[threadIdx.x] = total;  // never: the products are positive
}

template <int kN, bool kRs, int kPerGroup, bool kTouchA>
auto* KernelFor() {
  auto* kernel = WgmmaRateKernel<kN, kRs, kPerGroup, kTouchA>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  return kernel;
}

using RateKernel = void (*)(int, long long*, float*);

RateKernel Select(const WgmmaRateCase& c) {
  if (c.register_a) {
    if (c.n == 128) {
      if (c.per_group == 4) {
        return c.touch_a ? KernelFor<128, true, 4, true>() : KernelFor<128, true, 4, false>();
      }
      return KernelFor<128, true, 8, true>();  // without touch_a ptxas serialises it (C7512)
    }
    // The RS GEMM's narrow tile widths (its width sets): 4 per group, as its blocks.
    if (c.n == 96)
      return c.touch_a ? KernelFor<96, true, 4, true>() : KernelFor<96, true, 4, false>();
    if (c.n == 32)
      return c.touch_a ? KernelFor<32, true, 4, true>() : KernelFor<32, true, 4, false>();
    if (c.n == 16)
      return c.touch_a ? KernelFor<16, true, 4, true>() : KernelFor<16, true, 4, false>();
    if (c.per_group == 4) {
      return c.touch_a ? KernelFor<64, true, 4, true>() : KernelFor<64, true, 4, false>();
    }
    return c.touch_a ? KernelFor<64, true, 8, true>() : KernelFor<64, true, 8, false>();
  }
  if (c.n == 256) return KernelFor<256, false, 4, false>();
  if (c.n == 32) {
    return c.per_group == 4 ? KernelFor<32, false, 4, false>() : KernelFor<32, false, 8, false>();
  }
  return c.per_group == 4 ? KernelFor<64, false, 4, false>() : KernelFor<64, false, 8, false>();
}

}  // namespace

bool WgmmaRateCaseSupported(const WgmmaRateCase& c) {
  if (c.per_group != 4 && c.per_group != 8) return false;
  if (c.register_a) {
    if (c.n == 16 || c.n == 32 || c.n == 96) return c.per_group == 4;
    return c.n == 64 || (c.n == 128 && (c.per_group == 4 || c.touch_a));
  }
  return !c.touch_a && (c.n == 32 || c.n == 64 || (c.n == 256 && c.per_group == 4));
}

WgmmaRateResult MeasureWgmmaRate(const WgmmaRateCase& c, int groups, int iters) {
  CHECK(WgmmaRateCaseSupported(c)) << "unsupported wgmma rate case";
  CHECK(groups > 0 && groups % 2 == 0) << "groups must be even and positive";
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  RateKernel kernel = Select(c);
  long long* cycles = nullptr;
  float* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&cycles, sizeof(long long) * sms));
  CUDA_CHECK(cudaMalloc(&sink, sizeof(float) * kThreads));
  WgmmaRateResult r;
  r.micros = MedianEventMicros(2, iters, [&] {
    kernel<<<sms, kThreads, kSmemBytes>>>(groups, cycles, sink);
    CUDA_CHECK(cudaGetLastError());
  });
  std::vector<long long> host(static_cast<size_t>(sms));
  CUDA_CHECK(cudaMemcpy(host.data(), cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(cycles));
  CUDA_CHECK(cudaFree(sink));
  double mean = 0;
  for (long long v : host) mean += static_cast<double>(v);
  mean /= sms;
  const double wgmmas_per_sm = 2.0 * groups * c.per_group;  // two warpgroups
  r.cycles_per_wgmma = mean / wgmmas_per_sm;
  const double flops = 2.0 * 64 * c.n * 16 * wgmmas_per_sm * sms;
  r.tflops = flops / (r.micros * 1e-6) / 1e12;
  return r;
}

}  // namespace flashserve::kernels::moe_bench
