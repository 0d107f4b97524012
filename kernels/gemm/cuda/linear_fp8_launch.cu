// LaunchLinearFp8 (gemm_cuda.h): validation and plan on the host, then either the one
// weight-streaming kernel (cuda/linear_fp8_stream.cuh, M <= 16: QDQ, GEMM and split-K reduction
// in one launch) or the activation QDQ or quantisation (kernels/quant), the GEMM
// (cuda/linear_fp8_gemm.cuh mma.sync, cuda/wgmma_fp8_gemm.cuh FP8 wgmma,
// cuda/wgmma_linear_gemm.cuh bf16-expansion wgmma) and, for split plans, the reduction.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/per_device_cache.h"
#include "kernels/gemm/cuda/fp8_weight_expand.cuh"
#include "kernels/gemm/cuda/linear_fp8_gemm.cuh"
#include "kernels/gemm/cuda/linear_fp8_rs.cuh"
#include "kernels/gemm/cuda/linear_fp8_stream.cuh"
#include "kernels/gemm/cuda/linear_fp8_stream_tma.cuh"
#include "kernels/gemm/cuda/wgmma_fp8_gemm.cuh"
#include "kernels/gemm/cuda/wgmma_linear_gemm.cuh"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"
#include "kernels/gemm/cuda/wgmma_ws_tail.cuh"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using gemm_device::GemmArgs;
using gemm_device::ReduceArgs;

// The plan counts K steps and splits in the kernel's stage width.
static_assert(gemm_device::kBK == kLinearCudaKStep);
static_assert(wgmma_linear::kBK == kLinearCudaWgmmaKStep);
static_assert(wgmma_linear::kBM == kLinearCudaWgmmaRows);
static_assert(wgmma_linear::kBN == kLinearCudaWgmmaCols);
static_assert(wgmma_ws::kBK == kLinearCudaWgmmaKStep);
static_assert(wgmma_ws::kBN == kLinearCudaWgmmaCols);
static_assert(wgmma_ws::kTailMaxRanges == kLinearCudaTailMaxRanges);
static_assert(wgmma_ws::kTailTileRows == kLinearCudaWgmmaRows);
static_assert(wgmma_ws::kTailTileCols == kLinearCudaWgmmaCols);
static_assert(wgmma_fp8::kBM == kLinearCudaWgmmaRows);
static_assert(wgmma_fp8::kBN == kLinearCudaWgmmaFp8Cols);
static_assert(wgmma_fp8::kBK == kLinearCudaWgmmaFp8KStep);
static_assert(gemm_device::kStreamUnitK == kLinearCudaKStep);
static_assert(gemm_device::kStreamRows == kLinearCudaStreamCols);
static_assert(8 * 2 == kLinearCudaStreamMaxRows);  // two n8 tiles per CTA
static_assert(linear_rs::kBK == kLinearCudaKStep);
static_assert(linear_rs::kBN == kLinearCudaRsCols);
static_assert(linear_rs::kMaxBM == kLinearCudaRsMaxRows);
static_assert(linear_rs::kMaxStripPitch == kLinearCudaMaxK / 32);

size_t AlignUp256(size_t v) { return (v + 255) / 256 * 256; }

template <int kMT>
void LaunchGemm(const GemmArgs& g, const LinearCudaPlan& plan, cudaStream_t stream) {
  using S = gemm_device::Shape<kMT>;
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = gemm_device::LinearFp8GemmKernel<kMT>;
  EnsureSmemLimit(kernel, S::kPipeBytes + gemm_device::kMaxStripBytes, smem_set);
  const int smem = S::kPipeBytes + (4 * g.strip_pitch + 15) / 16 * 16;
  const dim3 grid(static_cast<unsigned>(plan.m_tiles), static_cast<unsigned>(plan.n_tiles),
                  static_cast<unsigned>(plan.splits));
  kernel<<<grid, gemm_device::kThreads, smem, stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

// Expands the weight (f.w codes, f.w_scale) into bf16 `out` [N, K] (fp8_weight_expand.cuh).
void LaunchExpand(const GemmArgs& f, uint16_t* out, cudaStream_t stream) {
  gemm_device::ExpandArgs a;
  a.codes = f.w;
  a.scales = f.w_scale;
  a.n = f.n;
  a.k = f.k;
  a.out = out;
  const int64_t chunks = f.n * (f.k / 16);
  // Enough CTAs to fill the device several times over; the grid-stride loop takes the rest.
  const int64_t blocks = std::min<int64_t>(
      (chunks + gemm_device::kExpandThreads - 1) / gemm_device::kExpandThreads, 132 * 16);
  gemm_device::ExpandFp8WeightKernel<<<static_cast<unsigned>(blocks), gemm_device::kExpandThreads,
                                       0, stream>>>(a);
  CUDA_CHECK(cudaGetLastError());
}

// The warp-specialised kernel's tile width on expanded weights (LinearCudaParams::ws_tile_cols):
// 256 where the plan has a stream-K tail. The SM count (cached per device) is read only for the
// automatic width.
int64_t WsTileCols(int64_t requested, const GemmArgs& f, const LinearCudaPlan& plan) {
  if (plan.tail.ranges > 1) return kLinearCudaWgmmaCols;
  const int sms = requested == 0 ? SmCount(CurrentDevice()) : 0;
  return LinearCudaWsTileColsFor(requested, f.m, f.n, plan.splits, sms);
}

// The stream-K tail's reduction of the range slots (f: the call's outputs) after the GEMM.
void LaunchTail(const GemmArgs& f, const LinearCudaPlan& plan, float* partial,
                cudaStream_t stream) {
  wgmma_ws::TailReduceArgs r;
  r.partial = partial;
  r.bias = f.bias;
  r.y_bf16 = f.y_bf16;
  r.y_f32 = f.y_f32;
  r.y_stride = f.y_stride;
  r.y_pair = f.y_pair;
  r.m = f.m;
  r.n = f.n;
  r.m_tiles = plan.m_tiles;
  r.begin = plan.tail.begin;
  r.tail_tiles = plan.m_tiles * plan.n_tiles - plan.tail.begin;
  r.ranges = static_cast<int>(plan.tail.ranges);
  wgmma_ws::LaunchTailReduce(r, stream);
}

// The warp-specialised wgmma kernel on the QDQ activations f.a (stride f.a_stride) and either
// the raw codes (decoded in place by the producer) or, when `expanded` is non-null, the weight
// first expanded there to bf16 (in tiles of ws_tile_cols columns: WsTileCols); `multicast`: in
// CTA pairs along M sharing each weight box (LinearCudaParams::ws_multicast; never with a
// stream-K tail); `expand`: write the expansion there first (false: it is the weight's kept one,
// Fp8LinearDevice::expanded). False (nothing enqueued) when the driver cannot make the TMA
// descriptors.
bool LaunchWgmmaWs(const GemmArgs& f, const LinearCudaPlan& plan, uint16_t* expanded, bool expand,
                   int64_t ws_tile_cols, bool multicast, float* tail_partial, cudaStream_t stream) {
  wgmma_ws::Args g;
  const bool fp8 = expanded == nullptr;
  const bool pair = multicast && plan.tail.ranges <= 1;
  const int64_t cols = fp8 ? int64_t{wgmma_ws::kBN} : WsTileCols(ws_tile_cols, f, plan);
  // A pair's CTAs each load half of the weight box (wgmma_ws::IssueStage).
  const auto b_rows = static_cast<uint32_t>(pair ? cols / 2 : cols);
  if (!wgmma_ws::MakeTmaOperand(&g.a, f.a, 2, f.k, f.m, f.a_stride, 1, 0, wgmma_ws::kBK,
                                wgmma_ws::kBM, true) ||
      !(fp8 ? wgmma_ws::MakeTmaOperand(&g.b, f.w, 1, f.k, f.n, f.k, 1, 0, wgmma_ws::kBK, b_rows,
                                       false)
            : wgmma_ws::MakeTmaOperand(&g.b, expanded, 2, f.k, f.n, f.k, 1, 0, wgmma_ws::kBK,
                                       b_rows, true))) {
    return false;
  }
  g.w_scale = f.w_scale;
  g.bias = f.bias;
  g.m = f.m;
  g.n = f.n;
  g.k = f.k;
  g.steps_per_split = plan.steps_per_split;
  g.splits = static_cast<int>(plan.splits);
  g.groups = 1;
  g.y_bf16 = f.y_bf16;
  g.y_f32 = f.y_f32;
  g.y_stride = f.y_stride;
  g.y_pair = f.y_pair;
  g.partial = f.partial;
  if (plan.tail.ranges > 1) {
    g.whole = plan.tail.begin;
    g.tail_ranges = static_cast<int>(plan.tail.ranges);
    g.tail_steps = plan.tail.steps;
    g.tail_partial = tail_partial;
  }
  if (fp8) {
    if (pair) {
      wgmma_ws::Launch<true, wgmma_ws::kBN, 2>(g, plan.m_tiles, plan.n_tiles, stream);
    } else {
      wgmma_ws::Launch<true>(g, plan.m_tiles, plan.n_tiles, stream);
    }
  } else {
    if (expand) LaunchExpand(f, expanded, stream);
    if (pair) {
      wgmma_ws::LaunchBf16<2>(g, cols, plan.m_tiles, stream);
    } else {
      wgmma_ws::LaunchBf16(g, cols, plan.m_tiles, stream);
    }
  }
  if (plan.tail.ranges > 1) LaunchTail(f, plan, tail_partial, stream);
  return true;
}

// The wgmma kernel (plan.tile_rows == 128) on the QDQ activations f.a (stride f.a_stride).
// `expanded`: the bf16 weight (the workspace's region to expand into, or with !expand the kept
// one) when plan.expand_weights, else null.
void LaunchWgmma(const GemmArgs& f, const LinearCudaPlan& plan, uint16_t* expanded, bool expand,
                 int64_t ws_tile_cols, bool multicast, float* tail_partial, cudaStream_t stream) {
  if (plan.warp_specialised &&
      LaunchWgmmaWs(f, plan, expanded, expand, ws_tile_cols, multicast, tail_partial, stream)) {
    return;
  }
  wgmma_linear::Args g;
  g.x = f.a;
  g.x_stride = f.a_stride;
  g.x_vec = true;  // the QDQ workspace (K % 32 == 0) or a pre-QDQ'd x that LaunchLinearFp8 checked
  g.w = f.w;
  g.w_scale = f.w_scale;
  g.strip_pitch = static_cast<int>(plan.steps_per_split * (wgmma_linear::kBK / 32));
  g.bias = f.bias;
  g.m = f.m;
  g.n = f.n;
  g.k = f.k;
  g.steps_per_split = plan.steps_per_split;
  g.splits = static_cast<int>(plan.splits);
  g.y_bf16 = f.y_bf16;
  g.y_f32 = f.y_f32;
  g.y_stride = f.y_stride;
  g.y_pair = f.y_pair;
  g.partial = f.partial;
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = wgmma_linear::WgmmaLinearKernel<true>;
  using L = wgmma_linear::Layout<true>;
  // The largest strip: K / 32 scale bytes per row (kLinearCudaMaxK).
  EnsureSmemLimit(kernel, L::SmemBytes(static_cast<int>(kLinearCudaMaxK / 32)), smem_set);
  const dim3 grid(static_cast<unsigned>(plan.m_tiles), static_cast<unsigned>(plan.n_tiles),
                  static_cast<unsigned>(plan.splits));
  kernel<<<grid, wgmma_linear::kThreads, L::SmemBytes(g.strip_pitch), stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

// The FP8 wgmma kernel on the activation codes `codes` (stride K) and scales (stride
// LinearCudaActScaleStride(K)).
void LaunchWgmmaFp8(const GemmArgs& f, const uint8_t* codes, const uint8_t* scales,
                    const LinearCudaPlan& plan, cudaStream_t stream) {
  wgmma_fp8::Args g;
  g.a = codes;
  g.a_scale = scales;
  g.a_scale_stride = LinearCudaActScaleStride(f.k);
  g.w = f.w;
  g.w_scale = f.w_scale;
  g.strip_pitch = static_cast<int>(plan.steps_per_split * wgmma_fp8::kBlocks);
  g.bias = f.bias;
  g.m = f.m;
  g.n = f.n;
  g.k = f.k;
  g.steps_per_split = plan.steps_per_split;
  g.y_bf16 = f.y_bf16;
  g.y_f32 = f.y_f32;
  g.y_stride = f.y_stride;
  g.y_pair = f.y_pair;
  g.partial = f.partial;
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = wgmma_fp8::WgmmaFp8LinearKernel;
  // The largest strip: K / 32 scale bytes per row (kLinearCudaMaxK).
  EnsureSmemLimit(kernel, wgmma_fp8::SmemBytes(static_cast<int>(kLinearCudaMaxK / 32)), smem_set);
  const dim3 grid(static_cast<unsigned>(plan.m_tiles), static_cast<unsigned>(plan.n_tiles),
                  static_cast<unsigned>(plan.splits));
  kernel<<<grid, wgmma_fp8::kThreads, wgmma_fp8::SmemBytes(g.strip_pitch), stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

// The register-sourced wgmma kernel's activation pass: QDQ x in the RS operand order into `out`
// ([M, K] bf16, the workspace's activation region).
void LaunchRsQdq(const LinearCudaParams& p, uint16_t* out, cudaStream_t stream) {
  linear_rs::QdqArgs a;
  a.x = p.x_bf16;
  a.x_stride = p.x_stride;
  a.m = p.m;
  a.k = p.weight->k;
  a.out = out;
  const int64_t units = a.m * (a.k / 8);
  const int64_t blocks =
      std::min<int64_t>((units + linear_rs::kQdqThreads - 1) / linear_rs::kQdqThreads, 132 * 8);
  const dim3 grid(static_cast<unsigned>(blocks));
  if (reinterpret_cast<uintptr_t>(p.x_bf16) % 16 == 0 && p.x_stride % 8 == 0) {
    linear_rs::LinearFp8RsQdqKernel<true><<<grid, linear_rs::kQdqThreads, 0, stream>>>(a);
  } else {
    linear_rs::LinearFp8RsQdqKernel<false><<<grid, linear_rs::kQdqThreads, 0, stream>>>(a);
  }
  CUDA_CHECK(cudaGetLastError());
}

template <int kBM>
void LaunchRsKernel(const linear_rs::Args& g, const LinearCudaPlan& plan, cudaStream_t stream) {
  using L = linear_rs::Layout<kBM>;
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = linear_rs::LinearFp8RsKernel<kBM>;
  EnsureSmemLimit(kernel, L::SmemBytes(static_cast<int>(linear_rs::kMaxStripPitch)), smem_set);
  const dim3 grid(static_cast<unsigned>(plan.m_tiles), static_cast<unsigned>(plan.n_tiles),
                  static_cast<unsigned>(plan.splits));
  // A programmatic dependent of LinearFp8RsQdqKernel (thread 0 waits before loading x).
  cuda_common::LaunchPdl(kernel, grid, dim3(linear_rs::kThreads), L::SmemBytes(g.strip_pitch),
                         stream, g);
}

// The register-sourced wgmma kernel: the activation pass of p into x_rs (= f.a, RS operand order),
// then the GEMM, N = 64 x rows per CTA when M <= 64, else 128. InternalError (nothing enqueued)
// when the driver cannot make the TMA descriptors (the codes are 16-byte aligned and K a multiple
// of 32, so it never should).
absl::Status LaunchRs(const LinearCudaParams& p, const GemmArgs& f, uint16_t* x_rs,
                      const LinearCudaPlan& plan, cudaStream_t stream) {
  linear_rs::Args g;
  const uint32_t bm = f.m <= 64 ? 64 : 128;
  // The x box: the tile's rows that exist (M rounded up to 8, the swizzle atom's rows).
  const uint32_t x_box = static_cast<uint32_t>(std::min<int64_t>(bm, (f.m + 7) / 8 * 8));
  if (!wgmma_ws::MakeTmaOperand(&g.w, f.w, 1, f.k, f.n, f.k, 1, 0, linear_rs::kBK, linear_rs::kBN,
                                true) ||
      !wgmma_ws::MakeTmaOperand(&g.x, f.a, 2, f.k, f.m, f.k, 1, 0, 64, x_box, true)) {
    return absl::InternalError("LaunchLinearFp8: the driver refused the wgmma-rs TMA descriptors");
  }
  LaunchRsQdq(p, x_rs, stream);
  g.w_scale = f.w_scale;
  g.bias = f.bias;
  g.m = f.m;
  g.n = f.n;
  g.k = f.k;
  g.steps_per_split = plan.steps_per_split;
  g.strip_pitch = static_cast<int>(plan.steps_per_split * (linear_rs::kBK / 32));
  g.stage_tx = linear_rs::kWBoxBytes + 2u * x_box * 128u;
  g.y_bf16 = f.y_bf16;
  g.y_f32 = f.y_f32;
  g.y_stride = f.y_stride;
  g.partial = f.partial;
  if (bm == 64) {
    LaunchRsKernel<64>(g, plan, stream);
  } else {
    LaunchRsKernel<128>(g, plan, stream);
  }
  return absl::OkStatus();
}

template <int kNT, bool kVec, bool kNorm>
void LaunchStreamKernel(const gemm_device::StreamArgs& a, const LinearCudaPlan& plan,
                        cudaStream_t stream) {
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = gemm_device::LinearFp8StreamKernel<kNT, kVec, kNorm>;
  EnsureSmemLimit(kernel, gemm_device::StreamSmemBytes(gemm_device::kStreamSlabUnits, kNT),
                  smem_set);
  const dim3 grid(static_cast<unsigned>(plan.n_tiles), static_cast<unsigned>(plan.splits),
                  static_cast<unsigned>(plan.m_tiles));
  // A programmatic dependent of the stream's previous kernel (kernels/common/pdl.cuh): its CTAs
  // load their first weight units while that kernel finishes.
  cuda_common::LaunchPdl(kernel, grid, dim3(gemm_device::kStreamThreads),
                         gemm_device::StreamSmemBytes(a.slab_units, kNT), stream, a);
}

// The split-K reduction (LinearFp8ReduceKernel) of a call's partials into y; pdl: as a
// programmatic dependent of the GEMM before it (which then need not have finished launching it).
void LaunchReduce(const float* partial, int64_t splits, const LinearCudaParams& p,
                  cudaStream_t stream, bool pdl) {
  const Fp8LinearDevice& w = *p.weight;
  ReduceArgs r;
  r.partial = partial;
  r.splits = splits;
  r.m = p.m;
  r.n = w.n;
  r.bias = w.bias;
  r.y_bf16 = p.y_bf16;
  r.y_f32 = p.y_f32;
  r.y_stride = p.y_stride;
  const int64_t blocks = std::min<int64_t>(
      (p.m * w.n + gemm_device::kReduceThreads - 1) / gemm_device::kReduceThreads, 4096);
  if (pdl) {
    cuda_common::LaunchPdl(gemm_device::LinearFp8ReduceKernel, dim3(static_cast<unsigned>(blocks)),
                           dim3(gemm_device::kReduceThreads), 0, stream, r);
    return;
  }
  gemm_device::LinearFp8ReduceKernel<<<static_cast<unsigned>(blocks), gemm_device::kReduceThreads,
                                       0, stream>>>(r);
  CUDA_CHECK(cudaGetLastError());
}

// Most dynamic shared memory the TMA-ring stream kernel asks for (227 KB less room for its static
// bytes).
constexpr int kStreamTmaMaxSmem = 226 * 1024;

// The stream plan's work on the TMA-ring variant (plan.tma_ring, LinearCudaParams::stream_tma) when
// it fits: M <= 8, x's slab over the whole K and the CTA's scale bytes beside the ring, a TMA map
// of the codes. False: not launched.
bool LaunchStreamTma(const LinearCudaParams& p, const LinearCudaPlan& plan,
                     const gemm_device::StreamArgs& s, bool vec, cudaStream_t stream) {
  const Fp8LinearDevice& w = *p.weight;
  const int k_units = static_cast<int>((w.k + kLinearCudaKStep - 1) / kLinearCudaKStep);
  if (p.m > 8) return false;
  gemm_device::StreamTmaArgs a;
  a.s = s;  // its counters and tag go unused: the reduction kernel sums the splits
  a.splits = static_cast<int>(plan.splits);
  a.items = (w.n + 127) / 128 * plan.splits;
  a.scale_pitch = static_cast<int>(4 * plan.steps_per_split);
  const int64_t grid = std::min<int64_t>(a.items, SmCount(CurrentDevice()));  // one CTA per SM
  const int64_t per_cta = (a.items + grid - 1) / grid;
  if (per_cta * 4 * a.scale_pitch > kStreamTmaMaxSmem) return false;
  const int smem = gemm_device::StreamTmaSmemBytes(
      k_units, gemm_device::StreamTmaScaleBytes(per_cta, a.scale_pitch));
  if (smem > kStreamTmaMaxSmem) return false;
  if (!wgmma_ws::MakeTmaOperand(&a.w, w.codes, 1, w.k, w.n, w.k, 1, 0, 128, 128, true)) {
    return false;
  }
  static std::atomic<uint64_t> set_vec{0}, set_scalar{0};
  auto* kernel = vec ? gemm_device::LinearFp8StreamTmaKernel<true>
                     : gemm_device::LinearFp8StreamTmaKernel<false>;
  EnsureSmemLimit(kernel, kStreamTmaMaxSmem, vec ? set_vec : set_scalar);
  cuda_common::LaunchPdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(gemm_device::kTmaThreads),
                         smem, stream, a);
  if (a.splits > 1) LaunchReduce(s.partial, plan.splits, p, stream, /*pdl=*/true);
  return true;
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// The weight-streaming kernel: the whole call in one launch.
void LaunchStream(const LinearCudaParams& p, const LinearCudaPlan& plan,
                  const LinearCudaWorkspaceLayout& layout, cudaStream_t stream) {
  const Fp8LinearDevice& w = *p.weight;
  auto* ws = static_cast<unsigned char*>(p.workspace);
  gemm_device::StreamArgs a;
  a.x = p.x_bf16;
  a.x_stride = p.x_stride;
  a.w = w.codes;
  a.w_scale = w.scales;
  a.bias = w.bias;
  a.m = p.m;
  a.n = w.n;
  a.k = w.k;
  a.steps_per_split = static_cast<int>(plan.steps_per_split);
  a.slab_units =
      static_cast<int>(std::min<int64_t>(gemm_device::kStreamSlabUnits, plan.steps_per_split));
  a.y_bf16 = p.y_bf16;
  a.y_f32 = p.y_f32;
  a.y_stride = p.y_stride;
  if (plan.splits > 1) {
    a.partial = reinterpret_cast<float*>(ws + layout.partials);
    a.counters = reinterpret_cast<unsigned long long*>(ws + layout.counters);
    a.tag = gemm_device::NextCounterTag();
  }
  const bool norm = p.x_norm.weight != nullptr;
  if (norm) {
    a.norm_w = p.x_norm.weight;
    a.norm_eps = p.x_norm.eps;
    a.norm_out = p.x_norm.out;
    a.norm_out_stride = p.x_norm.out_stride;
  }
  // 16-byte loads (and, with the norm, stores) where every row start is 16-byte aligned.
  const bool vec = Aligned16(p.x_bf16) && p.x_stride % 8 == 0 &&
                   (!norm || (Aligned16(p.x_norm.weight) && Aligned16(p.x_norm.out) &&
                              p.x_norm.out_stride % 8 == 0));
  if (!norm && (p.stream_tma || plan.tma_ring) && LaunchStreamTma(p, plan, a, vec, stream)) return;
  // One n8 tile of x rows when every CTA has at most 8, else two.
  const int nt = p.m <= 8 ? 1 : 2;
  using Launch = void (*)(const gemm_device::StreamArgs&, const LinearCudaPlan&, cudaStream_t);
  static constexpr Launch kLaunch[2][2][2] = {
      // [nt - 1][vec][norm]
      {{LaunchStreamKernel<1, false, false>, LaunchStreamKernel<1, false, true>},
       {LaunchStreamKernel<1, true, false>, LaunchStreamKernel<1, true, true>}},
      {{LaunchStreamKernel<2, false, false>, LaunchStreamKernel<2, false, true>},
       {LaunchStreamKernel<2, true, false>, LaunchStreamKernel<2, true, true>}}};
  kLaunch[nt - 1][vec ? 1 : 0][norm ? 1 : 0](a, plan, stream);
}

// Whether the call's fused x_norm runs inside the weight-streaming kernel (the plain stream
// kernel; the TMA ring quantises x without it).
bool StreamFusesNorm(const LinearCudaParams& p, const LinearCudaPlan& plan) {
  return plan.kernel == LinearCudaKernel::kStream && !plan.tma_ring && !p.stream_tma;
}

}  // namespace

absl::Status LaunchLinearFp8(const LinearCudaParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateLinearCudaParams(p));
  if (p.m == 0) return absl::OkStatus();
  const Fp8LinearDevice& w = *p.weight;
  const LinearCudaPlan plan =
      PlanLinearCuda(p.m, w.n, w.k, p.tile_rows, p.split_k, p.wgmma_bf16, p.wgmma_ws,
                     p.expand_weights, p.stream_k_tail, p.stream_ctas);
  const LinearCudaWorkspaceLayout layout = LinearCudaLayout(plan, p.m, w.n, w.k);
  if (p.x_norm.weight != nullptr && !StreamFusesNorm(p, plan)) {
    // Every other plan: the RMSNorm into x_norm.out, then the Linear on it (the fused kernel's
    // bits).
    RmsNormParams n;
    n.rows = p.m;
    n.cols = w.k;
    n.x = p.x_bf16;
    n.x_stride = p.x_stride;
    n.weight_bf16 = p.x_norm.weight;
    n.eps = p.x_norm.eps;
    n.out = p.x_norm.out;
    n.out_stride = p.x_norm.out_stride;
    RETURN_IF_ERROR(LaunchRmsNorm(n, stream));
    LinearCudaParams q = p;
    q.x_norm = LinearXNorm{};
    q.x_bf16 = p.x_norm.out;
    q.x_stride = p.x_norm.out_stride;
    return LaunchLinearFp8(q, stream);
  }
  if (plan.kernel == LinearCudaKernel::kStream) {
    LaunchStream(p, plan, layout, stream);
    return absl::OkStatus();
  }
  auto* ws = static_cast<unsigned char*>(p.workspace);
  auto* a = reinterpret_cast<uint16_t*>(ws + layout.activations);
  // The FP8 wgmma kernel reads the E4M3 codes and UE8M0 scales (the same quantisation the QDQ
  // values code × scale come from), the other kernels the QDQ bf16 values.
  const bool fp8 = plan.kernel == LinearCudaKernel::kWgmmaFp8;
  uint8_t* a_codes = ws + layout.activations;
  uint8_t* a_scales = a_codes + AlignUp256(static_cast<size_t>(p.m * w.k));

  const bool rs = plan.kernel == LinearCudaKernel::kWgmmaRs;
  // A pre-QDQ'd x (LinearCudaParams::x_qdq) that the bf16 wgmma kernels can read in place (TMA
  // and cp.async: 16-byte aligned rows) skips the pass; every other kernel reads the pass's output.
  const bool x_in_place = p.x_qdq && plan.kernel == LinearCudaKernel::kWgmmaBf16 &&
                          reinterpret_cast<uintptr_t>(p.x_bf16) % 16 == 0 && p.x_stride % 8 == 0;
  if (rs || x_in_place) {
    // LaunchRs runs its own activation pass once its TMA descriptors exist.
  } else if (fp8) {
    quant::QuantizeParams q;
    q.format = quant::BlockFormat::kFp8E4m3Ue8m0B32;
    q.rows = p.m;
    q.cols = w.k;
    q.x = p.x_bf16;
    q.x_stride = p.x_stride;
    q.codes = a_codes;
    q.codes_stride = w.k;
    q.scales = a_scales;
    q.scales_stride = LinearCudaActScaleStride(w.k);
    RETURN_IF_ERROR(quant::LaunchQuantize(q, stream));
  } else {
    RETURN_IF_ERROR(quant::LaunchQdq(
        {quant::BlockFormat::kFp8E4m3Ue8m0B32, p.m, w.k, p.x_bf16, p.x_stride, a, w.k}, stream));
  }

  GemmArgs g;
  g.a = x_in_place ? p.x_bf16 : a;
  g.a_stride = x_in_place ? p.x_stride : w.k;
  g.w = w.codes;
  g.w_scale = w.scales;
  g.bias = w.bias;
  g.m = p.m;
  g.n = w.n;
  g.k = w.k;
  g.steps_per_split = plan.steps_per_split;
  g.strip_pitch = static_cast<int>(plan.steps_per_split * gemm_device::kBlocks);
  g.y_bf16 = p.y_bf16;
  g.y_f32 = p.y_f32;
  g.y_stride = p.y_stride;
  g.y_pair =
      p.y_bf16 != nullptr && reinterpret_cast<uintptr_t>(p.y_bf16) % 4 == 0 && p.y_stride % 2 == 0;
  if (plan.splits > 1) {
    g.partial = reinterpret_cast<float*>(ws + layout.partials);
  }
  switch (plan.tile_rows) {
    case kLinearCudaRsRows:
      RETURN_IF_ERROR(LaunchRs(p, g, a, plan, stream));
      break;
    case kLinearCudaWgmmaRows:
      if (fp8) {
        LaunchWgmmaFp8(g, a_codes, a_scales, plan, stream);
      } else {
        // The weight's kept expansion where it has one, else the workspace's region.
        const bool kept = w.expanded != nullptr;
        uint16_t* expanded = !plan.expand_weights ? nullptr
                             : kept               ? const_cast<uint16_t*>(w.expanded)
                                    : reinterpret_cast<uint16_t*>(ws + layout.expanded);
        auto* tail = reinterpret_cast<float*>(ws + layout.tail_partials);
        LaunchWgmma(g, plan, expanded, !kept, p.ws_tile_cols, p.ws_multicast, tail, stream);
      }
      break;
    case 16:
      LaunchGemm<1>(g, plan, stream);
      break;
    case 32:
      LaunchGemm<2>(g, plan, stream);
      break;
    default:
      LaunchGemm<4>(g, plan, stream);
      break;
  }
  if (plan.splits > 1) LaunchReduce(g.partial, plan.splits, p, stream, /*pdl=*/false);
  return absl::OkStatus();
}

absl::Status LaunchExpandFp8Linear(const Fp8LinearDevice& w, uint16_t* out, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(w));
  if (out == nullptr || reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return absl::InvalidArgumentError(
        "LaunchExpandFp8Linear: out must be non-null and 16-byte "
        "aligned");
  }
  GemmArgs f;
  f.w = w.codes;
  f.w_scale = w.scales;
  f.n = w.n;
  f.k = w.k;
  LaunchExpand(f, out, stream);
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
