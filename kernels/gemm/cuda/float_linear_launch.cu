// LaunchFloatLinear (gemm_float_cuda.h): validation and plan on the host, then, for an FP8-only
// weight under a bf16 plan, its expansion (LaunchExpandFp8Linear), the GEMM
// (cuda/float_linear_gemm.cuh, or for tile_rows 128 cuda/wgmma_ws_gemm.cuh /
// cuda/wgmma_linear_gemm.cuh) and, for split plans, the reduction.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/per_device_cache.h"
#include "kernels/gemm/cuda/float_linear_gemm.cuh"
#include "kernels/gemm/cuda/float_linear_gemv.cuh"
#include "kernels/gemm/cuda/float_linear_swap.cuh"
#include "kernels/gemm/cuda/float_linear_swap_fp8.cuh"
#include "kernels/gemm/cuda/float_linear_swap_fp8_stream.cuh"
#include "kernels/gemm/cuda/wgmma_linear_gemm.cuh"
#include "kernels/gemm/cuda/wgmma_ws_gemm.cuh"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_float_cuda.h"

namespace flashserve::kernels {
namespace {

using float_gemm_device::GemmArgs;
using float_gemm_device::ReduceArgs;

static_assert(float_gemm_device::kBK == kFloatLinearCudaKStep);
static_assert(float_gemm_device::kBN == kFloatLinearCudaTileN);
static_assert(wgmma_linear::kBK == kFloatLinearCudaKStep);
static_assert(wgmma_linear::kBM == kFloatLinearCudaWgmmaRows);
static_assert(wgmma_linear::kBN == kFloatLinearCudaWgmmaCols);
static_assert(wgmma_ws::kBK == kFloatLinearCudaKStep);
static_assert(wgmma_ws::kBN == kFloatLinearCudaWgmmaCols);
static_assert(float_swap::kBK == kFloatLinearCudaKStep);
static_assert(float_swap::kBN == kFloatLinearCudaSwapCols);
static_assert(float_swap::kMaxBM == kFloatLinearCudaSwapMaxRows);

static_assert(float_swap_fp8::kBN == kFloatLinearCudaSwapFp8Cols);
static_assert(float_swap_fp8::kBM == kFloatLinearCudaSwapFp8MaxM);
static_assert(float_swap_fp8::kBK == kFloatLinearCudaSwapFp8KStep);
static_assert(float_swap_fp8::StagesFor(kFloatLinearCudaSwapFp8MaxK) >= float_swap_fp8::kMinStages);
static_assert(float_swap_fp8::SmemBytes(kFloatLinearCudaSwapFp8MaxK) <= float_swap_fp8::kSmemLimit);
static_assert(float_swap_fp8::SmemBytes(kFloatLinearCudaSwapFp8KStep) <=
              float_swap_fp8::kSmemLimit);
static_assert(kFloatLinearCudaSwapFp8StreamMaxBM == 128);
static_assert(float_swap_fp8::StreamStagesFor<64, 2>() >= 6 &&
              float_swap_fp8::StreamSmemBytes<64, 2>() <= float_swap_fp8::kSmemLimit);
static_assert(float_swap_fp8::StreamStagesFor<16, 3>() >= 12 &&
              float_swap_fp8::StreamStagesFor<32, 3>() >= 12 &&
              float_swap_fp8::StreamStagesFor<64, 3>() >= 9);
static_assert(float_swap_fp8::StreamStagesFor<128, 1>() >= 4 &&
              float_swap_fp8::StreamSmemBytes<128, 1>() <= float_swap_fp8::kSmemLimit);

static_assert(float_gemv::kMaxM == kFloatLinearCudaGemvMaxM);
static_assert(float_gemv::kRows == kFloatLinearCudaGemvCols);

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls f(TX{}, TW{}) with the element types of x and W (uint16_t: bf16).
template <typename F>
void ForOperandTypes(bool x_f32, bool w_f32, F&& f) {
  if (x_f32) {
    if (w_f32) {
      f(float{}, float{});
    } else {
      f(float{}, uint16_t{});
    }
  } else {
    if (w_f32) {
      f(uint16_t{}, float{});
    } else {
      f(uint16_t{}, uint16_t{});
    }
  }
}

// kernel<<<grid, block, smem, stream>>>(args), as a programmatic dependent of the stream's
// previous kernel when `programmatic` (FloatLinearCudaParams::programmatic).
template <typename... Params, typename... Args>
void LaunchMaybePdl(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block,
                    size_t smem, cudaStream_t stream, const Args&... args) {
  if (programmatic) {
    cuda_common::LaunchPdl(kernel, grid, block, smem, stream, args...);
    return;
  }
  kernel<<<grid, block, smem, stream>>>(args...);
  CUDA_CHECK(cudaGetLastError());
}

template <typename TX, typename TW, int kCtaRows>
void LaunchGemvRows(const GemmArgs& g, int64_t groups, bool programmatic, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((g.n + kCtaRows - 1) / kCtaRows),
                  static_cast<unsigned>(groups));
  auto* kernel = g.m == 1   ? float_gemv::FloatLinearGemvKernel<TX, TW, 1, kCtaRows>
                 : g.m == 2 ? float_gemv::FloatLinearGemvKernel<TX, TW, 2, kCtaRows>
                            : float_gemv::FloatLinearGemvKernel<TX, TW, 4, kCtaRows>;
  LaunchMaybePdl(programmatic, kernel, grid, dim3(float_gemv::kThreads), 0, stream, g);
}

// The CUDA-core kernel: 2 weight rows per CTA (the plan's n_tiles), or 8 with `wide`.
template <typename TX, typename TW>
void LaunchGemv(const GemmArgs& g, int64_t groups, bool wide, bool programmatic,
                cudaStream_t stream) {
  if (wide) {
    LaunchGemvRows<TX, TW, float_gemv::kWideRows>(g, groups, programmatic, stream);
  } else {
    LaunchGemvRows<TX, TW, float_gemv::kRows>(g, groups, programmatic, stream);
  }
}

template <int kMT, typename TX, typename TW>
void LaunchGemm(const GemmArgs& g, const FloatLinearCudaPlan& plan, int64_t groups,
                cudaStream_t stream) {
  using S = float_gemm_device::Tile<kMT, TX, TW>;
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = float_gemm_device::FloatLinearGemmKernel<kMT, TX, TW>;
  EnsureSmemLimit(kernel, S::kSmemBytes, smem_set);
  const dim3 grid(static_cast<unsigned>(plan.m_tiles), static_cast<unsigned>(plan.n_tiles),
                  static_cast<unsigned>(groups * plan.splits));
  kernel<<<grid, float_gemm_device::kThreads, S::kSmemBytes, stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

template <typename TX, typename TW>
void Dispatch(const GemmArgs& g, const FloatLinearCudaPlan& plan, int64_t groups,
              cudaStream_t stream) {
  if (plan.tile_rows == 16) {
    LaunchGemm<1, TX, TW>(g, plan, groups, stream);
  } else if (plan.tile_rows == 32 || sizeof(TX) == 4) {  // fp32 x: at most 32 rows (validated)
    LaunchGemm<2, TX, TW>(g, plan, groups, stream);
  } else {
    if constexpr (sizeof(TX) == 2) LaunchGemm<4, TX, TW>(g, plan, groups, stream);
  }
}

// bf16 x · bf16 W through the warp-specialised wgmma kernel, in tiles of p.ws_tile_cols columns
// (0: LinearCudaWsTileCols's width for the device's SMs, counting every group's tiles); false
// (nothing enqueued) when the driver cannot make the TMA descriptors.
bool LaunchWgmmaWs(const FloatLinearCudaParams& p, const GemmArgs& f,
                   const FloatLinearCudaPlan& plan, cudaStream_t stream) {
  const int64_t cols =
      FloatLinearCudaWsTileCols(p, plan, p.ws_tile_cols == 0 ? SmCount(CurrentDevice()) : 0);
  wgmma_ws::Args g;
  if (!wgmma_ws::MakeTmaOperand(&g.a, p.x_bf16, 2, p.k, p.m, p.x_stride, p.groups, p.x_group_stride,
                                wgmma_ws::kBK, wgmma_ws::kBM, true) ||
      !wgmma_ws::MakeTmaOperand(&g.b, p.w_bf16, 2, p.k, p.n, p.k, p.groups, p.w_group_stride,
                                wgmma_ws::kBK, static_cast<uint32_t>(cols), true)) {
    return false;
  }
  g.bias = p.bias;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.steps_per_split = plan.steps_per_split;
  g.splits = static_cast<int>(plan.splits);
  g.groups = static_cast<int>(p.groups);
  g.y_bf16 = p.y_bf16;
  g.y_f32 = p.y_f32;
  g.y_stride = p.y_stride;
  g.y_group_stride = p.y_group_stride;
  g.y_pair = f.y_pair;
  g.partial = f.partial;
  wgmma_ws::LaunchBf16(g, cols, plan.m_tiles, stream);
  return true;
}

// bf16 x · bf16 W through the wgmma kernel (plan.tile_rows == 128).
void LaunchWgmma(const FloatLinearCudaParams& p, const GemmArgs& f, const FloatLinearCudaPlan& plan,
                 cudaStream_t stream) {
  if (plan.warp_specialised && LaunchWgmmaWs(p, f, plan, stream)) return;
  wgmma_linear::Args g;
  g.x = p.x_bf16;
  g.x_stride = p.x_stride;
  g.x_group_stride = p.x_group_stride;
  g.x_vec = f.x_vec;
  g.w = p.w_bf16;
  g.w_group_stride = p.w_group_stride;
  g.bias = p.bias;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.steps_per_split = plan.steps_per_split;
  g.splits = static_cast<int>(plan.splits);
  g.y_bf16 = p.y_bf16;
  g.y_f32 = p.y_f32;
  g.y_stride = p.y_stride;
  g.y_group_stride = p.y_group_stride;
  g.y_pair = f.y_pair;
  g.partial = f.partial;
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = wgmma_linear::WgmmaLinearKernel<false>;
  const int smem = wgmma_linear::Layout<false>::SmemBytes(0);
  EnsureSmemLimit(kernel, smem, smem_set);
  const dim3 grid(static_cast<unsigned>(plan.m_tiles), static_cast<unsigned>(plan.n_tiles),
                  static_cast<unsigned>(p.groups * plan.splits));
  kernel<<<grid, wgmma_linear::kThreads, smem, stream>>>(g);
  CUDA_CHECK(cudaGetLastError());
}

template <int kBM>
void LaunchSwapKernel(const float_swap::Args& g, const FloatLinearCudaPlan& plan, int64_t groups,
                      bool programmatic, cudaStream_t stream) {
  using L = float_swap::Layout<kBM>;
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = float_swap::FloatLinearSwapKernel<kBM>;
  EnsureSmemLimit(kernel, L::kSmemBytes, smem_set);
  const dim3 grid(static_cast<unsigned>(plan.m_tiles), static_cast<unsigned>(plan.n_tiles),
                  static_cast<unsigned>(groups * plan.splits));
  LaunchMaybePdl(programmatic, kernel, grid, dim3(float_swap::kThreads), L::kSmemBytes, stream, g);
}

// bf16 x · bf16 W through the swapped-role wgmma kernel (plan.tile_rows == 256; x rows 16-byte
// aligned, validated). InternalError, nothing enqueued, when the driver refuses a TMA map.
absl::Status LaunchSwap(const FloatLinearCudaParams& p, const GemmArgs& f,
                        const FloatLinearCudaPlan& plan, cudaStream_t stream) {
  // N = 64 x rows per CTA when one m tile of at most 64 rows covers M, else 128.
  const int bm = p.m <= 64 ? 64 : 128;
  const int64_t x_box = std::min<int64_t>(bm, (p.m + 7) / 8 * 8);
  float_swap::Args g;
  if (!wgmma_ws::MakeTmaOperand(&g.w, p.w_bf16, 2, p.k, p.n, p.k, p.groups, p.w_group_stride,
                                float_swap::kBK, float_swap::kBN, true) ||
      !wgmma_ws::MakeTmaOperand(&g.x, p.x_bf16, 2, p.k, p.m, p.x_stride, p.groups, p.x_group_stride,
                                float_swap::kBK, static_cast<uint32_t>(x_box), true)) {
    return absl::InternalError(
        "LaunchFloatLinear: the driver refused a TMA tensor map for the swapped-role kernel");
  }
  g.bias = p.bias;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.steps_per_split = plan.steps_per_split;
  g.splits = static_cast<int>(plan.splits);
  g.stage_tx = float_swap::kWBoxBytes + static_cast<uint32_t>(x_box * float_swap::kBK * 2);
  g.y_bf16 = p.y_bf16;
  g.y_f32 = p.y_f32;
  g.y_stride = p.y_stride;
  g.y_group_stride = p.y_group_stride;
  g.partial = f.partial;
  g.launch_dependents = p.programmatic || p.trigger_dependents;
  if (bm == 64) {
    LaunchSwapKernel<64>(g, plan, p.groups, p.programmatic, stream);
  } else {
    LaunchSwapKernel<128>(g, plan, p.groups, p.programmatic, stream);
  }
  return absl::OkStatus();
}

template <int kWgs, int kChains>
void LaunchSwapFp8Kernel(const float_swap_fp8::Args& g, dim3 grid, size_t smem, bool programmatic,
                         cudaStream_t stream) {
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = float_swap_fp8::FloatLinearSwapFp8Kernel<kWgs, kChains>;
  EnsureSmemLimit(kernel, float_swap_fp8::kSmemLimit, smem_set);
  LaunchMaybePdl(programmatic, kernel, grid, dim3(float_swap_fp8::kThreads<kWgs>), smem, stream, g);
}

template <int kBM, int kWgs>
void LaunchSwapFp8StreamKernel(const float_swap_fp8::StreamArgs& g, dim3 grid,
                               cudaStream_t stream) {
  static std::atomic<uint64_t> smem_set{0};
  auto* kernel = float_swap_fp8::FloatLinearSwapFp8StreamKernel<kBM, kWgs>;
  constexpr int kSmem = float_swap_fp8::StreamSmemBytes<kBM, kWgs>();
  EnsureSmemLimit(kernel, kSmem, smem_set);
  // Always a programmatic dependent of the permute pass before it (which triggers at its start).
  cuda_common::LaunchPdl(kernel, grid, dim3(float_swap_fp8::kThreads<kWgs>), kSmem, stream, g);
}

#ifndef FS_FP8_STREAM_PAD
#define FS_FP8_STREAM_PAD 1
#endif
// FS_FP8_STREAM_BM256=1 (a kit variant's A/B, session 85; not measured yet): above 128 rows the
// streamed kernel takes 256-row x tiles (wgmma N 256, one consumer warpgroup, three 72 KB stages),
// so that the codes are decoded once per 256 rows instead of once per 128 (fp8_weight_form.md
// "Ragged row tiles", its last paragraph).
#ifndef FS_FP8_STREAM_BM256
#define FS_FP8_STREAM_BM256 0
#endif

constexpr const char* kSwapFp8MapRefused =
    "LaunchFloatLinear: the driver refused a TMA tensor map for the FP8 form's swapped-role kernel";

// Above kFloatLinearCudaSwapFp8MaxM rows: x into the workspace in the fragment order, then the
// kernel that streams it (cuda/float_linear_swap_fp8_stream.cuh). `g.w` is made.
absl::Status LaunchSwapFp8Stream(const FloatLinearCudaParams& p, float_swap_fp8::StreamArgs g,
                                 cudaStream_t stream) {
  uint16_t* xp = static_cast<uint16_t*>(p.workspace);  // validated: groups · M' · K bf16
  const int bm = FS_FP8_STREAM_BM256 && p.m > 128
                     ? 256
                     : static_cast<int>(FloatLinearCudaSwapFp8StreamTileRows(p.m));
  // Whole row tiles (fp8_weight_form.md "Ragged row tiles"); FS_FP8_STREAM_PAD=0 builds the
  // unpadded map of sessions 82-84 (a kit variant's A/B; the workspace stays the padded size).
  const int64_t m_pad = FS_FP8_STREAM_PAD ? FloatLinearCudaSwapFp8StreamPaddedRows(p.m) : p.m;
  if (!wgmma_ws::MakeTmaOperand(&g.xp, xp, 2, p.k, m_pad, p.k, p.groups, m_pad * p.k, 64,
                                static_cast<uint32_t>(bm), true)) {
    return absl::InternalError(kSwapFp8MapRefused);
  }
  float_swap_fp8::PermuteArgs a;
  a.x = p.x_bf16;
  a.x_stride = p.x_stride;
  a.x_group_stride = p.x_group_stride;
  a.m = p.m;
  a.k = p.k;
  a.groups = p.groups;
  a.m_pad = m_pad;
  a.xp = xp;
  a.wait = p.programmatic;
  const int64_t segs = p.groups * m_pad * (p.k / 16);
  const int64_t blocks = std::min<int64_t>(
      2048, (segs + float_swap_fp8::kPermuteThreads - 1) / float_swap_fp8::kPermuteThreads);
  LaunchMaybePdl(p.programmatic, float_swap_fp8::FloatLinearFp8PermuteXKernel,
                 dim3(static_cast<unsigned>(blocks)), dim3(float_swap_fp8::kPermuteThreads), 0,
                 stream, a);
  const dim3 grid(static_cast<unsigned>((p.n + float_swap_fp8::kBN - 1) / float_swap_fp8::kBN),
                  static_cast<unsigned>(p.groups), static_cast<unsigned>((p.m + bm - 1) / bm));
  // Three warpgroups where asked (every row tile but 128 leaves each 3 stages), else two or one.
  const int wgs = FloatLinearCudaSwapFp8Warpgroups(p);
  const bool two = wgs >= 2;
  if (bm == 16) {
    wgs == 3 ? LaunchSwapFp8StreamKernel<16, 3>(g, grid, stream)
    : two    ? LaunchSwapFp8StreamKernel<16, 2>(g, grid, stream)
             : LaunchSwapFp8StreamKernel<16, 1>(g, grid, stream);
  } else if (bm == 32) {
    wgs == 3 ? LaunchSwapFp8StreamKernel<32, 3>(g, grid, stream)
    : two    ? LaunchSwapFp8StreamKernel<32, 2>(g, grid, stream)
             : LaunchSwapFp8StreamKernel<32, 1>(g, grid, stream);
  } else if (bm == 64) {
    wgs == 3 ? LaunchSwapFp8StreamKernel<64, 3>(g, grid, stream)
    : two    ? LaunchSwapFp8StreamKernel<64, 2>(g, grid, stream)
             : LaunchSwapFp8StreamKernel<64, 1>(g, grid, stream);
  } else if (bm == 128) {  // one warpgroup: a 40 KB stage leaves room for 5, not 3 per warpgroup
    LaunchSwapFp8StreamKernel<128, 1>(g, grid, stream);
  } else {
#if FS_FP8_STREAM_BM256
    // The map holds M rounded up to 128-row tiles (the workspace's size): a 256-row box past it
    // is zero-filled by the copy engine.
    LaunchSwapFp8StreamKernel<256, 1>(g, grid, stream);
#endif
  }
  return absl::OkStatus();
}

// bf16 x · the FP8 form through its swapped-role kernel (plan.tile_rows == 8; w_fp8, bf16 x, K,
// alignments and, above 8 rows, the workspace validated). InternalError, nothing enqueued, when
// the driver refuses a map.
absl::Status LaunchSwapFp8(const FloatLinearCudaParams& p, const FloatLinearCudaPlan& plan,
                           cudaStream_t stream) {
  float_swap_fp8::Args g;
  if (!wgmma_ws::MakeTmaOperand(&g.w, p.w_fp8, 1, p.k, p.n, p.k, p.groups, p.w_group_stride,
                                float_swap_fp8::kBK, float_swap_fp8::kBN, true)) {
    return absl::InternalError(kSwapFp8MapRefused);
  }
  // The fields both forms' arguments share.
  auto common = [&p](auto& a) {
    a.w_scales = p.w_fp8_scales;
    a.w_scale_group_stride =
        p.w_group_stride == 0 ? 0 : (p.n / kFloatLinearFp8Block) * (p.k / kFloatLinearFp8Block);
    a.bias = p.bias;
    a.m = p.m;
    a.n = p.n;
    a.k = p.k;
    a.y_bf16 = p.y_bf16;
    a.y_f32 = p.y_f32;
    a.y_stride = p.y_stride;
    a.y_group_stride = p.y_group_stride;
    a.launch_dependents = p.programmatic || p.trigger_dependents;
  };
  if (p.m > kFloatLinearCudaSwapFp8MaxM) {
    float_swap_fp8::StreamArgs sg;
    sg.w = g.w;
    common(sg);
    return LaunchSwapFp8Stream(p, sg, stream);
  }
  common(g);
  g.x = p.x_bf16;
  g.x_stride = p.x_stride;
  g.x_group_stride = p.x_group_stride;
  g.stages = float_swap_fp8::StagesFor(p.k);
  const dim3 grid(static_cast<unsigned>(plan.n_tiles), static_cast<unsigned>(p.groups));
  const size_t smem = static_cast<size_t>(float_swap_fp8::SmemBytes(p.k));
  const int wgs = FloatLinearCudaSwapFp8Warpgroups(p);
  if (wgs == 3 && g.stages >= 6) {  // 2 stages each at least; no chains
    g.stages = g.stages / 3 * 3;
    LaunchSwapFp8Kernel<3, 1>(g, grid, smem, p.programmatic, stream);
    return absl::OkStatus();
  }
  // Validated: 11, 14, 21, 24, 31, 34 (3 warpgroups without room for 6 stages run 2).
  const int form = 10 * std::min(wgs, 2) + p.swap_fp8_chains;
  if (form == 11) {
    LaunchSwapFp8Kernel<1, 1>(g, grid, smem, p.programmatic, stream);
  } else if (form == 14) {
    LaunchSwapFp8Kernel<1, 4>(g, grid, smem, p.programmatic, stream);
  } else if (form == 21) {
    LaunchSwapFp8Kernel<2, 1>(g, grid, smem, p.programmatic, stream);
  } else {
    LaunchSwapFp8Kernel<2, 4>(g, grid, smem, p.programmatic, stream);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchFloatLinear(const FloatLinearCudaParams& in, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateFloatLinearCudaParams(in));
  if (in.m == 0) return absl::OkStatus();
  const FloatLinearCudaPlan plan = PlanFloatLinearCuda(in);
  // An FP8-only weight under a plan that reads bf16 weights: its exact expansion into the
  // workspace (validated to hold it), which the plan then reads as w_bf16 — the same plan, so
  // the same bits as on the bf16 weight.
  FloatLinearCudaParams p = in;
  if (const int64_t at = FloatLinearCudaExpansionOffset(in, plan); at >= 0) {
    uint16_t* expanded =
        reinterpret_cast<uint16_t*>(static_cast<unsigned char*>(in.workspace) + at);
    Fp8LinearDevice w;  // the groups' weights stacked as rows (w_group_stride 0 or N · K)
    w.n = (in.w_group_stride == 0 ? 1 : in.groups) * in.n;
    w.k = in.k;
    w.codes = in.w_fp8;
    w.scales = in.w_fp8_scales;
    RETURN_IF_ERROR(LaunchExpandFp8Linear(w, expanded, stream));
    p.w_bf16 = expanded;
    p.w_fp8 = nullptr;
    p.w_fp8_scales = nullptr;
    // A programmatic GEMM would request weight boxes before its dependency wait, i.e. before the
    // expansion (which does not trigger early) is known to be visible: plain, stream-ordered.
    p.programmatic = false;
  }
  const bool x_f32 = p.x_f32 != nullptr, w_f32 = p.w_f32 != nullptr;

  GemmArgs g;
  g.x = x_f32 ? static_cast<const void*>(p.x_f32) : p.x_bf16;
  g.w = w_f32 ? static_cast<const void*>(p.w_f32) : p.w_bf16;
  g.bias = p.bias;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.x_stride = p.x_stride;
  g.x_group_stride = p.x_group_stride;
  g.w_group_stride = p.w_group_stride;
  g.y_stride = p.y_stride;
  g.y_group_stride = p.y_group_stride;
  g.steps_per_split = plan.steps_per_split;
  g.splits = static_cast<int>(plan.splits);
  // cp.async needs every row start 16-byte aligned: the base, the row and the group strides.
  const int64_t per16 = x_f32 ? 4 : 8;
  g.x_vec =
      Aligned16(g.x) && p.x_stride % per16 == 0 && (p.groups == 1 || p.x_group_stride % per16 == 0);
  g.y_bf16 = p.y_bf16;
  g.y_f32 = p.y_f32;
  g.y_pair = p.y_bf16 != nullptr && reinterpret_cast<uintptr_t>(p.y_bf16) % 4 == 0 &&
             p.y_stride % 2 == 0 && (p.groups == 1 || p.y_group_stride % 2 == 0);
  if (plan.splits > 1) g.partial = static_cast<float*>(p.workspace);

  if (plan.tile_rows == kFloatLinearCudaGemvRows) {  // M <= 4, aligned x rows (validated)
    if (p.w_fp8 != nullptr) {                        // the FP8 form (beside w_bf16, or alone)
      g.w = p.w_fp8;
      g.w_scales = p.w_fp8_scales;
      g.w_scale_group_stride =
          p.w_group_stride == 0 ? 0 : (p.n / kFloatLinearFp8Block) * (p.k / kFloatLinearFp8Block);
      if (x_f32) {
        LaunchGemv<float, float_gemv::Fp8Weight>(g, p.groups, p.gemv_wide, p.programmatic, stream);
      } else {
        LaunchGemv<uint16_t, float_gemv::Fp8Weight>(g, p.groups, p.gemv_wide, p.programmatic,
                                                    stream);
      }
      return absl::OkStatus();
    }
    ForOperandTypes(x_f32, w_f32, [&](auto tx, auto tw) {
      LaunchGemv<decltype(tx), decltype(tw)>(g, p.groups, p.gemv_wide, p.programmatic, stream);
    });
    return absl::OkStatus();
  }
  if (plan.tile_rows == kFloatLinearCudaSwapFp8Rows) return LaunchSwapFp8(p, plan, stream);
  if (plan.tile_rows == kFloatLinearCudaSwapRows) {  // bf16 x and W, TMA-able x (validated)
    RETURN_IF_ERROR(LaunchSwap(p, g, plan, stream));
  } else if (plan.tile_rows == kFloatLinearCudaWgmmaRows) {  // bf16 x and W (validated)
    LaunchWgmma(p, g, plan, stream);
  } else {
    ForOperandTypes(x_f32, w_f32, [&](auto tx, auto tw) {
      Dispatch<decltype(tx), decltype(tw)>(g, plan, p.groups, stream);
    });
  }

  if (plan.splits > 1) {
    ReduceArgs r;
    r.partial = g.partial;
    r.groups = p.groups;
    r.splits = plan.splits;
    r.m = p.m;
    r.n = p.n;
    r.bias = p.bias;
    r.y_bf16 = p.y_bf16;
    r.y_f32 = p.y_f32;
    r.y_stride = p.y_stride;
    r.y_group_stride = p.y_group_stride;
    constexpr int64_t kT = float_gemm_device::kReduceThreads;
    const int64_t blocks = std::min<int64_t>((p.groups * p.m * p.n + kT - 1) / kT, 4096);
    float_gemm_device::FloatLinearReduceKernel<<<static_cast<unsigned>(blocks), kT, 0, stream>>>(r);
    CUDA_CHECK(cudaGetLastError());
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
