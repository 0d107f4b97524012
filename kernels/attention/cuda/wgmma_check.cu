// RunWgmmaPrimitiveCheck (wgmma_check.h): the wgmma path's helpers in one CTA, outputs written
// in plain row-major order through the documented fragment layouts.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/cuda/sparse_attn_wgmma.cuh"
#include "kernels/attention/cuda/wgmma_check.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::kernels {
namespace attn_device {
namespace {

__global__ void __launch_bounds__(WgmmaShape::kThreads, 1)
    WgmmaCheckKernel(const uint16_t* q, const uint16_t* kv, const uint16_t* p, float* s_out,
                     float* o_out, float* s_split_out, uint32_t pv_lbo, uint32_t pv_sbo) {
  using W = WgmmaShape;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = AlignedSmem(smem_raw);
  const uint32_t base = SmemAddr(smem);
  const int tid = threadIdx.x;
  const int half = __shfl_sync(0xFFFFFFFFu, tid / 128, 0);  // warp-uniform to ptxas
  const int lane = tid % 32;
  const int r0 = ((tid % 128) / 32) * 16 + lane / 4;
  const int c2 = 2 * (lane % 4);
  for (int c = tid; c < 64 * W::kChunks; c += W::kThreads) {
    const int r = c / W::kChunks;
    const int chunk = c % W::kChunks;
    CpAsync16(base + W::kQOff + TileOffset(r, chunk), q + r * W::kD + chunk * 8, true);
    CpAsync16(base + W::kKvOff + TileOffset(r, chunk), kv + r * W::kD + chunk * 8, true);
  }
  CpAsyncCommit();
  CpAsyncWait<0>();
  wgmma::FenceProxyAsyncShared();
  __syncthreads();

  float s[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) s[i] = 0.0f;
  WgmmaQk(s, base + W::kQOff, base + W::kKvOff, half);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s_out[(r0 + 8 * (i >> 1)) * 64 + half * 32 + 8 * j + c2 + (i & 1)] = s[4 * j + i];
    }
  }

  // The split-K S of WgmmaKernel<512, true>: partials over dims 256·half.., swapped through the
  // (here unused) second KV buffer; warpgroup g writes columns 32g.. of its full sums, so both
  // warpgroups' sums are checked.
  {
    float sk[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) sk[i] = 0.0f;
    WgmmaQkSplitKIssue(sk, base + W::kQOff, base + W::kKvOff, half);
    WgmmaWait(sk);
    WgmmaSplitKExchange(sk, reinterpret_cast<float*>(smem + W::kKvOff + W::kTileBytes), half,
                        tid % 128);
#pragma unroll
    for (int j = 4 * half; j < 4 * half + 4; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s_split_out[(r0 + 8 * (i >> 1)) * 64 + 8 * j + c2 + (i & 1)] = sk[4 * j + i];
      }
    }
  }

  // Register A of k-step ks: a[0] (row r0, k 16ks + c2 ..+1), a[1] (row r0 + 8, same k),
  // a[2] (row r0, k 16ks + 8 + c2 ..+1), a[3] (row r0 + 8, same k); lower k in the low half.
  const auto* p32 = reinterpret_cast<const uint32_t*>(p);
  uint32_t a[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = r0 + 8 * (i & 1);
      const int k = 16 * ks + 8 * (i >> 1) + c2;
      a[ks][i] = p32[(row * 64 + k) / 2];
    }
  }
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
  WgmmaPv(acc, a, base + W::kKvOff, half, pv_lbo, pv_sbo);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o_out[(r0 + 8 * (i >> 1)) * W::kD + half * 256 + 8 * j + c2 + (i & 1)] = acc[4 * j + i];
    }
  }
}

// Adds 1 to *mismatches when the thread's 16 decoded values differ from the reference's.
__device__ __forceinline__ void CountIfDifferent(const uint32_t (&got)[2][4],
                                                 const uint32_t (&want)[2][4],
                                                 unsigned long long* mismatches) {
  bool same = true;
#pragma unroll
  for (int j = 0; j < 8; ++j) same &= got[j / 4][j % 4] == want[j / 4][j % 4];
  if (!same) atomicAdd(mismatches, 1ull);
}

// Thread i: scale byte i / 65536 and code pattern i % 65536 in the low half of w.x; the other
// three halves are other patterns derived from it (so every nibble position sees every code).
__global__ void Fp4DecodeCheckKernel(unsigned long long* mismatches) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536u * 256u) return;
  const uint32_t lo = i & 0xFFFFu;
  const uint2 w = make_uint2(lo | (((lo * 40503u) & 0xFFFFu) << 16),
                             ((lo * 2654435761u) >> 16) | ((lo ^ 0xA5C3u) << 16));
  const uint32_t sb = i >> 16;
  uint32_t got[2][4], want[2][4];
  DecodeFp4E4m3Block16(w, sb, got);
  const uint32_t c0[1] = {w.x}, c1[1] = {w.y};
  quant::device::Fmt<quant::BlockFormat::kFp4E2m1E4m3B16>::Decode(c0, sb, want[0]);
  quant::device::Fmt<quant::BlockFormat::kFp4E2m1E4m3B16>::Decode(c1, sb, want[1]);
  CountIfDifferent(got, want, mismatches);
}

// The window rows' FP8 decode: thread i: scale byte i / 65536, the 16 codes derived from pattern
// i % 65536 (every byte value at every position over the patterns).
__global__ void Fp8DecodeCheckKernel(unsigned long long* mismatches) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536u * 256u) return;
  const uint32_t lo = i & 0xFFFFu;
  const uint4 c =
      make_uint4(lo | (((lo * 40503u) & 0xFFFFu) << 16), lo * 2654435761u,
                 (lo * 0x9E3779B1u) ^ 0x5A5A5A5Au, (lo << 16) | ((lo * 7919u) & 0xFFFFu));
  const uint32_t sb = i >> 16;
  uint32_t got[2][4], want[2][4];
  DecodeFp8Ue8m0Block16(c, sb, got);
  const uint32_t c0[2] = {c.x, c.y}, c1[2] = {c.z, c.w};
  quant::device::Fmt<quant::BlockFormat::kFp8E4m3Ue8m0B32>::Decode(c0, sb, want[0]);
  quant::device::Fmt<quant::BlockFormat::kFp8E4m3Ue8m0B32>::Decode(c1, sb, want[1]);
  CountIfDifferent(got, want, mismatches);
}

}  // namespace
}  // namespace attn_device

namespace attention_internal {

int64_t CountRowDecodeMismatches(bool fp8) {
  unsigned long long* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, sizeof(*d)));
  CUDA_CHECK(cudaMemset(d, 0, sizeof(*d)));
  if (fp8) {
    attn_device::Fp8DecodeCheckKernel<<<65536u * 256u / 256u, 256>>>(d);
  } else {
    attn_device::Fp4DecodeCheckKernel<<<65536u * 256u / 256u, 256>>>(d);
  }
  CUDA_CHECK(cudaGetLastError());
  unsigned long long h = 0;
  CUDA_CHECK(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(d));
  return static_cast<int64_t>(h);
}

uint32_t WgmmaPvLeadingOffset() { return attn_device::WgmmaShape::kMnMajorLbo; }
uint32_t WgmmaPvStrideOffset() { return attn_device::WgmmaShape::kMnMajorSbo; }

void RunWgmmaPrimitiveCheck(const uint16_t* q, const uint16_t* kv, const uint16_t* p, float* s,
                            float* o, float* s_split, uint32_t pv_lbo, uint32_t pv_sbo) {
  using W = attn_device::WgmmaShape;
  auto* kernel = attn_device::WgmmaCheckKernel;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(W::kSmemBytes)));
  kernel<<<1, W::kThreads, W::kSmemBytes>>>(q, kv, p, s, o, s_split, pv_lbo, pv_sbo);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace attention_internal
}  // namespace flashserve::kernels
