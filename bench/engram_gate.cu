// The bench-local Engram gate (engram_gate.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "bench/engram_gate.h"
#include "kernels/common/cuda_check.h"

namespace flashserve::bench {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Bf16ToF32(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

// Tree sum over the block in a fixed order, so the result does not vary between runs.
__device__ float BlockSum(float v, float* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) smem[threadIdx.x] += smem[threadIdx.x + s];
    __syncthreads();
  }
  const float r = smem[0];
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kThreads) EngramGateKernel(EngramGateParams p) {
  __shared__ float smem[kThreads];
  const int64_t t = blockIdx.x / 4;
  const int64_t c = blockIdx.x % 4;
  const uint16_t* h = p.h + t * p.h_stride + c * p.dim;
  const uint16_t* key = p.key + t * p.key_stride + c * p.dim;
  const uint16_t* qw = p.q_weight + c * p.dim;
  const uint16_t* kw = p.k_weight + c * p.dim;
  float hh = 0.f, kk = 0.f, dot = 0.f;
  for (int64_t d = threadIdx.x; d < p.dim; d += kThreads) {
    const float hv = Bf16ToF32(h[d]);
    const float kv = Bf16ToF32(key[d]);
    const float w = __fmul_rn(Bf16ToF32(qw[d]), Bf16ToF32(kw[d]));
    hh = __fadd_rn(hh, __fmul_rn(hv, hv));
    kk = __fadd_rn(kk, __fmul_rn(kv, kv));
    dot = __fadd_rn(dot, __fmul_rn(__fmul_rn(hv, w), kv));
  }
  hh = BlockSum(hh, smem);
  kk = BlockSum(kk, smem);
  dot = BlockSum(dot, smem);
  if (threadIdx.x == 0) {
    const float n = static_cast<float>(p.dim);
    float s = dot * (1.0f / sqrtf(hh / n + 1e-20f)) * (1.0f / sqrtf(kk / n + 1e-20f));
    s = s * (1.0f / sqrtf(n));
    const float g = copysignf(sqrtf(fmaxf(fabsf(s), 1e-6f)), s);
    p.gate[t * 4 + c] = 1.0f / (1.0f + expf(-g));
  }
}

}  // namespace

void LaunchEngramGate(const EngramGateParams& p, cudaStream_t stream) {
  if (p.tokens <= 0) return;
  EngramGateKernel<<<static_cast<unsigned>(p.tokens * 4), kThreads, 0, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace flashserve::bench
