// The FP8 block-scaled dense Linear on the GPU (sm_90a): y[M, N] = x[M, K] · W[N, K]^T (+ bias)
// for the FP8 32×32-block Linears of DeepSeek-V4.1-Flash (wq_a, wq_b, wkv, wo_b, indexer.wq_b,
// the shared expert's w1/w2/w3, engram.wkv, mtp.0.main_proj), the counterpart of LinearCpu for a
// kFp8Block32 PreparedLinear. README.md "CUDA" documents the design, the tests and the figures.
//
// Numerics against LinearCpu (exact mode):
// - Activations: x (bf16) is quantised per 32 along K to E4M3 with a UE8M0 scale, exactly as
//   LinearCpu does (kernels/quant LaunchQdq, bit-identical to formats::QuantizeFp8Ue8m0B32), and
//   kept as its QDQ bf16 values code × scale (exact in bf16).
// - Weights: E4M3 code × UE8M0 scale is exact in bf16 for scale bytes >= 3 (every real scale),
//   so the reference's per-32-block sums are one bf16 GEMM with fp32 accumulation (mma.sync
//   m16n8k16 on the tensor cores; at large M wgmma m64n256k16 on weights decoded to bf16 in
//   shared memory — same exact products, another fp32 summation order). Only the fp32 summation
//   order differs from LinearCpu's (as in its fast mode): exact-arithmetic inputs match bit for
//   bit, other inputs within about one bf16 rounding. Scale byte 255 (NaN) gives NaN, as on the
//   CPU; E4M3 NaN codes (0x7F, 0xFF) are rejected by DeviceFp8Linear::Upload (the decoder would
//   read them as ±480).
// - The FP8 wgmma kernel (tile_rows 128 with wgmma_bf16 = false; opt-in, see LinearCudaParams)
//   reads the activation codes and scales instead (kernels/quant LaunchQuantize, the same
//   quantisation) and follows the reference's blockwise order: per 32-wide K block one FP8
//   tensor-core sum of the 32 code products, then acc = fma(partial, s_a · s_w, acc) in
//   ascending block order. The partial is exact when the products fit the tensor core's FP8
//   accumulator (exact-arithmetic inputs: bit for bit); on general inputs it may be coarser than
//   an fp32 sum (README.md "CUDA: the FP8 wgmma kernel").
// - Epilogue: + bias (fp32) and one RNE rounding to bf16, or the fp32 sum (y_f32).
// - Split-K (small M): each split writes fp32 partials, which are summed in ascending split
//   order from +0: by a second kernel, or for the weight-streaming kernel (decode) by the CTA
//   of the tile that arrives last (an arrival counter per tile in the workspace, tagged with a
//   per-call tag, so it needs no zeroing; README "CUDA: the weight-streaming decode kernel").
//   The plan depends only
//   on (M, N, K, params), never on the device, so results are reproducible run to run and device
//   to device.
//
// Common contract: pointers are device pointers (or managed memory); bf16 tensors are uint16 bit
// patterns; strides count elements. LaunchLinearFp8 validates first (InvalidArgumentError naming
// the field; nothing is enqueued then), then enqueues on `stream` and returns; buffers must stay
// valid until the stream passes the work. Nothing is allocated per call. CUDA launch failures
// abort (CUDA_CHECK). Concurrent launches need distinct outputs and workspaces.
// This header includes no CUDA header and no C++20 header (.cu files include it); CUstream_st* is
// cudaStream_t (nullptr: legacy stream).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct CUstream_st;

namespace flashserve::kernels {

// prepared_linear.h is C++20 (std::span); .cu files are C++17, so only a declaration here.
class PreparedLinear;

// Device layout of one FP8 Linear: the checkpoint's own layout, unchanged.
//   codes  E4M3 [N, K] row-major (row n = output feature n), 16-byte aligned base
//   scales UE8M0 [ceil(N/32), K/32] row-major: block (n/32, k/32)
//   bias   fp32 [N] or null
struct Fp8LinearDevice {
  int64_t n = 0;  // out_features, 1 .. 2^31
  int64_t k = 0;  // in_features, a multiple of 32, at most kLinearCudaMaxK
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  const float* bias = nullptr;
  // Optional: bf16 [N, K], 16-byte aligned, the exact expansion codes × scales
  // (LaunchExpandFp8Linear; DeviceFp8Linear::Upload with keep_expanded). Where set, the plans
  // that run on expanded weights (LinearCudaParams::expand_weights, M >= kLinearCudaExpandMinRows)
  // read it instead of expanding the weight into the workspace at every call: N·K·3 bytes of
  // traffic saved per call for 2·N·K bytes kept (a prefill server's choice), and the workspace
  // needs no expansion region (LinearCudaWorkspaceBytes, the validator). The same bf16 weights:
  // the same bits (`KeptExpansionBitIdentical`, on the GPU).
  const uint16_t* expanded = nullptr;
};

inline constexpr int64_t kLinearCudaMaxK = int64_t{1} << 16;
inline constexpr int64_t kLinearCudaMaxSplits = 32;
inline constexpr int64_t kLinearCudaTileN = 128;  // output columns per CTA
// K per pipeline stage of the kernel (gemm_device::kBK, static_assert in the launcher): the unit
// of LinearCudaPlan::k_steps / steps_per_split for every tile size.
inline constexpr int64_t kLinearCudaKStep = 128;
// The wgmma kernels (tile_rows 128, large M). FP8 (the default): E4M3 codes on the FP8 tensor
// cores, 128 × 128 CTA tiles, K per stage 128. bf16 expansion (LinearCudaParams::wgmma_bf16, for
// A/B): weights decoded to bf16 in shared memory, 128 × 256 tiles, K per stage 64.
inline constexpr int64_t kLinearCudaWgmmaRows = 128;
inline constexpr int64_t kLinearCudaWgmmaCols = 256;
inline constexpr int64_t kLinearCudaWgmmaKStep = 64;
inline constexpr int64_t kLinearCudaWgmmaFp8Cols = 128;
inline constexpr int64_t kLinearCudaWgmmaFp8KStep = 128;
// The automatic plan takes a wgmma kernel only when every CTA has at least this much K (its
// K split): below it the pipeline fill and the split-K partials cost more than the wgmma rate
// gains (README "CUDA: plan rule").
inline constexpr int64_t kLinearCudaWgmmaMinSplitK = 640;
// From this M on, a warp-specialised bf16-expansion plan expands the whole FP8 weight to bf16 in
// the workspace first (LinearCudaParams::expand_weights): the expansion is one memory-bound pass
// over the weight (~3 bytes per weight moved, ~36 µs for wq_b), which the bf16-weight main loop's
// higher rate repays once M is this large. Measured on the H200 (README "CUDA: weights expanded
// once"): slower at M = 128 (wq_b 50 -> 86 µs) and 256 (89 -> 101), even at 192, faster on every
// shape from 384 (wq_b 127 -> 118, wo_b 146 -> 126, engram.wkv 498 -> 392).
inline constexpr int64_t kLinearCudaExpandMinRows = 384;
// The weight-streaming kernel (README "CUDA: the weight-streaming decode kernel"): the automatic
// plan where LinearCudaStreamPays, forced by tile_rows = kLinearCudaStreamRows (8: the x
// rows are the mma's n8 operand). A CTA takes up to 16 x rows (m_tiles = ceil(M / 16)) and
// kLinearCudaStreamCols weight rows; K steps of kLinearCudaKStep; one launch per call (QDQ,
// GEMM and the split-K reduction).
inline constexpr int64_t kLinearCudaStreamRows = 8;
inline constexpr int64_t kLinearCudaStreamMaxRows = 16;
inline constexpr int64_t kLinearCudaStreamCols = 128;
// Whether the automatic plan takes the stream kernel: up to 8 x rows (one n8 tile), whatever the
// weight. Measured on the H200 against the 16-row mma.sync kernel (README "CUDA: the
// weight-streaming decode kernel", round 2, with the batched split-K fix-up and one-atomic
// arrivals) it wins at M = 1..8 on every decode shape, small weights included (µs, M = 1 / 8:
// wq_a 15.97 -> 11.39 / 16.67 -> 12.42, wkv 15.81 -> 9.34 / 14.78 -> 10.46, shared w1|w3
// 16.96 -> 12.77 / 17.47 -> 14.37, wq_b 26.11 -> 21.41 / 26.24 -> 24.00, wo_b 30.75 -> 23.52 /
// 30.75 -> 27.36, engram.wkv 86.21 -> 66.85 / 86.75 -> 80.22). At M = 16 (two n8 tiles) it lost
// everywhere in round 1 and is not measured since: mma.sync there.
constexpr bool LinearCudaStreamPays(int64_t m) { return m <= 8; }
// The largest LinearCudaParams::stream_ctas.
inline constexpr int64_t kLinearCudaMaxStreamCtas = 4096;
// The stream kernel's TMA-ring variant (cuda/linear_fp8_stream_tma.cuh; stream_kernel.md
// "Session 31"): one persistent CTA per SM streaming 128-row × 128-K boxes through a shared-memory
// ring, split partials summed by the reduction kernel. The automatic plan where
// LinearCudaStreamTmaPays: M <= 8, weights of at least kLinearCudaStreamTmaMinBytes codes and
// K <= kLinearCudaStreamTmaMaxK (x's codes over the whole K fit beside the ring). Measured on the
// H200 at M = 1 / 8 (µs, stream kernel -> ring, each alone): engram.wkv 61.7 -> 50.0 / 72.5 ->
// 55.4; wq_b 20.5 -> 18.8 / 22.4 -> 20.8 and wo_b 23.1 -> 21.3 / 26.5 -> 24.8, but inside the
// decoder layer step those two made the 1-token graph 3 µs slower (188 -> 191 µs; the ring holds
// every SM's shared memory for its whole run and walks a static item list, so the step's
// concurrent branches and it wait on each other): hence the 64 MiB floor, which only
// engram.wkv's 150 MiB passes among the released Linears. Smaller weights (wq_a, wkv, shared
// w1|w3, w2) lose 1-3 µs on the ring even alone.
inline constexpr int64_t kLinearCudaStreamTmaMinBytes = int64_t{64} << 20;
inline constexpr int64_t kLinearCudaStreamTmaMaxK = 8192;
constexpr bool LinearCudaStreamTmaPays(int64_t m, int64_t n, int64_t k) {
  return LinearCudaStreamPays(m) && n * k >= kLinearCudaStreamTmaMinBytes &&
         k <= kLinearCudaStreamTmaMaxK;
}
// The register-sourced wgmma kernel for decode batches (rs_kernel.md): forced by tile_rows =
// kLinearCudaRsRows (its CTA's weight rows); a CTA takes up to kLinearCudaRsMaxRows x rows (m_tiles
// = ceil(M / 128)) and kLinearCudaRsCols weight rows, K steps of kLinearCudaKStep; one CTA per SM.
inline constexpr int64_t kLinearCudaRsRows = 256;
inline constexpr int64_t kLinearCudaRsMaxRows = 128;
inline constexpr int64_t kLinearCudaRsCols = 256;
// Whether the automatic plan takes the register-sourced kernel (M above the stream kernel's 8):
// measured on the H200 against the plan it replaced (rs_kernel.md): faster on every released FP8
// shape from M = 17 to 768 (wq_b at M = 64 43.8 -> 29.4 µs, engram.wkv 162.6 -> 81.0, wo_b at M =
// 256 107.7 -> 60.8); at M = 9 .. 16 only on the weights of >= 32 Mi codes (wq_b, wo_b, engram.wkv;
// the small ones lose ~0.8 µs there); at M = 1024 it ties or loses to the bf16-expansion wgmma
// kernel.
inline constexpr int64_t kLinearCudaRsMaxM = 768;
constexpr bool LinearCudaRsPays(int64_t m, int64_t n, int64_t k) {
  return m > 8 && m <= kLinearCudaRsMaxM && (m > 16 || n * k >= (int64_t{1} << 25));
}

enum class LinearCudaKernel {
  kMmaSync = 0,
  kWgmmaBf16 = 1,
  kWgmmaFp8 = 2,
  kStream = 3,
  kWgmmaRs = 4
};
const char* LinearCudaKernelName(LinearCudaKernel kernel);

// InvalidArgumentError naming the field (dims, null or misaligned pointers), else OK.
absl::Status Validate(const Fp8LinearDevice& w);

// An RMSNorm of the Linear's x rows along K ahead of the Linear (LinearCudaParams::x_norm).
struct LinearXNorm {
  const uint16_t* weight = nullptr;  // bf16 [K], 2-byte aligned; null = no norm
  float eps = 1e-6f;                 // finite, > 0 (RmsNormParams::eps)
  uint16_t* out = nullptr;           // bf16 [M, out_stride]: the normed rows; 2-byte aligned
  int64_t out_stride = 0;            // elements, >= K
};

struct LinearCudaParams {
  const Fp8LinearDevice* weight = nullptr;  // host pointer to the device view
  int64_t m = 0;                            // rows of x and y, 0 .. 2^31 - 1; 0 is a no-op
  const uint16_t* x_bf16 = nullptr;         // bf16 [M, x_stride], any alignment
  int64_t x_stride = 0;                     // elements, >= K
  // Exactly one output: bf16 (one RNE rounding) or fp32. Must not overlap x or the workspace.
  uint16_t* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  int64_t y_stride = 0;  // elements, >= N
  // 0 = automatic (LinearCudaPlan); 8 forces the weight-streaming kernel (any M: a CTA per 16
  // rows), 16, 32 or 64 the mma.sync kernel with that many CTA rows, 128 a wgmma kernel, 256
  // (kLinearCudaRsRows) the register-sourced wgmma kernel (any M: a CTA per 128 rows; tests,
  // benches). Automatic: the weight-streaming kernel for M <= 8 (LinearCudaStreamPays); the
  // register-sourced wgmma kernel where LinearCudaRsPays (M 9 .. 768); wgmma for
  // M >= 128 and N >= 128 when the wgmma plan gives every CTA at least kLinearCudaWgmmaMinSplitK
  // of K; else mma.sync with 16 / 32 / 64 rows.
  int64_t tile_rows = 0;
  // When the plan takes wgmma: true (default) = the bf16-expansion wgmma kernel (128 × 256
  // tiles), false = the FP8 wgmma kernel (E4M3 operands, 128 × 128 tiles; ~1.3x faster, but its
  // FP8 tensor-core accumulation is coarser than fp32: on the H200 rel-RMS 6e-4 against LinearCpu
  // vs 1e-4, 0.7 % of outputs beyond one bf16 ulp — opt-in, README.md "CUDA: the FP8 wgmma
  // kernel").
  bool wgmma_bf16 = true;
  // The bf16-expansion wgmma kernel's main loop: true (default) = warp-specialised and
  // persistent (cuda/wgmma_ws_gemm.cuh: a TMA producer warpgroup that also decodes the codes,
  // two consumer warpgroups that only issue wgmma and store), false = the 256-thread cp.async
  // kernel (cuda/wgmma_linear_gemm.cuh; for A/B). Same tiles and wgmma sequence: same bits.
  bool wgmma_ws = true;
  // When the plan runs the warp-specialised bf16-expansion kernel at M >= kLinearCudaExpandMinRows:
  // true (default) = one kernel first expands the whole weight (E4M3 × UE8M0 -> bf16, exact) into
  // the workspace and the main loop then reads bf16 weights by TMA (no decode in the pipeline);
  // false = the producer warpgroup decodes every stage's codes in place. The same bf16 weights
  // meet the same wgmma sequence: the same bits. Costs 2·N·K workspace bytes.
  bool expand_weights = true;
  // Where the warp-specialised kernel runs on expanded bf16 weights: its tiles' output columns.
  // 0 (default) = LinearCudaWsTileCols's choice for the device's SM count (session 63: at
  // M = 4,096 wq_a 150.5 -> 127.4 µs, shared w1|w3 211 -> 181; never slower where it narrows);
  // 128, 160, 192 or 256 (kLinearCudaWgmmaCols, the width before session 63) force a width.
  // Ignored by every other kernel. Each output's wgmma K steps are the same in the same order:
  // the same bits at every width (`ExpandedWeightsNarrowTilesBitIdentical`, on the GPU).
  int64_t ws_tile_cols = 0;
  // Where the plan runs the warp-specialised kernel without K splits: true = the stream-K tail
  // (LinearCudaTailPlan: whole 128 × 256 tiles in full waves, the last partial wave's tiles cut
  // into K ranges whose fp32 partials a second kernel sums; the automatic tile width is then 256
  // where a tail applies), false (default until measured) = none. The tail tiles' bits are those
  // of the plan with split_k = their range count, the other tiles' those of the unsplit plan
  // (`StreamKTailBitsMatchSplitAndWhole`, on the GPU). With it, ws_tile_cols must be 0 or 256.
  // Costs the tail's partials in the workspace (LinearCudaLayout). Cost: one more launch.
  bool stream_k_tail = false;
  // Where the plan runs the warp-specialised kernel: true = in clusters of two CTAs along M that
  // share each weight box through TMA multicast (each CTA loads half of it into both), so a pair
  // reads its weight tile from L2 once instead of twice (FP8 in place: 24 of 32 KB per K step
  // and CTA; expanded bf16: 32 of 48); false (default until measured) = one CTA per tile. Each
  // tile's wgmma sequence is unchanged: the same bits (`PairMulticastBitIdentical`, on the GPU).
  // Not with stream_k_tail.
  bool ws_multicast = false;
  // true = x already holds the FP8 E4M3 × UE8M0/32 QDQ of the activations along K, the values the
  // activation pass would write (a producer wrote them: RmsNormParams::out_qdq), so the bf16
  // wgmma kernels (M >= 128) read x in place and the pass (~2·M·K·2 bytes: at M = 4,096,
  // K = 5,120 about 84 MB, ~33 µs) is skipped; x must then be 16-byte aligned with x_stride a
  // multiple of 8, else the pass runs. Every other kernel runs its pass on x, which gives the
  // same values: the QDQ is idempotent below bf16 overflow (QuantCpuTest.
  // Fp8QdqIsIdempotentBelowOverflow); only a block whose first QDQ already overflowed to ±Inf
  // differs. The same bits as x_qdq = false on the un-QDQ'd x (`PreQuantisedXBitIdentical`).
  // false (default) = the Linear QDQs x itself.
  bool x_qdq = false;
  // x_norm.weight non-null: the Linear runs on RMSNorm(x) (the decode step's q_norm ahead of
  // wq_b): LaunchRmsNorm's bits with x_norm's weight and eps, and those normed rows are also
  // written to x_norm.out for other readers (the indexer's wq_b). The weight-streaming kernel
  // fuses it (M <= 8, not on the TMA ring): each CTA computes its rows' 1 / rms over the whole K
  // after its first weight loads, normalises x as it quantises each slab, and the CTAs of the
  // first weight-row column store the normed values (stream_kernel.md "The fused x_norm"); every
  // other plan runs LaunchRmsNorm into x_norm.out and then the Linear on it. The same bits either
  // way (`XNormFusedEqualsTwoLaunches`, on the GPU). x_norm.out must not overlap x, y or the
  // workspace; x_qdq must be false.
  LinearXNorm x_norm;
  // The weight-streaming plan's CTA target (splits and CTAs along N grow toward it): 0 = automatic
  // (264: two CTAs on each of 132 SMs), 1 .. kLinearCudaMaxStreamCtas another. Fewer CTAs leave
  // SM slots (each CTA holds half an SM's registers) to kernels running beside the call — the
  // decode step's forked shared expert beside the MoE (bench --shared-ctas). The bits follow the
  // plan's split count. Every other plan ignores it.
  int64_t stream_ctas = 0;
  // 0 = automatic; 1 .. kLinearCudaMaxSplits forces the number of K splits (capped at the
  // number of K steps). The bits depend on the split count (fp32 order), not on anything else.
  int64_t split_k = 0;
  // When a stream plan runs at M <= 8: true = on the TMA-ring variant whatever the plan (tests and
  // benches: `--kernels stream-tma`); false (default) = on it only where the plan says
  // (LinearCudaPlan::tma_ring, the automatic plan's choice where LinearCudaStreamTmaPays). Same
  // plan, same bits either way; the ring falls back to the stream kernel where it does not fit
  // (x's codes of the whole K and the CTA's weight scale bytes beside the ring, the codes' rows
  // 16-byte multiples).
  bool stream_tma = false;
  // Device scratch of at least LinearCudaWorkspaceBytes(*weight, m, tile_rows, split_k,
  // wgmma_bf16, wgmma_ws, expand_weights, stream_k_tail, stream_ctas) bytes, 16-byte aligned, not
  // used concurrently by another launch. Its contents need no initialisation, before the first call
  // or between calls.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The stream-K tail of a persistent, warp-specialised call of `tiles` output tiles without K
// splits, each of k_steps K steps: tiles [0, begin) run whole in full waves of
// kLinearCudaTailSlots CTAs; each of the r = tiles - begin tiles of the last, partial wave is cut
// into `ranges` K ranges of `steps` steps (the last range may have fewer): the split-K rule of
// the plan (steps = ceil(k_steps / s), ranges = ceil(k_steps / steps)) for s = the least of
// kLinearCudaTailSlots / r (the r · s range items then fit one wave), k_steps /
// kLinearCudaTailMinSteps and kLinearCudaTailMaxRanges (each range writes a 128 × 256 fp32
// partial that the reduction reads back). ranges == 1 (begin == tiles):
// no tail (r == 0, or s < 2). The slots are a constant, not the device's SM count, so the bits
// never depend on the device. Pure.
inline constexpr int64_t kLinearCudaTailSlots = 132;
inline constexpr int64_t kLinearCudaTailMinSteps = 4;
inline constexpr int64_t kLinearCudaTailMaxRanges = 8;
struct LinearCudaTail {
  int64_t begin = 0;   // the first tile of the tail (tiles when there is none)
  int64_t ranges = 1;  // K ranges per tail tile; 1 = no tail
  int64_t steps = 0;   // K steps per range (the last may have fewer)
};
LinearCudaTail LinearCudaTailPlan(int64_t tiles, int64_t k_steps);

// What LaunchLinearFp8 runs for (m, n, k, tile_rows, split_k, wgmma_bf16): the kernel, CTA rows
// (16/32/64/128; 8 for the stream kernel, whose CTA takes two n8 tiles: m_tiles = ceil(M/16))
// and columns (128 / 256), K per pipeline stage (kLinearCudaKStep, kLinearCudaWgmmaKStep,
// kLinearCudaWgmmaFp8KStep), K splits and the K steps of each split. Pure; cheap.
struct LinearCudaPlan {
  LinearCudaKernel kernel = LinearCudaKernel::kMmaSync;
  int64_t tile_rows = 16;
  int64_t tile_cols = kLinearCudaTileN;
  int64_t k_step = kLinearCudaKStep;
  int64_t k_steps = 0;          // ceil(K / k_step)
  int64_t splits = 1;           // >= 1; every split has at least one step
  int64_t steps_per_split = 0;  // the last split may have fewer
  int64_t m_tiles = 0;
  // CTAs along N: ceil(N / tile_cols), except for the stream kernel, where it may be larger (up
  // to ceil(N / 16)): CTA c takes the m16 weight tiles c, c + n_tiles, .. (StreamPlan).
  int64_t n_tiles = 0;
  // kWgmmaBf16 only: the warp-specialised persistent main loop (wgmma_ws) runs it; the launcher
  // falls back to the cp.async one if the driver cannot make the TMA descriptors.
  bool warp_specialised = false;
  // warp_specialised and M >= kLinearCudaExpandMinRows and expand_weights: the weight is expanded
  // to bf16 in the workspace first (LinearCudaParams::expand_weights).
  bool expand_weights = false;
  // kStream only: the TMA-ring variant runs it (the automatic plan where LinearCudaStreamTmaPays;
  // n_tiles = ceil(N / 128), the splits by StreamTmaPlan's balance rule).
  bool tma_ring = false;
  // warp_specialised with one split and LinearCudaParams::stream_k_tail: LinearCudaTailPlan of
  // the m_tiles · n_tiles tiles (ranges 1: none).
  LinearCudaTail tail;
};
// The warp-specialised bf16 kernel's tile width for an M × N call with `splits` K splits on `sms`
// SMs: of 256, 192, 160 and 128 columns the one with the least waves × (columns + 64) — a
// persistent CTA's tile takes time in proportion to its columns plus a fixed share, and the last
// wave's idle SMs count in full — ties to the wider tile. E.g. on 132 SMs at M = 4,096: N 1,280
// (wq_a) 160 (256 tiles in 2 waves instead of 160 in 2), N 2,304 (shared w1|w3) 192 (384 in 3
// instead of 288 in 3), N 1,792 (wq_a | wkv stacked) and N 5,120 256. Pure.
int64_t LinearCudaWsTileCols(int64_t m, int64_t n, int64_t splits, int64_t sms);
// Whether `cols` is a LinearCudaParams::ws_tile_cols value: 0, 128, 160, 192 or 256.
bool LinearCudaWsTileColsValid(int64_t cols);
// Whether a warp-specialised plan on bf16 weights (the FP8 Linear's expanded plan, the bf16
// Linear's wgmma plan) runs unsplit instead of the K splits that would fill the SMs: true once
// m_tiles · ceil(N / 128) · groups — its tiles at 128 columns — reach half of the 132 SMs the
// plans target. The splits' fp32 partials and reduction then cost more than the narrow tiles
// (session 67, H100: wq_a | wkv at 1,024 rows 52.6 -> 40.0 µs, wkv / the compressor's wkv at
// 4,096 57.9 -> 43.8, the gate at 4,096 49.4 -> 44.4; kernels/gemm/fused_linears.md). Only the
// shape decides, never the device. Pure.
bool LinearCudaWsUnsplitPays(int64_t m_tiles, int64_t n, int64_t groups);
// The width a valid ws_tile_cols request runs: 0 -> LinearCudaWsTileCols(m, n, splits, sms), else
// the request. Pure.
int64_t LinearCudaWsTileColsFor(int64_t requested, int64_t m, int64_t n, int64_t splits,
                                int64_t sms);

LinearCudaPlan PlanLinearCuda(int64_t m, int64_t n, int64_t k, int64_t tile_rows = 0,
                              int64_t split_k = 0, bool wgmma_bf16 = true, bool wgmma_ws = true,
                              bool expand_weights = true, bool stream_k_tail = false,
                              int64_t stream_ctas = 0);

// Workspace bytes for any m <= max_m with the given tile_rows / split_k (0 = automatic),
// wgmma_bf16, wgmma_ws, expand_weights, stream_k_tail and stream_ctas: the activation region
// (LinearCudaActivationBytes; none for the stream kernel), then, when the plan splits K, the fp32
// partials (4·splits·M·N, rounded up to 256) and for the stream kernel its arrival counters (8
// bytes per m tile × n tile, rounded up to 256), then, when the plan has a stream-K tail, its
// range partials (128 KiB per range item, at most kLinearCudaTailSlots items: 16.5 MiB), then,
// when a plan expands the weight, its bf16 copy (2·N·K).
// Monotone in max_m; 0 for max_m <= 0. Cost: O(min(max_m, 16896)) plans.
size_t LinearCudaWorkspaceBytes(const Fp8LinearDevice& w, int64_t max_m, int64_t tile_rows = 0,
                                int64_t split_k = 0, bool wgmma_bf16 = true, bool wgmma_ws = true,
                                bool expand_weights = true, bool stream_k_tail = false,
                                int64_t stream_ctas = 0);
// Byte offsets of the workspace regions for one call with m rows (the launcher's layout).
struct LinearCudaWorkspaceLayout {
  size_t activations = 0;    // QDQ activations or codes + scales (none for the stream kernel)
  size_t partials = 0;       // fp32 split-K partials (when plan.splits > 1)
  size_t counters = 0;       // the stream kernel's arrival counters (when plan.splits > 1)
  size_t tail_partials = 0;  // fp32 [tail items][128 × 256] (when plan.tail.ranges > 1)
  size_t expanded = 0;       // bf16 [N, K] weight (when plan.expand_weights)
  size_t end = 0;            // bytes the call needs
};
LinearCudaWorkspaceLayout LinearCudaLayout(const LinearCudaPlan& plan, int64_t m, int64_t n,
                                           int64_t k);

// The workspace's activation region for any kernel: the QDQ bf16 activations (2·M·K bytes), or
// for the FP8 wgmma kernel the E4M3 codes (M·K, rounded up to 256) then the UE8M0 scales
// (M rows of LinearCudaActScaleStride(K) bytes); rounded up to 256.
size_t LinearCudaActivationBytes(int64_t m, int64_t k);
// Bytes per row of the activation scales: ceil(K / 128) · 4 (whole 4-byte stage words).
inline int64_t LinearCudaActScaleStride(int64_t k) { return (k + 127) / 128 * 4; }

// InvalidArgumentError naming the first bad field of p, else OK. Host-only checks (no device
// access): pointer nullness and alignment, dims, strides, workspace size.
absl::Status ValidateLinearCudaParams(const LinearCudaParams& p);

// y = x · W^T (+ bias) as documented above: the activation QDQ kernel, the GEMM, and for split
// plans the reduction; for the stream kernel (automatic at M <= 8) one launch doing all three.
// Errors: ValidateLinearCudaParams's. Cost: 1 kernel launch (stream), else 2-3.
absl::Status LaunchLinearFp8(const LinearCudaParams& p, CUstream_st* stream);

// Writes the exact bf16 expansion of w's codes × scales (E4M3 × UE8M0 per 32 × 32 block) into
// `out` [N, K] (2·N·K bytes, 16-byte aligned, not overlapping w): what the plans on expanded
// weights compute per call, to be kept as Fp8LinearDevice::expanded. Errors: Validate(w)'s,
// InvalidArgumentError for a null or misaligned `out`. Cost: one launch reading N·K·(1 + 1/1024)
// bytes and writing 2·N·K.
absl::Status LaunchExpandFp8Linear(const Fp8LinearDevice& w, uint16_t* out, CUstream_st* stream);

// The device copy of a kFp8Block32 PreparedLinear (codes, scales, bias) in Fp8LinearDevice
// layout, owning its device memory (cudaMalloc at Upload, cudaFree at destruction). Move-only.
class DeviceFp8Linear {
 public:
  // Synchronous upload (cudaMemcpy). Errors: InvalidArgumentError when `w` is not kFp8Block32,
  // K is not a multiple of 32 or above kLinearCudaMaxK, or a code is an E4M3 NaN (0x7F / 0xFF;
  // the message gives its row and column). Cost: O(N·K) host scan + the copy.
  // keep_expanded: the allocation also holds the weight's exact bf16 expansion (2·N·K more bytes,
  // written by LaunchExpandFp8Linear on the legacy stream before Upload returns), and the view's
  // `expanded` points at it.
  static absl::StatusOr<DeviceFp8Linear> Upload(const PreparedLinear& w,
                                                bool keep_expanded = false);

  DeviceFp8Linear() = default;
  ~DeviceFp8Linear();
  DeviceFp8Linear(DeviceFp8Linear&& o) noexcept;
  DeviceFp8Linear& operator=(DeviceFp8Linear&& o) noexcept;
  DeviceFp8Linear(const DeviceFp8Linear&) = delete;
  DeviceFp8Linear& operator=(const DeviceFp8Linear&) = delete;

  const Fp8LinearDevice& view() const { return view_; }
  size_t device_bytes() const { return bytes_; }

 private:
  void Release();

  void* memory_ = nullptr;  // one allocation: codes, scales, bias, then the bf16 expansion
  size_t bytes_ = 0;
  Fp8LinearDevice view_;
};

}  // namespace flashserve::kernels
