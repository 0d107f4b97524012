// The non-quantised dense Linear on the GPU (sm_90a): y[M, N] = x[M, K] · W[N, K]^T (+ bias)
// for bf16 or fp32 weights, with no activation quantisation, optionally batched over G groups
// (y_g = x_g · W_g^T): attn.wo_a (8 groups of bf16 [1024, 4096] on o viewed [M, 8, 4096]),
// indexer.weights_proj / indexer.wk, the r = 1 compressor's wkv (bf16); the MoE gate and the
// r = 2 compressor's wkv / wgate (fp32 weights, fp32 output). The counterpart of LinearCpu for
// kBf16 / kF32 PreparedLinears. README.md "CUDA" documents the design, tests and figures.
//
// Numerics (fp32 accumulation on the tensor cores, mma.sync m16n8k16 bf16, or for bf16 x ·
// bf16 W at large M wgmma m64n256k16 bf16: same exact products, another fp32 summation order):
// - bf16 x, bf16 W: every product is exact in fp32; sums in fp32.
// - fp32 values (W and/or x) are split exactly into three bf16 pieces, v = hi + mid + lo (8 + 8
//   + 8 significand bits; exact for finite 2^-110 <= |v| < 3.39e38; smaller values lose only
//   bits below bf16's 2^-133).
//   fp32 W with bf16 x: Σ_k x·w = Σ_k (x·lo + x·mid + x·hi), three exact products per term, so
//   the result is an fp32 sum of the exact products (LinearCpu rounds each x·w to fp32 first).
//   fp32 x with bf16 W: likewise with the pieces of x. fp32 x with fp32 W: the six piece
//   products with hi/mid/lo rank sum <= 2 (each exact); the three dropped ones are below
//   2^-23·|x·w| together, about one fp32 rounding of the product.
// - Summation order differs from LinearCpu's ascending-k order only (and the tensor core's
//   internal accumulation); then + bias (fp32) and one RNE rounding to bf16, or the fp32 sum.
//   Non-finite inputs give NaN or Inf where the CPU does, except that an fp32 weight or fp32
//   activation that is ±Inf (or beyond 3.39e38) gives NaN (its pieces are Inf - Inf).
// - Split-K (small M): each split writes fp32 partials, a second kernel sums them in ascending
//   split order from +0 (deterministic; no atomics). The plan depends only on (M, N, K, G,
//   x dtype, tile_rows, split_k), never on the device: the bits are reproducible.
//
// Contract: device pointers (or managed memory); bf16 tensors are uint16 bit patterns; strides
// count elements. LaunchFloatLinear validates first (InvalidArgumentError naming the field;
// nothing is enqueued then), then enqueues 1 or 2 kernels on `stream` and returns; buffers must
// stay valid until the stream passes the work. Nothing is allocated per call; the launch makes
// no synchronising CUDA call (graph-capturable; the very first launch per device sets the
// kernels' shared-memory limit, cudaFuncSetAttribute, once). CUDA launch failures abort
// (CUDA_CHECK). Concurrent launches need distinct outputs and workspaces.
// This header includes no CUDA header and no C++20 header (.cu files include it); CUstream_st*
// is cudaStream_t (nullptr: legacy stream).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

struct CUstream_st;

namespace flashserve::kernels {

inline constexpr int64_t kFloatLinearCudaKStep = 64;       // K per pipeline stage (elements)
inline constexpr int64_t kFloatLinearCudaTileN = 128;      // mma.sync CTA columns
inline constexpr int64_t kFloatLinearCudaWgmmaRows = 128;  // wgmma CTA rows (tile_rows 128)
inline constexpr int64_t kFloatLinearCudaWgmmaCols = 256;  // wgmma CTA columns
// The swapped-role wgmma kernel (cuda/float_linear_swap.cuh), selected by tile_rows 256: the
// weights are the MMA's A operand, kFloatLinearCudaSwapCols weight rows × up to
// kFloatLinearCudaSwapMaxRows x rows per CTA.
inline constexpr int64_t kFloatLinearCudaSwapRows = 256;
inline constexpr int64_t kFloatLinearCudaSwapCols = 128;
inline constexpr int64_t kFloatLinearCudaSwapMaxRows = 128;
// The decode-size kernel on the CUDA cores (cuda/float_linear_gemv.cuh), selected by tile_rows 1:
// at most kFloatLinearCudaGemvMaxM x rows, kFloatLinearCudaGemvCols weight rows per CTA (a warp
// per (row, quarter of K)), fp32 fma of exact products, one launch and no workspace.
inline constexpr int64_t kFloatLinearCudaGemvRows = 1;
inline constexpr int64_t kFloatLinearCudaGemvMaxM = 4;
inline constexpr int64_t kFloatLinearCudaGemvCols = 2;
// The automatic plan takes it up to kFloatLinearCudaGemvMaxM rows except for bf16 x · bf16 W of
// at least this many weights (G·N·K), which the swapped-role kernel streams faster.
inline constexpr int64_t kFloatLinearCudaGemvMaxBf16Weights = int64_t{1} << 23;
// With the FP8 form of a bf16 weight (FloatLinearCudaParams::w_fp8), the automatic plan takes the
// CUDA-core kernel on it up to this many rows at any weight size (fp8_weight_form.md, session 80,
// H100: wo_a at M = 1 20.9–21.1 µs against the swapped-role kernel's 28.1–28.5 on the bf16
// weight; at M = 2 28.4 against 28.3–28.5, level, and slower from 3 rows).
inline constexpr int64_t kFloatLinearCudaGemvFp8MaxM = 1;
// The swapped-role kernel on the FP8 form (cuda/float_linear_swap_fp8.cuh), selected by tile_rows
// kFloatLinearCudaSwapFp8Rows: kFloatLinearCudaSwapFp8Cols weight rows per CTA over all of K, the
// E4M3 codes decoded to bf16 in registers as the wgmma A operand, up to kFloatLinearCudaSwapFp8MaxM
// x rows resident in shared memory as its B operand; needs w_fp8, bf16 x with 16-byte aligned
// rows, K a multiple of kFloatLinearCudaSwapFp8KStep up to kFloatLinearCudaSwapFp8MaxK, codes
// 16-byte and scales 4-byte aligned. The automatic plan takes it from kFloatLinearCudaGemvFp8MaxM
// + 1 to kFloatLinearCudaSwapFp8MaxM rows where those hold (fp8_weight_form.md, session 81, H100:
// wo_a 23.8 / 24.2 / 25.6 µs at M = 2 / 4 / 8 against the bf16 swapped-role kernel's 28.5 / 28.4 /
// 29.0, the same bits; at M = 1 23.6 against the CUDA-core kernel's 20.4 on the codes).
inline constexpr int64_t kFloatLinearCudaSwapFp8Rows = 8;
inline constexpr int64_t kFloatLinearCudaSwapFp8Cols = 64;
inline constexpr int64_t kFloatLinearCudaSwapFp8MaxM = 8;
inline constexpr int64_t kFloatLinearCudaSwapFp8KStep = 128;
inline constexpr int64_t kFloatLinearCudaSwapFp8MaxK = 12288;
// Above kFloatLinearCudaSwapFp8MaxM rows the same kernel streams x
// (cuda/float_linear_swap_fp8_stream.cuh): a first pass writes x in the A fragments' k order into
// the workspace (FloatLinearCudaWorkspaceBytes counts groups · M' · K bf16, M' below), and each
// ring stage carries x's K slice beside the codes, up to kFloatLinearCudaSwapFp8StreamMaxBM x rows
// per CTA (16 / 32 / 64 / 128, the smallest that holds M; 128 in one consumer warpgroup whatever
// swap_fp8_warpgroups says; more rows take more row tiles, each reading the codes again); any K
// multiple of kFloatLinearCudaSwapFp8KStep. The automatic plan takes it up to
// kFloatLinearCudaSwapFp8AutoMaxM rows (session 82, kit s140, H100, wo_a with 2 warpgroups: 20.8
// / 21.1 / 21.7 / 23.6 µs at M = 9 / 16 / 32 / 64 against the bf16 swapped-role kernel's 28.8 /
// 29.0 / 29.7 / 30.9; as two 64-row tiles 96 / 128 rows took 43.5 / 42.9 against 33.9 / 35.0).
inline constexpr int64_t kFloatLinearCudaSwapFp8StreamMaxBM = 128;
// The streamed form's x rows per CTA at M rows (16 / 32 / 64 / 128, the smallest that holds M,
// else 128), and M' = the rows of x in the workspace: M rounded up to whole 128-row tiles where
// the call takes them (M > 64; the first pass writes zeros past M, so that no TMA box reads past
// the rows its map holds), else M. Session 85 (fp8_weight_form.md "Ragged row tiles"): with the
// map's rows at M the 128-row tile took longer the more of its rows lay past M (kit s149, H100:
// 160 / 192 / 224 / 256 rows 69.2–70.0 / 67.8–68.1 / 64.7–65.3 / 62.3–62.5 µs); padded, 160 /
// 192 / 288 / 320 rows 2–3 µs faster (kit s150), while padding the 16- to 64-row tiles made
// 40 / 48 rows 1.3–2.2 µs slower.
constexpr int64_t FloatLinearCudaSwapFp8StreamTileRows(int64_t m) {
  return m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : kFloatLinearCudaSwapFp8StreamMaxBM;
}
constexpr int64_t FloatLinearCudaSwapFp8StreamPaddedRows(int64_t m) {
  const int64_t bm = FloatLinearCudaSwapFp8StreamTileRows(m);
  return bm < kFloatLinearCudaSwapFp8StreamMaxBM ? m : (m + bm - 1) / bm * bm;
}
inline constexpr int64_t kFloatLinearCudaSwapFp8AutoMaxM = 64;
// The automatic form (swap_fp8_warpgroups 0) runs 3 consumer warpgroups up to this many rows, 2
// above (session 83, kit s142: the figures at FloatLinearCudaParams::swap_fp8_warpgroups).
inline constexpr int64_t kFloatLinearCudaSwapFp8ThreeWgsMaxM = 32;
// A weight given only in its FP8 form (w_fp8 without w_bf16): the automatic plan keeps the FP8
// form's kernels up to this many rows (the streamed form in 128-row tiles), where the bf16 plans
// would first expand the weight into the workspace (2 · N · K bytes written, N · K read). Session
// 84 (kit s146, H100, wo_a; fp8_weight_form.md "FP8 only"): the FP8 kernel 62.4 / 95.9 / 92.2 /
// 120.2 µs at 256 / 320 / 384 / 512 rows against the expansion (~48 µs) and the bf16 plan, 87.3 /
// 106.5 / 99.3 / 100.9.
inline constexpr int64_t kFloatLinearCudaSwapFp8OnlyMaxM = 384;
// The FP8 form's block: one UE8M0 scale per kFloatLinearFp8Block weight rows × as many columns
// (the checkpoint's attn.wo_a block, model spec: FP8 + E8M0 32 × 32).
inline constexpr int64_t kFloatLinearFp8Block = 32;
// The automatic plan takes wgmma only when every CTA gets at least this much K (its split).
inline constexpr int64_t kFloatLinearCudaWgmmaMinSplitK = 640;
inline constexpr int64_t kFloatLinearCudaMaxSplits = 64;
inline constexpr int64_t kFloatLinearCudaMaxK = int64_t{1} << 24;

struct FloatLinearCudaParams {
  int64_t m = 0;       // rows of each group's x and y, 0 .. 2^31 - 1; 0 is a no-op
  int64_t n = 0;       // out_features, 1 .. 65535 · 128
  int64_t k = 0;       // in_features, a positive multiple of 8, at most kFloatLinearCudaMaxK
  int64_t groups = 1;  // G >= 1; grid z = G · splits must stay <= 65535

  // Weight, exactly one: [N, K] row-major (row stride K), group g at w + g · w_group_stride.
  // 16-byte aligned base; w_group_stride a multiple of 8 (0: every group shares one weight).
  // Or neither, with the FP8 form below alone ("FP8 only").
  const uint16_t* w_bf16 = nullptr;
  const float* w_f32 = nullptr;
  int64_t w_group_stride = 0;
  const float* bias = nullptr;  // fp32 [N] (shared by the groups) or null; 4-byte aligned
  // Optional, with w_bf16 (or alone: "FP8 only" below): the same weight as E4M3 codes [N, K] (row
  // stride K, group g at w_fp8 + g · w_group_stride; 8-byte aligned) and one UE8M0 scale byte per
  // 32 × 32 block (w_fp8_scales [N / 32, K / 32] row-major, group g at + g · (N / 32) · (K / 32),
  // or shared when w_group_stride is 0), each value exactly the bf16 weight:
  // NarrowFloatLinearWeightToFp8 makes both. N and K multiples of 32. The CUDA-core kernel
  // (tile_rows 1) then streams the codes instead of the bf16 weight — the same values, the same fma
  // order: the same bits — and the automatic plan takes it up to kFloatLinearCudaGemvFp8MaxM rows
  // and the FP8 form's swapped-role kernel (tile_rows 8) up to kFloatLinearCudaSwapFp8AutoMaxM; the
  // other kernels read w_bf16. FP8 only (w_fp8 and w_fp8_scales without w_bf16; the weight's device
  // memory halves: attn.wo_a 67 → 34 MB a layer): w_fp8 16-byte aligned, K at most kLinearCudaMaxK.
  // The automatic plan takes the FP8 form's kernels up to kFloatLinearCudaSwapFp8OnlyMaxM rows (the
  // CUDA-core kernel up to kFloatLinearCudaGemvMaxM where the swapped-role one cannot run); every
  // other plan, automatic or forced, first expands the weight into the workspace (the exact bf16
  // values, by kernels/gemm's FP8 expansion kernel) and reads that: the bits of the same plan on
  // w_bf16 (launched plainly after the expansion even where `programmatic` is set).
  // FloatLinearCudaWorkspaceBytes counts the expansion (2 · N · K bytes per distinct weight). The
  // codes and scales as NarrowFloatLinearWeightToFp8 writes them (no NaN code, scale bytes 8 ..
  // 254), so that every kernel decodes the same values.
  const uint8_t* w_fp8 = nullptr;
  const uint8_t* w_fp8_scales = nullptr;

  // Input, exactly one: row r of group g at x + g · x_group_stride + r · x_stride. Any element
  // alignment; rows that are 16-byte aligned (base, x_stride and x_group_stride) take cp.async,
  // others a slower synchronous load path (same bits).
  const uint16_t* x_bf16 = nullptr;
  const float* x_f32 = nullptr;
  int64_t x_stride = 0;        // elements, >= K
  int64_t x_group_stride = 0;  // elements, >= 0

  // Output, exactly one: bf16 (one RNE rounding) or fp32, row r of group g at
  // y + g · y_group_stride + r · y_stride; distinct (g, r, column) must be distinct elements,
  // not overlapping x, W or the workspace.
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;        // elements, >= N
  int64_t y_group_stride = 0;  // elements, >= 0

  // 0 = automatic; 16, 32 or 64 forces the mma.sync kernel with that many CTA rows (64 is not
  // available with x_f32); 128 forces the wgmma kernel (128 × 256 CTA tiles; bf16 x and bf16 W
  // only); 256 (kFloatLinearCudaSwapRows) forces the swapped-role wgmma kernel (128 weight rows
  // × up to 128 x rows per CTA; bf16 x and bf16 W, x rows 16-byte aligned: base, x_stride and,
  // with groups, x_group_stride); 1 (kFloatLinearCudaGemvRows) forces the CUDA-core kernel (M <=
  // kFloatLinearCudaGemvMaxM, x rows 16-byte aligned; any dtypes); 8 (kFloatLinearCudaSwapFp8Rows)
  // forces the swapped-role kernel on the FP8 form (w_fp8, bf16 x; x resident up to M 8, streamed
  // through the workspace above; see the constants).
  // Automatic: with w_fp8, the CUDA-core kernel on it up to kFloatLinearCudaGemvFp8MaxM rows and
  // its swapped-role kernel up to kFloatLinearCudaSwapFp8AutoMaxM (FP8 only:
  // kFloatLinearCudaSwapFp8OnlyMaxM) where it fits; else the CUDA-core
  // kernel for M <= kFloatLinearCudaGemvMaxM with 16-byte aligned x rows, unless x and W are
  // bf16 and the weights number kFloatLinearCudaGemvMaxBf16Weights or more; the swapped-role
  // kernel for bf16 x and W with aligned x rows up to M 256 (1,024 unless wgmma needs no split);
  // wgmma when x and W are bf16, M >= 128, N >= 256 and the wgmma plan gives every CTA at least
  // kFloatLinearCudaWgmmaMinSplitK of K; else mma.sync.
  int64_t tile_rows = 0;
  // 0 = automatic; 1 .. kFloatLinearCudaMaxSplits forces the number of K splits (capped at the
  // number of K steps). The bits depend on the split count and tile_rows, nothing else.
  int64_t split_k = 0;
  // The wgmma kernel's main loop: true (default) = warp-specialised and persistent
  // (cuda/wgmma_ws_gemm.cuh: a TMA producer warpgroup, two consumer warpgroups that only issue
  // wgmma and store) when TMA can read x (16-byte aligned rows: base, x_stride and, with groups,
  // x_group_stride), false = the 256-thread cp.async kernel (cuda/wgmma_linear_gemm.cuh; for A/B).
  // Same tiles and wgmma sequence: same bits.
  bool wgmma_ws = true;
  // Where the warp-specialised kernel runs: its tiles' output columns, as
  // LinearCudaParams::ws_tile_cols (0, the default since session 64 = the by-waves width of
  // LinearCudaWsTileCols over every group's tiles; 128, 160, 192 or 256 force one). Measured on
  // one H100 (session 64, bench_gemm_float_gpu --ws-cols 256,0,...): the gate (N 384) 46.2 ->
  // 32.2 µs at M = 2,048 and 64.3 -> 48.9 at 4,096 (192 columns); wo_a, the compressors' N 512
  // and cmp_r2_pair keep 256 (equal times). Each output's wgmma K steps are the same in the same
  // order: the same bits at every width (WarpSpecialisedBitIdenticalToCpAsync: 124 narrow runs).
  int64_t ws_tile_cols = 0;
  // The decode-size kernels (the CUDA-core kernel, tile_rows 1, and the swapped-role kernel,
  // 256) as programmatic dependents of the stream's previous kernel (kernels/common pdl.cuh):
  // true = launched with LaunchPdl, their CTAs may be scheduled while the kernel ahead still runs
  // (if it calls PdlLaunchDependents) and request their first weights before they wait for it
  // (the CUDA-core kernel each lane's first 4 chunks, the swapped-role kernel its first ring of
  // weight boxes); false (default until measured: README "Programmatic launch", session 76) =
  // plain launches. x, the bias and the outputs are touched only after the wait: the same bits
  // either way. The other kernels are launched plainly.
  bool programmatic = false;
  // The swapped-role kernel only: true = it calls griddepcontrol.launch_dependents at its top
  // even when launched plainly, so that a LaunchPdl kernel after it (the decode step's wo_b) may
  // be scheduled on the SMs it leaves idle and start on its weights (with `programmatic` it always
  // does). Scheduling only: the same bits. false (default) = only with `programmatic`.
  bool trigger_dependents = false;
  // The CUDA-core kernel only: true = 8 weight rows per CTA, a warp per row over all of K, where
  // the default has 2 rows per CTA and a warp per (row, quarter of K): a quarter of the CTAs,
  // each reading x once for 8 rows (the default reads it once per 2). Another fixed fma order,
  // so other bits than the default (reproducible; the FP8 form still equals the bf16 weight in
  // the same geometry). For A/B (session 80, built after the device budget ended: not measured).
  bool gemv_wide = false;
  // The FP8 form's swapped-role kernel only (tile_rows 8): its consumer warpgroups, 1 or 2
  // (default: taking alternate 128-K stages, their sums added at the end), and its accumulator
  // chains per warpgroup, 1 (default: one dependent chain of 8 wgmmas per stage) or 4 (k16 step s
  // into chain s % 4, summed in order). 1 / 1 gives the bf16 swapped-role kernel's bits; the
  // others another fixed order of the same exact products (reproducible). Session 82 (kit s138,
  // H100, wo_a): 2 warpgroups 20.2 / 20.4 / 21.5 µs at 2 / 4 / 8 rows against one's 23.5 / 24.3 /
  // 26.0; 4 chains 0.1-0.7 µs faster with one warpgroup, level with two. With x streamed (M > 8)
  // the chains are not used (one chain per warpgroup, each wgmma already N = 16 .. 128 wide).
  // 3 warpgroups: stage 3w + i to warpgroup i, chains not used; where the ring leaves fewer than
  // 2 stages each (resident x, K above 10,240) the kernel runs 2, at 128 streamed rows 1. (4
  // spilled: 544 threads leave 120 registers each.) Session 83 (kit s142, H100, wo_a): 3 took
  // 19.0 / 18.9 / 19.8 / 20.0 / 19.6 / 20.9 µs at 1 / 2 / 4 / 8 / 16 / 32 rows against 2's 20.2 /
  // 20.1 / 21.1 / 21.6 / 21.2 / 21.6, and 24.4 against 23.8 at 64. 0 (the default) lets
  // FloatLinearCudaSwapFp8Warpgroups choose by M.
  int swap_fp8_warpgroups = 0;
  int swap_fp8_chains = 1;
  // Device scratch of at least FloatLinearCudaWorkspaceBytes(p, m) bytes, 16-byte aligned (may
  // be null when that is 0), not used concurrently by another launch.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// What LaunchFloatLinear runs: the kernel (tile_rows 128: wgmma, 256: swapped-role wgmma, 1: the
// CUDA-core kernel, else mma.sync), CTA rows (16/32/64/128; 256 means up to 128 x rows, m_tiles
// counts those; 1: all M rows, one m tile) and columns (128, 256 for wgmma, 2 weight rows for
// the CUDA-core kernel), K splits and the K steps (of kFloatLinearCudaKStep, every
// kernel) per split. Pure; cheap. Uses p's m, n, k, groups, x_f32
// (non-null caps the tile at 32 rows), w_f32 (non-null: mma.sync), tile_rows and split_k.
struct FloatLinearCudaPlan {
  int64_t tile_rows = 16;
  int64_t tile_cols = kFloatLinearCudaTileN;
  int64_t k_steps = 0;          // ceil(K / kFloatLinearCudaKStep)
  int64_t splits = 1;           // >= 1; every split has at least one step
  int64_t steps_per_split = 0;  // the last split may have fewer
  int64_t m_tiles = 0;
  int64_t n_tiles = 0;
  // tile_rows 128 only: the warp-specialised persistent main loop runs it (p.wgmma_ws and x's
  // rows 16-byte aligned); the launcher falls back to the cp.async one if the driver cannot make
  // the TMA descriptors.
  bool warp_specialised = false;
};
FloatLinearCudaPlan PlanFloatLinearCuda(const FloatLinearCudaParams& p);
// The columns of the warp-specialised kernel's tiles for p under `plan` on `sms` SMs:
// p.ws_tile_cols, or for 0 LinearCudaWsTileCols's width counting every group's tiles. Pure.
int64_t FloatLinearCudaWsTileCols(const FloatLinearCudaParams& p, const FloatLinearCudaPlan& plan,
                                  int64_t sms);

// Workspace bytes for any m <= max_m with p's n, k, groups, tile_rows, split_k and, for an FP8
// only weight, w_group_stride (any x and W dtypes; the other fields are ignored): 4 · G · splits ·
// M · N when the plan splits K, 2 · G · M' · K where the FP8 form's kernel streams x (M' =
// FloatLinearCudaSwapFp8StreamPaddedRows(M)), and for an
// FP8-only weight, where the plan expands it, the expansion after that (see
// FloatLinearCudaExpansionOffset). Monotone in max_m, so size once for the largest M. Cost:
// O(min(max_m, 16896)) plans.
size_t FloatLinearCudaWorkspaceBytes(const FloatLinearCudaParams& p, int64_t max_m);

// Where LaunchFloatLinear writes the expansion of an FP8-only weight (w_fp8 without w_bf16 or
// w_f32) for `plan`, a plan whose kernel reads bf16 weights (neither the CUDA-core kernel nor the
// FP8 form's swapped-role kernel): the byte offset in the workspace, after the plan's own region
// rounded up to 256; the expansion takes FloatLinearCudaExpansionBytes(p). -1 when the plan reads
// no expansion. Pure.
int64_t FloatLinearCudaExpansionOffset(const FloatLinearCudaParams& p,
                                       const FloatLinearCudaPlan& plan);
// 2 · N · K bytes, times `groups` unless w_group_stride is 0 (one weight shared by the groups).
size_t FloatLinearCudaExpansionBytes(const FloatLinearCudaParams& p);

// The FP8 swapped-role kernel's consumer warpgroups for p: p.swap_fp8_warpgroups where set (1-3),
// else (0) 3 up to kFloatLinearCudaSwapFp8ThreeWgsMaxM rows with one chain, 2 otherwise. Pure.
int FloatLinearCudaSwapFp8Warpgroups(const FloatLinearCudaParams& p);

// InvalidArgumentError naming the first bad field of p, else OK. Host-only checks (no device
// access): dims, pointer nullness and alignment, strides, workspace size.
absl::Status ValidateFloatLinearCudaParams(const FloatLinearCudaParams& p);

// The bf16 form of an fp32 weight whose every value is a bf16 value, for the bf16 weight path:
// the model's fp32-weight Linears (the MoE gate, the r = 2 compressor's wkv / wgate, the head,
// the Markov head) hold bf16 checkpoint weights promoted to fp32 (model spec §4.4, §4.7), so
// their low 16 bits are zero and W in bf16 is exact. Then bf16 x · W is one exact product per
// term, the same fp32 sum of exact products as the three-piece fp32 path, while the weight
// stream halves and every bf16 plan applies (the CUDA-core, swapped-role and wgmma kernels;
// README "CUDA: fp32 weights that are bf16 values"). Writes `count` bf16 bit patterns (the high
// halves) to bf16_out and returns true when every value's low 16 bits are zero (±0, ±Inf and the
// canonical NaN included); returns false otherwise — bf16_out is then unspecified and the caller
// keeps the fp32 weight (w_f32). Host memory; count may be 0 (true). Cost: one pass.
bool NarrowFloatLinearWeight(const float* w, size_t count, uint16_t* bf16_out);

// The FP8 form of a bf16 weight whose every 32 × 32 block is E4M3 values times one power of two,
// for FloatLinearCudaParams::w_fp8: attn.wo_a is FP8 with E8M0 32 × 32 block scales in the
// checkpoint and bf16 in the converted model (model spec: dequantised exactly), so its bf16 values
// are such products and the FP8 form halves its stream. `w` holds `rows` × `cols` bf16 bit
// patterns (row-major, both multiples of 32; groups stacked as rows). Per block the scale is the
// least 2^s with max |v| / 2^s <= 448 (s in [-119, 127]; an all-zero block takes 2^0), and each
// code is v / 2^s; writes codes_out [rows · cols] and scales_out [rows / 32 · cols / 32] (the byte
// s + 127) and returns true when every value comes back exactly (E4M3 keeps ±0; no Inf or NaN is
// accepted), false otherwise (the outputs are then unspecified and the caller keeps only w_bf16).
// Host memory. Cost: two passes.
bool NarrowFloatLinearWeightToFp8(const uint16_t* w, int64_t rows, int64_t cols, uint8_t* codes_out,
                                  uint8_t* scales_out);
// The value of E4M3 code `code` times 2^(scale_byte - 127) as the kernels decode it (host and
// tests; scale_byte in [8, 254]).
float Fp8WeightValue(uint8_t code, uint8_t scale_byte);

// y = x · W^T (+ bias) as documented above: the GEMM, and for split plans the reduction.
// Errors: ValidateFloatLinearCudaParams's. Cost: 1-2 kernel launches.
absl::Status LaunchFloatLinear(const FloatLinearCudaParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
