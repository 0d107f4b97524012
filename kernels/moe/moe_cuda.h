// CUDA launchers of the MoE layer (moe.h's numerics on sm_90a): routing from precomputed gate
// logits, a counting sort of the (token, rank) slots by expert with the FP8 activation quantiser,
// the grouped FP4 expert GEMMs (w1/w3 fused with SwiGLU, then w2) and the combine.
// README.md "CUDA" documents the design, the tests and their tolerances.
//
// Numerics against MoeCpu (exact mode):
// - Router: MoeRouteCpu's fp32 operations in its order; exp and log1p are correctly rounded (the
//   double result rounded once), which glibc's expf/log1pf are not always, so a score can differ
//   by an ulp: ids equal except at near ties, weights within a few ulp.
// - Activations: x is quantised once per token, per 32 to FP8 E4M3 + UE8M0, exactly as LinearCpu
//   does (bit-identical codes and scales); the SwiGLU output likewise before w2.
// - GEMMs: the FP8 activation values (code × scale) and the FP4 weight values (E2M1 code × E8M0
//   scale) are exact bf16 numbers (at most 4 significant bits times a power of two), so the
//   blockwise sum of the reference is a plain bf16 GEMM with fp32 accumulation: mma.sync
//   m16n8k16 on the bf16 tensor cores. Only the fp32 summation order differs from LinearCpu (as
//   in its fast mode), so g, u and the expert outputs can differ by one bf16 rounding.
// - SwiGLU: MoeSwiGluRow's operations in its order, exp correctly rounded (glibc's expf is not on
//   one bf16 input, -0x1.9cp-4); the gate factor g / (1 + exp(-g)) of a bf16 g comes from a table
//   of those correctly rounded values (moe_swiglu_table.h).
// - Combine: per token an fp32 sum from 0 of its routed bf16 outputs in ascending expert id, then
//   the shared expert's bf16 output, one RNE cast: the CPU's operations, bit for bit.
// - Shared expert: either run here (MoeCudaParams::shared: the FP8 dense SwiGLU of
//   moe_shared_cuda.h, kernels/gemm's FP8 Linear) or computed by the caller and passed as
//   `shared_y`; the combine adds its bf16 output last, exactly where MoeCpu adds it.
//
// Common contract: every tensor pointer is a device pointer (or managed memory); bf16 tensors are
// uint16 bit patterns; strides count elements. Launchers validate first (InvalidArgumentError
// naming the field; nothing is enqueued then), then enqueue on `stream` and return; buffers must
// stay valid until the stream passes the work. Nothing is allocated. CUDA launch failures abort
// (CUDA_CHECK). Concurrent launches need distinct outputs and workspaces.
// This header includes no CUDA header; CUstream_st* is cudaStream_t (nullptr: legacy stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/moe/moe_route.h"

struct CUstream_st;
struct CUevent_st;

namespace flashserve::kernels {

struct MoeSharedExpertWeights;  // moe_shared_cuda.h

inline constexpr int64_t kMoeCudaMaxTopK = 16;
inline constexpr int64_t kMoeCudaMaxExperts = 1024;
// D and I must be multiples of this (the GEMMs' K step; every model dim is).
inline constexpr int64_t kMoeCudaDimMultiple = 128;

// Column order of the GEMM operand rows (xg, ag): inside every 32-column block, logical column
// 8t + j + 4h (t, j < 4, h < 2) is stored at 8t + 2j + h, so that one 16-byte load gives a tensor-
// core thread the four bf16 pairs it multiplies with the four pairs it decodes from one 32-bit
// word of FP4 weights (README.md "CUDA"). The bf16 values themselves are the QDQ values.
constexpr int64_t MoeOperandColumn(int64_t k) {
  const int64_t r = k % 32;
  return k - r + 8 * (r / 8) + 2 * (r % 4) + (r % 8) / 4;
}

// The bit order of the E2M1 codes inside each 32-bit word of the device expert weights
// (moe_fp4_code_order.h). The GEMMs read kDevice only; weights uploaded in checkpoint order are
// converted once, in place, by MoeFp4CodesToDeviceOrder (host bytes) or LaunchMoeFp4ToDeviceOrder
// (device bytes), and the weights then declare it, so checkpoint-order codes can never be decoded
// by mistake (Validate refuses them).
enum class MoeFp4CodeOrder : int {
  kCheckpoint = 0,  // as in the checkpoint: element n of a word in bits 4n..4n+3
  kDevice = 1,      // MoeFp4ToDeviceOrder applied to every 32-bit word
};

// Host bytes of packed E2M1 codes, in place, checkpoint order -> device order (`bytes` a multiple
// of 4, else it aborts; the words are little-endian, i.e. byte j of a word holds elements 2j,
// 2j + 1), and back.
void MoeFp4CodesToDeviceOrder(uint8_t* codes, size_t bytes);
void MoeFp4CodesToCheckpointOrder(uint8_t* codes, size_t bytes);
// The same on device bytes (`codes` 4-byte aligned, `bytes` a multiple of 4), enqueued on stream.
// InvalidArgumentError for a null / misaligned pointer or a bad size (nothing enqueued); 0 bytes is
// a no-op. A launch failure aborts, as for every launcher here.
absl::Status LaunchMoeFp4ToDeviceOrder(uint8_t* codes, int64_t bytes, CUstream_st* stream);

// The register-sourced wgmma GEMM's operand order (MoeExpertUpParams / MoeExpertDownParams
// wgmma_rs: its xg input, its ag output and input): MoeOperandColumn's 32-bit words transposed as
// a 4 × 4 matrix inside every 32-column block, i.e. logical column 8t + j + 4h (t, j < 4, h < 2)
// at 8j + 2t + h — so each of the GEMM's quad lanes decodes one whole FP4 code word.
constexpr int64_t MoeRsOperandColumn(int64_t k) {
  const int64_t r = k % 32;
  return k - r + 8 * (r % 4) + 2 * (r / 8) + (r % 8) / 4;
}

// One layer's routed experts on the device, with the experts contiguous: the checkpoint's tensors
// with the codes in device order (code_order, above).
struct MoeCudaWeights {
  int64_t n_experts = 0;                // E, 1..kMoeCudaMaxExperts
  int64_t dim = 0;                      // D, a multiple of kMoeCudaDimMultiple
  int64_t inter = 0;                    // I, a multiple of kMoeCudaDimMultiple
  const uint8_t* w1 = nullptr;          // [E, I, D/2] packed E2M1, words in code_order
  const uint8_t* w1_scale = nullptr;    // [E, I, D/32] UE8M0
  const uint8_t* w3 = nullptr;          // [E, I, D/2]
  const uint8_t* w3_scale = nullptr;    // [E, I, D/32]
  const uint8_t* w2 = nullptr;          // [E, D, I/2]
  const uint8_t* w2_scale = nullptr;    // [E, D, I/32]
  const float* gate_bias = nullptr;     // [E] or null (= 0)
  const float* gate_bias_vl = nullptr;  // [E]; required when is_image is given
  MoeFp4CodeOrder code_order = MoeFp4CodeOrder::kCheckpoint;  // of w1 / w3 / w2: must be kDevice
};
// Code pointers must be 16-byte aligned, scale pointers 4-byte aligned, the codes in device order.
absl::Status Validate(const MoeCudaWeights& w);

// ---- Stages (what MoeCuda enqueues; public for tests, benches and other schedules) ----------

// The kernel shape of the route and permute stages. Both shapes of a stage write the same bytes
// (tested); kAuto picks the faster guess from the batch size, the others force one (tests, A/B in
// the bench).
enum class MoeCudaPath : int {
  kAuto = 0,
  kSmall = 1,  // route: a block per token; permute: the one-block counting sort
  kLarge = 2,  // route: a warp per token; permute: the multi-block sort (needs sort_scratch)
};
// kAuto takes the warp-per-token route from this many tokens on (below, a block per token has the
// lower latency; above, its per-pass block barriers and the redundant winner merge of every
// thread dominate).
inline constexpr int64_t kMoeCudaRouteWarpMinTokens = 512;
// kAuto takes the multi-block sort from this many slots (m·top_k) on: 256 tokens at top-6.
inline constexpr int64_t kMoeCudaSortMultiBlockMinSlots = 1536;
// The multi-block sort cuts the slots into at most this many chunks (blocks) of a multiple of
// kMoeCudaSortChunkUnit slots each.
inline constexpr int64_t kMoeCudaSortMaxBlocks = 64;
inline constexpr int64_t kMoeCudaSortChunkUnit = 1024;

// The route shape for m tokens: `path` itself unless kAuto. Pure.
MoeCudaPath MoeCudaRoutePath(int64_t m, MoeCudaPath path = MoeCudaPath::kAuto);

// How LaunchMoePermute sorts `slots` (m·top_k) slots: `path` resolved (kAuto: kLarge from
// kMoeCudaSortMultiBlockMinSlots on when a scratch buffer is given, else kSmall) and, for kLarge,
// the chunking: `blocks` chunks of `chunk` slots (the last one partial), chunk = the smallest
// multiple of kMoeCudaSortChunkUnit that keeps blocks <= kMoeCudaSortMaxBlocks. Pure.
struct MoeCudaSortPlan {
  MoeCudaPath path = MoeCudaPath::kSmall;
  int64_t chunk = 0;   // slots per block (kLarge)
  int64_t blocks = 1;  // blocks of the count and scatter kernels (kLarge)
};
MoeCudaSortPlan MoeCudaPlanSort(int64_t slots, MoeCudaPath path, bool has_scratch);

// Device scratch of the multi-block sort (MoePermuteParams::sort_scratch): one int32 count per
// (block, expert), any m. MoeCuda keeps it in its workspace.
constexpr int64_t MoeCudaSortScratchBytes(int64_t n_experts) {
  return 4 * kMoeCudaSortMaxBlocks * n_experts;
}

// Stage 1: MoeRouteCpu on the device. Same params (device pointers), with two differences: an
// is_image array requires bias_vl (the flags are not read on the host), and n_experts <=
// kMoeCudaMaxExperts, top_k <= kMoeCudaMaxTopK. `expert_counts` (optional, [E], zeroed by the
// caller) gets the number of tokens routed to each expert added. Two shapes, the same bytes out
// (MoeCudaRoutePath): kSmall, a block per token and a thread per expert (lowest latency for a
// few tokens); kLarge, a warp per token, each lane holding ceil(E/32) experts in registers (no
// barriers; the large-batch shape).
absl::Status LaunchMoeRoute(const MoeRouteParams& p, int32_t* expert_counts, CUstream_st* stream,
                            MoeCudaPath path = MoeCudaPath::kAuto);

// Stage 2: stable counting sort of the m·top_k (token, rank) slots by expert, O(m·k) — tokens
// ascending inside an expert, as MoeCpu — plus the tile list of the grouped GEMMs, and the FP8
// quantiser: each token's x row is quantised once and its QDQ values written to its top_k slot
// rows (the gathered GEMM operand), or once to row t (xg_by_token). Two shapes, the same bytes out
// (MoeCudaPlanSort): kSmall, one block (per-warp histograms, exclusive scans, stable scatter);
// kLarge, three kernels (per-block expert histograms, a scan over blocks × experts that also writes
// the offsets and tiles, then each block's stable scatter of its chunk from its per-expert bases),
// for large m.
struct MoePermuteParams {
  int64_t m = 0;          // tokens; 0 is a no-op
  int64_t n_experts = 0;  // E
  int64_t top_k = 0;
  int64_t dim = 0;                         // D
  int64_t tile_rows = 16;                  // rows per GEMM tile: 8 .. 128 (MoeCudaTileRows)
  const int32_t* expert_ids = nullptr;     // [m, top_k] (LaunchMoeRoute's)
  const float* expert_weights = nullptr;   // [m, top_k]
  const int32_t* expert_counts = nullptr;  // unused (the sort counts the ids); may be null
  const uint16_t* x = nullptr;             // bf16 [m, D], 16-byte aligned rows
  int64_t x_stride = 0;                    // >= D, a multiple of 8
  int32_t* offsets = nullptr;              // out [E + 1]: expert e owns slot rows [o[e], o[e+1])
  int32_t* slot_token = nullptr;           // out [m·k]: token of each slot row
  float* slot_weight = nullptr;            // out [m·k]: its routing weight
  int32_t* token_slot = nullptr;           // out [m·k]: slot row of (token t, rank j) at t·k + j
  int32_t* tiles = nullptr;                // out [2·m·k]: (expert, first slot row) per tile
  int32_t* num_tiles = nullptr;            // out [1]
  uint16_t* xg = nullptr;                  // out bf16 [m·k, D]: QDQ(x) rows, operand order
  bool wgmma_rs_order = false;             // xg in MoeRsOperandColumn order (for the wgmma_rs GEMM)
  bool xg_by_token = false;     // xg is [m, D]: token t's QDQ row once, at row t (the up stage
                                // then reads it through slot_token: MoeExpertUpParams)
  uint8_t* x_codes = nullptr;   // optional out [m, D]: FP8 E4M3 codes
  uint8_t* x_scales = nullptr;  // optional out [m, D/32]: UE8M0 scale bytes
  MoeCudaPath path = MoeCudaPath::kAuto;  // sort shape (kLarge needs sort_scratch)
  int32_t* sort_scratch = nullptr;        // optional [MoeCudaSortScratchBytes(E) / 4], any contents
  // Optional out [4]: zeroed — the TMA-ring GEMMs' work counters, the first 16 bytes of the
  // ring_partials of this call's expert stages (MoeExpertUpParams::ring_counters_zeroed), or the
  // register-sourced GEMM's (MoeExpertUpParams::wgmma_rs_counters: up 0, 1, down 2, 3).
  int32_t* ring_counters = nullptr;
  // The fused front only: every CTA calls PdlLaunchDependents first, so that a LaunchPdl kernel
  // after it (the TMA ring's up stage) is scheduled while it routes (MoeCudaParams::early_ring).
  bool launch_dependents = false;
  // The fused front only: each token's top-k by warp reductions (RouteTokenWarp's `redux`,
  // session 77); false = by the shuffle merge (MoeCudaParams::route_redux; A/B, the same bytes).
  bool route_redux = true;
  // The fused front only: launched as a programmatic dependent of the stream's previous kernel
  // (MoeCudaParams::front_programmatic); every CTA waits (PdlWaitPrerequisites) before it reads.
  bool programmatic = false;
};
absl::Status Validate(const MoePermuteParams& p);
absl::Status LaunchMoePermute(const MoePermuteParams& p, CUstream_st* stream);

// Stages 1 + 2 fused for decode sizes (MoeCudaFrontFits(m)): LaunchMoeRoute (no counts)
// followed by LaunchMoePermute in one launch — in block 0 every score by a thread, a warp choosing
// each token's experts, counted in shared memory, then the offsets, tile list and stable slot
// order; the quantise with xg_by_token by extra CTAs of the launch, concurrently (the rows by
// token do not depend on the routing), else in block 0 after the scatter when one pass covers x
// (m·D/32 <= 512 blocks; else the permute's own gather kernel follows). The same bytes as the two
// launchers (tested). `route` and `permute` must describe one call: the same m, n_experts and
// top_k, and permute's expert_ids /
// expert_weights must be route's outputs; permute.path must be kAuto or kSmall (the one-block
// sort). MoeCuda takes it when MoeCudaFrontFits, route_path and sort_path are kAuto and
// fused_front is set. Errors: each stage's Validate, InvalidArgumentError naming the mismatch or
// m above the limits.
// Up to this many tokens (H200, bench_moe front_us against route_us + perm_us, event-timed:
// 1 token 14.3 against 21.4 µs, 2: 16.2 / 22.3, 4: 18.9 / 23.3, 8: 22.4 / 23.5; at 16 and 32
// tokens the one block's scores and selection lose: 29.7 / 23.8, 45.7 / 23.8).
inline constexpr int64_t kMoeCudaFrontMaxTokens = 8;
constexpr bool MoeCudaFrontFits(int64_t m) { return m <= kMoeCudaFrontMaxTokens; }
absl::Status ValidateMoeRoutePermute(const MoeRouteParams& route, const MoePermuteParams& permute);
absl::Status LaunchMoeRoutePermute(const MoeRouteParams& route, const MoePermuteParams& permute,
                                   CUstream_st* stream);

// Which expert GEMM runs the up / down stages. The tile size selects it: tile_rows 8 is the
// weight-streaming GEMM (weights as the mma A operand, decoded from registers; the <= 8 slot rows
// of a tile as B; no K-loop barrier), and with the stage params' `stream` tile_rows 16 / 32 are
// the same GEMM with two / four n8 slot tiles per decoded weight (kStream16 / kStream32), 16 / 32
// / 64 without it the tiled GEMM (slot rows as A, a cp.async ring of weights, mma.sync), 128 the
// wgmma GEMM (two warpgroups × 64 slot rows, FP4 weights decoded into 128-byte-swizzled bf16 shared
// memory, wgmma.mma_async m64n256k16) or, with the stage params' `wgmma_rs`, on 128-row tiles or
// the 32- / 48- / 64- / 80- / 96-row tiles MoeCudaRsTileRows gives, the register-sourced wgmma GEMM
// (kWgmmaRs: weights as the wgmma A operand decoded by the consumer warpgroups straight into
// registers, the slot rows as B in shared memory, a producer warpgroup filling an mbarrier ring).
// All give the same bits on exact-arithmetic inputs (only the fp32 summation order can differ).
// kAuto (MoeCudaChooseGemm): the register-sourced wgmma GEMM from kMoeCudaWgmmaMinSlotsPerExpert
// (8) slots per expert on average (512 tokens at E 384 top-6; 4, i.e. 256 tokens, on a device of
// less DRAM bandwidth per SM-cycle such as the H100: MoeCudaRsMinSlotsPerExpert), on 32- / 64- /
// 96- / 128-row tiles (MoeCudaRsTileRows); below it streaming where D and I are at most
// kMoeCudaStreamMaxK: the TMA-ring form (kStreamRing) up to MoeCudaRingMaxSlots(E) slots (4 per
// expert), 8-row tiles (kStream) up to 6 per expert (and above it where 16-row tiles do not fit, D
// or I above kMoeCudaStream16MaxK), 16-row tiles (kStream16) above; else tiled. kStream32 and
// kWgmma (the shared-memory-decoding wgmma GEMM, slower than kWgmmaRs at every measured count) stay
// for A/B only.
enum class MoeCudaGemm : int {
  kAuto = 0,
  kTiled = 1,     // tile_rows 16, 32 or 64 (the mean slots per expert)
  kStream = 2,    // tile_rows 8 (D and I must be <= kMoeCudaStreamMaxK)
  kWgmma = 3,     // tile_rows 128
  kWgmmaRs = 4,   // tile_rows 32 .. 128 (MoeCudaRsTileRows), the stage params' wgmma_rs
  kStream16 = 5,  // tile_rows 16, the stage params' `stream` (D and I <= kMoeCudaStream16MaxK)
  kStream32 = 6,  // tile_rows 32, the stage params' `stream` (D and I <= kMoeCudaStreamMaxK)
  // tile_rows 8, the stage params' `ring`: the streaming GEMM's numerics with the weights, scales
  // and activations brought by TMA through a shared-memory ring, the call's units cut over
  // two persistent CTAs per SM, split pairs summed by an epilogue kernel
  // (kernels/moe/ring_gemm.md). MoeCuda runs it up to MoeCudaRingMaxSlots(E) slots with D and I
  // multiples of 256; other calls run kStream.
  kStreamRing = 7,
};
inline constexpr int64_t kMoeCudaStreamTileRows = 8;
inline constexpr int64_t kMoeCudaStream16TileRows = 16;
inline constexpr int64_t kMoeCudaStream32TileRows = 32;
// The TMA-ring GEMM (kStreamRing): kAuto takes it from one token up to
// kMoeCudaRingMaxSlotsPerExpert slots per expert on average (MoeCudaRingMaxSlots: 1,536 slots,
// 256 tokens, at E 384 top-6), and MoeCuda runs it (kAuto or forced) only there, where its
// partials fit the workspace; the stage launchers take any slot count. Measured on the H200
// (bench_moe --shared 0, the routed layer, median µs, the register-ring streaming GEMM / the
// ring; sessions 33–34): 1 token 68.1–68.6 / 65.3–66.0, 2: 116.2 / 92.8–93.4, 4: 183.9 /
// 148.0–148.9, 8: 332.0 / 252.8–254.3, 16: 549.0–549.6 / 444.1–445.5, 32: 931–934 / 757–758, 64:
// 1,464–1,466 / 1,222, 128: 1,974–1,976 / 1,738, 256: 2,285–2,287 / 2,168–2,170, 512 (8 per
// expert): 2,901–3,013 / 3,151–3,157 — past ~4 slots per expert an expert's slots more often need
// a second 8-row tile, which streams its weights again.
inline constexpr int64_t kMoeCudaRingMaxSlotsPerExpert = 4;
constexpr int64_t MoeCudaRingMaxSlots(int64_t n_experts) {
  return kMoeCudaRingMaxSlotsPerExpert * n_experts;
}
// A pair of a tile's 128 weight rows is split over at most kMoeCudaRingMaxOrdinals chunks.
inline constexpr int64_t kMoeCudaRingMaxOrdinals = 8;
// How a TMA-ring GEMM call's units are cut over its persistent CTAs (kernels/moe/ring_gemm.md,
// "Session 42"). Output bits do not depend on it beyond the fp32 summation order of split pairs
// (each cut fixes where pairs are split, whichever CTA runs a chunk).
enum class MoeCudaRingCut : int {
  // kDynamic from MoeCudaRingDynamicMinSlots(E) slots, kStatic below.
  kAuto = 0,
  // One contiguous range per CTA, equal in units (± 1).
  kStatic = 1,
  // A lead chunk per CTA (6/8 of the units), then small chunks (about 8 per CTA) grabbed from a
  // counter: the two CTAs of an SM do not run at the same speed on equal work, a unit costs more
  // with more slot rows in its tile, and in the decoder layer the shared expert's branch holds
  // some SMs. Its mechanics cost ~5 % against kStatic where balance matters less and ~7 us at one
  // token. Measured on the H200 (session 42, kStatic / kDynamic): the routed layer alone
  // (bench_moe --shared 0, median us) 8 tokens 250 / 266, 64: 1,221 / 1,218, 128: 1,742 / 1,670-
  // 1,682, 256: 2,155-2,162 / 2,034-2,051; the decoder layer step (bench_decoder_layer_step, graph
  // us) 32 tokens 911-913 / 923, 48: 1,179-1,180 / 1,182-1,183, 64: 1,401-1,404 / 1,346-1,347.
  kDynamic = 2,
};
inline constexpr int64_t kMoeCudaRingDynamicMinSlotsPerExpert = 1;  // 64 tokens at E 384 top-6
constexpr int64_t MoeCudaRingDynamicMinSlots(int64_t n_experts) {
  return kMoeCudaRingDynamicMinSlotsPerExpert * n_experts;
}
// A ring GEMM call's units are cut into at most this many chunks (kStatic: one per CTA).
inline constexpr int64_t kMoeCudaRingMaxChunks = 4096;
// Bytes of the ring's buffer for `slots` slot rows of `cols` fp32 each (up: 2·I, down: D): 256
// bytes led by the 16 bytes of work counters (zero before a call's first ring GEMM:
// MoePermuteParams::ring_counters or the stage launcher's memset; each ring GEMM leaves them
// zero), the pairs' first partials [slots][cols], then per chunk the 8 × 128 partials of the pair
// it enters part-way (16 MiB), then an int32 record per slot row (the down ring's, for the combine
// that sums its partials).
constexpr int64_t MoeCudaRingPartialBytes(int64_t slots, int64_t cols) {
  return 4 * (64 + slots * cols + kMoeCudaRingMaxChunks * 8 * 128 + slots);
}
// The streaming GEMM keeps a tile's activation rows (8 or 16 × K bf16) in shared memory; 32-row
// tiles stage them a K chunk at a time.
inline constexpr int64_t kMoeCudaStreamMaxK = 8192;
inline constexpr int64_t kMoeCudaStream16MaxK = 7168;
// kAuto streams 8-row tiles up to this many slots per expert on average where 16-row tiles fit
// (max(D, I) <= kMoeCudaStream16MaxK): above it the 16-row streaming GEMM's 16 warps per CTA beat
// the second 8-row tiles that ~a fifth of the experts need. Measured on the H200 (session 43,
// bench_moe --iters 15 --warmup 3 --shared 0, the routed layer at E 384 top-6, median µs, kStream
// / kStream16): 384 tokens (6 per expert) 2,566-2,576 / 2,568-2,570, 448: 2,843-2,888 /
// 2,615-2,617, 512: 2,991-3,026 / 2,649-2,654, 576: 3,254-3,510 / 2,708-2,711; 320: 2,443-2,524 /
// 2,534.
inline constexpr int64_t kMoeCudaStream8MaxSlotsPerExpert = 6;
inline constexpr int64_t kMoeCudaWgmmaTileRows = 128;
// kAuto takes the register-sourced wgmma GEMM (kWgmmaRs) from this many slots per expert on
// average. Measured on the H200 (session 59, after its 32- / 64-row tiles on four consumer
// warpgroups became the default; bench_moe --iters 10 --warmup 2 --shared 0, the layer without
// the shared expert, µs, kAuto's streaming GEMM then / kWgmmaRs): 128 tokens (2 per expert) 1,662
// / 2,198, 192: 1,887 / 2,428, 256: 2,016 / 2,475, 384: 2,545 / 2,548, 512: 2,631 / 2,577, 640:
// 2,744 / 2,608, 768: 2,921 / 2,658, 1,024: 3,606 / 2,756 (kernels/moe/wgmma_rs_gemm_sessions.md
// "Session 59"). From session 44 to 58 it was 20 (1,280 tokens), where RS on 128-row tiles drew
// level with the 32-row streaming GEMM (README.md "32-row tiles").
inline constexpr int64_t kMoeCudaWgmmaMinSlotsPerExpert = 8;
// The same threshold on a device with less DRAM bandwidth per SM-cycle (session 60). The RS GEMM
// is bound by its consumers' issue (it scales with SMs × clock), the streaming GEMMs below it by
// the DRAM bandwidth, so the crossover moves with the bytes a device's DRAM delivers per SM-cycle:
// the H200 (its attributes: 2 × 3,201 MHz × 768 B = 4.9 TB/s, 132 SMs at 1.98 GHz: 18.8 B per
// SM-cycle) takes the RS GEMM from 8 slot rows per expert (above), a device below
// kMoeCudaRsLowBandwidthBytesPerSmCycle — the H100 SXM (2 × 2,619 MHz × 640 B = 3.35 TB/s: 12.8),
// the H100 PCIe (~10) — from 4. Unmeasured devices fall by the same rule: a GH200 with 96 GB of
// HBM3 (4.0 TB/s: ~15.4) takes 4; under MIG the SM count is the slice's while the memory
// attributes are likely the whole device's, so an H100 slice would take 8. Measured on an H100 SXM
// (session 59, kit s58c, `bench_moe --iters 10 --warmup 2 --shared 0`, the layer in µs, the
// streaming GEMM kAuto then ran / the RS GEMM on 32-row tiles): 192 tokens (3 per expert) 2,653 /
// 2,612, 256 (4) 2,810 / 2,666, 384 (6) 3,403 / 2,738, 512 (8) 3,438 / 2,778
// (kernels/moe/wgmma_rs_gemm_sessions.md "Session 59").
inline constexpr int64_t kMoeCudaWgmmaMinSlotsPerExpertLowBandwidth = 4;
inline constexpr double kMoeCudaRsLowBandwidthBytesPerSmCycle = 15.5;
// kAuto's RS threshold for a device whose DRAM delivers `dram_bytes_per_sm_cycle` (its peak
// bandwidth / (SMs × SM clock)): kMoeCudaWgmmaMinSlotsPerExpertLowBandwidth below
// kMoeCudaRsLowBandwidthBytesPerSmCycle, else kMoeCudaWgmmaMinSlotsPerExpert (also for 0 or less:
// unknown). Pure.
int64_t MoeCudaRsMinSlotsPerExpertFor(double dram_bytes_per_sm_cycle);
// The threshold MoeCuda applies: `requested` (MoeCudaParams::rs_min_slots_per_expert) where > 0,
// else the current CUDA device's by MoeCudaRsMinSlotsPerExpertFor (its attributes read once per
// device, then cached; kMoeCudaWgmmaMinSlotsPerExpert where no device answers). Host code,
// thread-safe; defined with the CUDA launchers (FLASHSERVE_CUDA builds only).
int64_t MoeCudaRsMinSlotsPerExpert(int64_t requested = 0);

// The GEMM a call with these arguments runs (never kAuto): a forced `gemm` as given; kAuto by
// the mean slots per expert (see MoeCudaGemm; the RS GEMM from `rs_min_slots_per_expert`, which
// MoeCuda takes from MoeCudaRsMinSlotsPerExpert), the streaming GEMMs only where `max_k` = max(D,
// I) fits their shared memory (0 = unknown, taken as fitting). Any choice is correct; this is the
// fastest guess. Pure. The default rs_min_slots_per_expert is the H200's threshold: to predict
// what MoeCuda runs on the current device pass MoeCudaRsMinSlotsPerExpert(its params' value) (as
// MoeCudaDescribeGemm and bench_moe do); the same holds for the two functions below.
MoeCudaGemm MoeCudaChooseGemm(int64_t m, int64_t top_k, int64_t n_experts,
                              MoeCudaGemm gemm = MoeCudaGemm::kAuto, int64_t max_k = 0,
                              int64_t rs_min_slots_per_expert = kMoeCudaWgmmaMinSlotsPerExpert);

// Whether MoeCuda runs the register-sourced GEMM for the down projection after another GEMM for
// the up projection (MoeCudaParams::down_gemm kWgmmaRs, the up GEMM neither kWgmmaRs nor the TMA
// ring, i.e. not MoeCudaChooseGemm's kStreamRing at <= MoeCudaRingMaxSlots(E) slots). Pure.
bool MoeCudaDownRsAfterOtherUp(int64_t m, int64_t top_k, int64_t n_experts, MoeCudaGemm gemm,
                               MoeCudaGemm down_gemm, int64_t max_k = 0,
                               int64_t rs_min_slots_per_expert = kMoeCudaWgmmaMinSlotsPerExpert);

// The register-sourced GEMM's tile rows for `slots` slot rows of n_experts experts
// (MoeCudaParams::rs_tile_rows): kMoeCudaRsNarrowTileRows (32) at <=
// kMoeCudaRsNarrowMaxSlotsPerExpert slot rows per expert on average (its {16, 32} kernels:
// RsWidthSetFor's set there for both projections), whose 32-row ring stages leave room for 8 of
// them instead of 4; kMoeCudaRsMidTileRows (64) at <= kMoeCudaRsMidMaxSlotsPerExpert (the {32, 64}
// kernels for both projections, 6 stages of 64 rows); kMoeCudaRsWideTileRows (96) at <=
// kMoeCudaRsWideMaxSlotsPerExpert (the {64, 96} kernels, 5 stages of 96 rows: at 41–80 rows per
// expert on average, 2,561–5,120 tokens at E 384 top-6, an expert still takes one tile, one decode
// of its weights, while the widths pad less than the 128-row kernels' n128; kAuto's at 65–80
// since session 61, kMoeCudaRs80TileRows below); otherwise kMoeCudaWgmmaTileRows (128).
// rs_tile_rows 0 (auto) takes the first automatic height of kMoeCudaRsTileHeights that applies
// (32, 64, 80, 96; else 128); a height asked for takes only that one where it applies (else 128);
// 128 always 128 (A/B). The narrow and wide kernels run four consumer warpgroups
// (FS_MOE_RS_NARROW_WGS); an expert with more rows than a tile takes several tiles, each decoding
// its weights. Measured on an H100 (`bench_moe --shared 0`, the layer): 32-row tiles 3,102 us at
// 1,280 tokens against 3,304 at 128 rows, 64-row tiles 3,459 at 2,048 against 3,669 (session 59);
// 96-row tiles 3,918 / 3,907 at 3,072 against 3,946 / 4,000, 4,353 / 4,347 at 4,096 against 4,688 /
// 4,523, 4,723 / 4,690 at 5,120 against 5,472 / 5,465 at 128 rows (session 60; at 2,560 level with
// 64-row tiles). Pure.
inline constexpr int64_t kMoeCudaRsNarrowTileRows = 32;
inline constexpr int64_t kMoeCudaRsNarrowMaxSlotsPerExpert = 20;
inline constexpr int64_t kMoeCudaRsMidTileRows = 64;
inline constexpr int64_t kMoeCudaRsMidMaxSlotsPerExpert = 40;
inline constexpr int64_t kMoeCudaRsWideTileRows = 96;
inline constexpr int64_t kMoeCudaRsWideMaxSlotsPerExpert = 80;
// Session 60's heights (kernels/moe/wgmma_rs_gemm_sessions.md "Session 61"): 80-row tiles with the
// {64, 80} widths on 6 ring stages, kAuto's at 41–64 slot rows per expert since session 61
// (2,561–4,096 tokens at E 384 top-6: {64, 96} pads the experts of 65–80 rows to n96; H200, against
// the 96-row tiles: 3,797 / 3,793 µs against 3,819 / 3,844 at 3,072 tokens, 3,902 / 3,884 against
// 4,122 / 3,963 at 3,584, level at 4,096); 48-row tiles with {32, 48} on 7 stages at <= 32, only
// where asked for (rs_tile_rows 48: level with the 64-row tiles at 1,536–2,048 tokens, within ±2
// %). Both on four consumer warpgroups.
inline constexpr int64_t kMoeCudaRs48TileRows = 48;
inline constexpr int64_t kMoeCudaRs48MaxSlotsPerExpert = 32;
inline constexpr int64_t kMoeCudaRs80TileRows = 80;
inline constexpr int64_t kMoeCudaRs80MaxSlotsPerExpert = 64;
// The heights above in one table, ascending: rows, the most slot rows per expert on average a
// launch takes them at, and whether rs_tile_rows 0 (kAuto) takes them. MoeCudaRsTileRows, the
// stage params' validation and the RS launcher all read it.
struct MoeCudaRsTileHeight {
  int64_t rows;
  int64_t max_slots_per_expert;
  bool automatic;
};
inline constexpr MoeCudaRsTileHeight kMoeCudaRsTileHeights[] = {
    {kMoeCudaRsNarrowTileRows, kMoeCudaRsNarrowMaxSlotsPerExpert, true},
    {kMoeCudaRs48TileRows, kMoeCudaRs48MaxSlotsPerExpert, false},
    {kMoeCudaRsMidTileRows, kMoeCudaRsMidMaxSlotsPerExpert, true},
    {kMoeCudaRs80TileRows, kMoeCudaRs80MaxSlotsPerExpert, true},
    {kMoeCudaRsWideTileRows, kMoeCudaRsWideMaxSlotsPerExpert, true},
};
int64_t MoeCudaRsTileRows(int64_t slots, int64_t n_experts, int64_t rs_tile_rows);
// Whether `rows` is one of kMoeCudaRsTileHeights.
constexpr bool MoeCudaIsRsTileHeight(int64_t rows) {
  for (const MoeCudaRsTileHeight& h : kMoeCudaRsTileHeights) {
    if (h.rows == rows) return true;
  }
  return false;
}
// Whether rs_tile_rows is one MoeCudaParams takes: 0, a table height or 128.
constexpr bool MoeCudaIsRsTileRowsChoice(int64_t rs_tile_rows) {
  return rs_tile_rows == 0 || rs_tile_rows == kMoeCudaWgmmaTileRows ||
         MoeCudaIsRsTileHeight(rs_tile_rows);
}
// Tile rows only the register-sourced GEMM runs (the permute writes them; the other GEMMs' tiles
// and the regroup's 128-row blocks need heights that divide 128): 48, 80 and 96.
constexpr bool MoeCudaIsRsOnlyTileRows(int64_t tile_rows) {
  return MoeCudaIsRsTileHeight(tile_rows) && kMoeCudaWgmmaTileRows % tile_rows != 0;
}
static_assert(MoeCudaIsRsOnlyTileRows(48) && MoeCudaIsRsOnlyTileRows(80) &&
              MoeCudaIsRsOnlyTileRows(96) && !MoeCudaIsRsOnlyTileRows(32) &&
              !MoeCudaIsRsOnlyTileRows(64) && !MoeCudaIsRsOnlyTileRows(128));

// A short name of the GEMM for benches and test messages ("tiled", "streaming", "streaming
// 16-row", "streaming 32-row", "wgmma", "wgmma RS"; "auto" for kAuto, "unknown" otherwise).
const char* MoeCudaGemmName(MoeCudaGemm gemm);

// Rows per GEMM tile of the GEMM MoeCudaChooseGemm picks: 8 (kStream), 16 (kStream16), 32
// (kStream32), 128 (kWgmma), MoeCudaRsTileRows's default (kWgmmaRs: 32, 64, 96 or 128), and for
// kTiled 16 (a few tokens per expert), 32 or 64 from the mean number of slots per expert. Pure.
int64_t MoeCudaTileRows(int64_t m, int64_t top_k, int64_t n_experts,
                        MoeCudaGemm gemm = MoeCudaGemm::kAuto, int64_t max_k = 0,
                        int64_t rs_min_slots_per_expert = kMoeCudaWgmmaMinSlotsPerExpert);

// K per pipeline stage of the GEMMs (`k_step` of the GEMM params, `gemm_k_step` of MoeCudaParams):
// 0 = automatic (256 for 16- and 32-row tiles when K is a multiple of 256, else 128), or 128 (the
// first design, kept selectable for comparison), or 256 (K must be a multiple of 256; 64-row
// tiles always take 128). The output bits do not depend on it (same per-accumulator order).
// The streaming and wgmma GEMMs ignore it (their own K steps).
inline constexpr int64_t kMoeCudaKStepAuto = 0;

// GEMM main-loop variant (`hoisted_addresses` of the GEMM params, `gemm_hoisted_addresses` of
// MoeCudaParams, bench --hoist 1), off by default until measured: each thread computes the
// source and shared-memory addresses of its cp.async copies once per tile instead of once per K
// stage (fewer integer instructions per weight byte, more registers). Output bits unchanged
// (the same bytes reach the same shared-memory places).
inline constexpr bool kMoeCudaGemmHoistedAddresses = false;

// Stage 3 (tile_rows 8: the streaming GEMM, K = D <= kMoeCudaStreamMaxK, or 16 / 32 with `stream`;
// 128: the wgmma GEMM, or its register-sourced form with wgmma_rs; k_step and hoisted_addresses are
// ignored by these): per tile, g = x·w1^T and u = x·w3^T (bf16 roundings of the fp32 sums), SwiGLU
// with the slot's routing weight, one bf16 cast (MoeSwiGluRow), then the FP8 quantiser per 32 along
// I: ag gets the QDQ values (the w2 operand, operand order).
struct MoeExpertUpParams {
  const MoeCudaWeights* weights = nullptr;  // host struct of device pointers
  float swiglu_limit = 10.f;                // <= 0 disables the clamps
  int64_t slots = 0;                        // m·top_k: rows of xg / ag
  int64_t tile_rows = 16;                   // as given to LaunchMoePermute
  const int32_t* offsets = nullptr;         // LaunchMoePermute's outputs
  const int32_t* tiles = nullptr;
  const int32_t* num_tiles = nullptr;
  const uint16_t* xg = nullptr;         // bf16 [slots, D], or [m, D] with slot_token
  const int32_t* slot_token = nullptr;  // optional [slots]: slot row r reads xg row slot_token[r]
                                        // (LaunchMoePermute's, with xg_by_token)
  const float* slot_weight = nullptr;   // [slots]
  uint16_t* ag = nullptr;               // out bf16 [slots, I], QDQ(a), operand order
  uint16_t* act = nullptr;              // optional out bf16 [slots, I]: a before the quantiser
  int64_t k_step = kMoeCudaKStepAuto;   // 0, 128 or 256 (see kMoeCudaKStepAuto)
  bool hoisted_addresses = false;       // see kMoeCudaGemmHoistedAddresses
  bool wgmma_rs = false;      // tile_rows 128, or 32 .. 96 where MoeCudaRsTileRows gives them: the
                              // register-sourced wgmma GEMM (kWgmmaRs); its operand rows in
                              // MoeRsOperandColumn order
  int64_t wgmma_rs_ctas = 0;  // with wgmma_rs: its persistent CTAs, 0 = one per SM (tests take
                              // fewer, so that each CTA walks many tiles)
  // With wgmma_rs, optional: 2 int32 words, zero on entry (the call leaves them zero), from which
  // its persistent CTAs take their next (256 weight rows × tile) item, so CTAs that drew short
  // items (tiles of <= 64 rows) take more; null: each CTA walks its items grid-stride.
  int32_t* wgmma_rs_counters = nullptr;
  bool stream = false;       // tile_rows 16 / 32: the streaming GEMM (kStream16, D <=
                             // kMoeCudaStream16MaxK / kStream32) instead of the tiled one; 8
                             // always streams
  int stream_row_tiles = 0;  // streaming (tile_rows 8, 16, 32): m16 row tiles per warp, 0 = auto,
                             // 1 or 2 (A/B; 2 falls back to 1 where N is not a multiple of the
                             // wide CTA)
  // tile_rows 8 only: the TMA-ring GEMM (MoeCudaGemm::kStreamRing; any slot count), its fp32
  // partials in ring_partials (16-byte aligned, at least MoeCudaRingPartialBytes(slots, 2·I)
  // bytes, any contents but the first 16: see ring_counters_zeroed). Where D is not a multiple
  // of 256 the streaming GEMM runs instead. Only the fp32 summation order differs.
  bool ring = false;
  float* ring_partials = nullptr;
  int64_t ring_partials_bytes = 0;
  // false (default): the launcher zeroes the work counters in ring_partials' first 16 bytes
  // (a memset before the ring kernel); true: they are zero already — this call's permute cleared
  // them (MoePermuteParams::ring_counters) or a ring GEMM on the same buffer and stream left them
  // so (each does). Only the kDynamic cut reads them.
  bool ring_counters_zeroed = false;
  MoeCudaRingCut ring_cut = MoeCudaRingCut::kAuto;  // kAuto: by the slot count (E = the weights')
};
absl::Status Validate(const MoeExpertUpParams& p);
absl::Status LaunchMoeExpertUp(const MoeExpertUpParams& p, CUstream_st* stream);

// Stage 4: per tile, ye = ag·w2^T, one bf16 rounding (tile_rows 8: the streaming GEMM, K = I <=
// kMoeCudaStreamMaxK, or 16 / 32 with `stream`; 128: the wgmma GEMM, or with wgmma_rs its
// register-sourced form).
struct MoeExpertDownParams {
  const MoeCudaWeights* weights = nullptr;
  int64_t slots = 0;
  int64_t tile_rows = 16;
  const int32_t* offsets = nullptr;
  const int32_t* tiles = nullptr;
  const int32_t* num_tiles = nullptr;
  const uint16_t* ag = nullptr;        // bf16 [slots, I], operand order
  uint16_t* ye = nullptr;              // out bf16 [slots, D]
  int64_t k_step = kMoeCudaKStepAuto;  // 0, 128 or 256 (see kMoeCudaKStepAuto)
  bool hoisted_addresses = false;      // see kMoeCudaGemmHoistedAddresses
  bool wgmma_rs = false;      // tile_rows 128, or 32 .. 96 where MoeCudaRsTileRows gives them: the
                              // register-sourced wgmma GEMM (kWgmmaRs); its operand rows in
                              // MoeRsOperandColumn order
  int64_t wgmma_rs_ctas = 0;  // with wgmma_rs: its persistent CTAs, 0 = one per SM (tests take
                              // fewer, so that each CTA walks many tiles)
  // With wgmma_rs, optional: 2 int32 words, zero on entry (the call leaves them zero), from which
  // its persistent CTAs take their next (256 weight rows × tile) item, so CTAs that drew short
  // items (tiles of <= 64 rows) take more; null: each CTA walks its items grid-stride.
  int32_t* wgmma_rs_counters = nullptr;
  bool stream = false;       // tile_rows 16 / 32: the streaming GEMM (kStream16, I <=
                             // kMoeCudaStream16MaxK / kStream32) instead of the tiled one; 8
                             // always streams
  int stream_row_tiles = 0;  // streaming (tile_rows 8, 16, 32): m16 row tiles per warp, 0 = auto,
                             // 1 or 2 (A/B; 2 falls back to 1 where N is not a multiple of the
                             // wide CTA)
  // As MoeExpertUpParams::ring, with MoeCudaRingPartialBytes(slots, D) bytes (I a multiple of 256,
  // else the streaming GEMM runs), ring_counters_zeroed and ring_cut.
  bool ring = false;
  float* ring_partials = nullptr;
  int64_t ring_partials_bytes = 0;
  bool ring_counters_zeroed = false;
  MoeCudaRingCut ring_cut = MoeCudaRingCut::kAuto;
};
absl::Status Validate(const MoeExpertDownParams& p);
absl::Status LaunchMoeExpertDown(const MoeExpertDownParams& p, CUstream_st* stream);

// Between stages 3 and 4 when the register-sourced GEMM runs the down projection after another
// GEMM ran the up projection (MoeCudaParams::down_gemm; session 55 experiment):
// 1. the register-sourced GEMM's tile list from the permute's list at tile_rows 8 .. 128: the
//    tiles that start a 128-row block of their expert (row0 - offsets[e] a multiple of 128), in
//    order — the list LaunchMoePermute writes at tile_rows 128. One block; `tiles_out` /
//    `num_tiles_out` may be `tiles` / `num_tiles` (in place: it only moves entries down). With
//    slots 0 nothing is enqueued (num_tiles_out is not written).
struct MoeRegroupTilesParams {
  int64_t n_experts = 0;               // E
  int64_t slots = 0;                   // m·top_k (bounds the tile count)
  int64_t tile_rows = 0;               // of the list in: 8, 16, 32, 64 or 128
  const int32_t* offsets = nullptr;    // [E + 1] (LaunchMoePermute's)
  const int32_t* tiles = nullptr;      // [2·tiles]: (expert, first slot row)
  const int32_t* num_tiles = nullptr;  // [1]
  int32_t* tiles_out = nullptr;        // [2·tiles]
  int32_t* num_tiles_out = nullptr;    // [1]
};
absl::Status Validate(const MoeRegroupTilesParams& p);
absl::Status LaunchMoeRegroupTiles(const MoeRegroupTilesParams& p, CUstream_st* stream);
// 2. rows [n_rows, cols] bf16 (16-byte aligned, cols a multiple of 32: the up stage's ag) from
//    the operand order (MoeOperandColumn) to the register-sourced GEMM's (MoeRsOperandColumn: the
//    16 words of every 32-column block as a 4 × 4 matrix transposed, StoreQdqBlock's rs_order),
//    in place.
absl::Status LaunchMoeToRsOperandOrder(uint16_t* rows, int64_t n_rows, int64_t cols,
                                       CUstream_st* stream);

// Stage 5: y[t] = bf16(Σ_{experts of t, ascending id} ye[slot] (+ shared_y[t])), fp32 from 0.
// The mHC site's hc_post fused into the combine (session 77): with `out` set the combine also
// writes, per token t and column d, the four new streams
//   out[t, j·D + d] = bf16(post[t, j]·y[t, d] + Σ_i comb[t, i, j]·residual[t, i·D + d])
// from the bf16 y it computes — kernels/mhc LaunchHcPost's operations (mhc_device::HcPostValue),
// so the same bits as the combine followed by LaunchHcPost on y. The site's hc_post launch is
// then not needed (the decode step's last kernel at 1 token: ~3 µs).
struct MoeHcPost {
  const float* post = nullptr;  // fp32 [m, 4], 16-byte aligned
  const float* comb = nullptr;  // fp32 [m, 4, 4] ([source i][destination j]), 16-byte aligned
  const uint16_t* residual = nullptr;  // bf16 [m, residual_stride]: the four input streams of D
  int64_t residual_stride = 0;         // >= 4·D, a multiple of 8; rows 16-byte aligned
  uint16_t* out = nullptr;             // bf16 [m, out_stride]; may equal residual (same stride),
  int64_t out_stride = 0;              // else must not overlap it; >= 4·D, a multiple of 8
};

struct MoeCombineParams {
  int64_t m = 0;
  int64_t top_k = 0;
  int64_t dim = 0;
  const int32_t* expert_ids = nullptr;  // [m, top_k]
  const int32_t* token_slot = nullptr;  // [m, top_k] (LaunchMoePermute's)
  const uint16_t* ye = nullptr;         // bf16 [m·top_k, D]
  const uint16_t* shared_y = nullptr;   // optional bf16 [m, D], 16-byte aligned rows
  int64_t shared_y_stride = 0;          // >= D, a multiple of 8 (when shared_y is set)
  uint16_t* y = nullptr;                // out bf16 [m, D], 16-byte aligned rows (optional
  int64_t y_stride = 0;                 // with hc_post); >= D, a multiple of 8
  MoeHcPost hc_post;                    // optional (hc_post.out null: none)
};
absl::Status Validate(const MoeCombineParams& p);
absl::Status LaunchMoeCombine(const MoeCombineParams& p, CUstream_st* stream);

// What one GEMM launch of a call looks like on the current device (for benches and tuning):
// the instantiation the launcher picks for (m, top_k, k_step) and its occupancy.
struct MoeCudaGemmPlan {
  bool stream = false;      // the streaming GEMM (tile_rows 8, 16 or 32)
  bool wgmma = false;       // a wgmma GEMM (tile_rows 128; the RS GEMM's also 32 .. 96)
  bool wgmma_rs = false;    // the register-sourced one (kWgmmaRs)
  bool ring = false;        // the TMA-ring streaming GEMM (kStreamRing)
  int64_t tile_rows = 0;    // slot rows per tile (MoeCudaTileRows)
  int64_t weight_rows = 0;  // weight rows per CTA (gate + up rows for the up projection)
  int64_t k_step = 0;       // K per pipeline stage: 128 or 256 (streaming: per unit)
  int64_t stages = 0;       // ring depth (streaming: register ring depth)
  int64_t smem_bytes = 0;   // dynamic shared memory per CTA
  int64_t grid_x = 0;       // N blocks (the TMA-ring and register-sourced GEMMs: persistent CTAs)
  int64_t grid_y = 0;       // tile slots (the upper bound of the tile count; those two GEMMs: 1)
  int64_t ctas_per_sm = 0;  // resident CTAs per SM (cudaOccupancy...)
  int64_t weight_stage_bytes = 0;  // FP4 codes + scales of one stage (unit) of one CTA
};
// Errors: InvalidArgumentError for invalid weights, m, top_k, k_step or gemm (kStream / kStream16
// with D or I above kMoeCudaStreamMaxK / kMoeCudaStream16MaxK). Queries the device's occupancy (a
// driver call; not for the hot path). ring_cut: the ring kernel's instantiation (each cut has its
// own). rs_tile_rows: MoeCudaParams::rs_tile_rows (the register-sourced GEMM's tiles; 0, 32, 48,
// 64, 80, 96 or 128, else InvalidArgumentError). rs_min_slots_per_expert: MoeCudaParams's (0 = the
// device's, MoeCudaRsMinSlotsPerExpert; negative: InvalidArgumentError).
absl::StatusOr<MoeCudaGemmPlan> MoeCudaDescribeGemm(const MoeCudaWeights& weights, int64_t m,
                                                    int64_t top_k, int64_t k_step, bool up,
                                                    MoeCudaGemm gemm = MoeCudaGemm::kAuto,
                                                    MoeCudaRingCut ring_cut = MoeCudaRingCut::kAuto,
                                                    int64_t rs_tile_rows = 0,
                                                    int64_t rs_min_slots_per_expert = 0);

// ---- The whole layer (routed experts + the shared expert) -------------------------------------

struct MoeCudaParams {
  const MoeCudaWeights* weights = nullptr;  // host struct of device pointers
  MoeOptions options;
  int64_t m = 0;                      // tokens; 0 is a no-op
  const float* logits = nullptr;      // fp32 [m, E] dense: x · gate^T (before / gate_temp)
  const uint16_t* x = nullptr;        // bf16 [m, D], 16-byte aligned rows
  int64_t x_stride = 0;               // >= D, a multiple of 8
  const uint8_t* is_image = nullptr;  // [m] or null; nonzero selects with gate_bias_vl
  // At most one of: the shared expert's weights (MoeCuda runs it on the GPU, swiglu_limit from
  // options; its D must be the experts'; the workspace must be sized with them), or its bf16
  // output computed by the caller. Neither: no shared expert.
  const MoeSharedExpertWeights* shared = nullptr;  // host struct of device weights
  const uint16_t* shared_y = nullptr;              // optional bf16 [m, D]
  int64_t shared_y_stride = 0;                     // >= D, a multiple of 8 (when shared_y is set)
  // Optional with shared_y: an event the caller records after the work that writes shared_y on
  // another stream (e.g. the shared expert forked right after the FFN norm, beside the gate and
  // the routing); only the combine waits for it. Null: shared_y is ready when MoeCuda is called.
  CUevent_st* shared_y_ready = nullptr;
  uint16_t* y = nullptr;  // out bf16 [m, D]; must not overlap the inputs (optional with
  int64_t y_stride = 0;   // hc_post); >= D, a multiple of 8
  // Optional: the mHC site's hc_post applied by the combine (MoeHcPost; its out, not y, is then
  // the layer's result when y is null), and an event the caller records after the work that
  // writes post / comb / residual on another stream (only the combine waits for it).
  MoeHcPost hc_post;
  CUevent_st* hc_post_ready = nullptr;
  int32_t* expert_ids = nullptr;    // optional out [m, top_k] (rank order)
  float* expert_weights = nullptr;  // optional out [m, top_k]
  void* workspace = nullptr;        // device, >= MoeCudaWorkspaceBytes(...), any alignment
  size_t workspace_bytes = 0;
  int64_t gemm_k_step = kMoeCudaKStepAuto;                     // both GEMMs' k_step (0, 128 or 256)
  bool gemm_hoisted_addresses = kMoeCudaGemmHoistedAddresses;  // both GEMMs' main-loop variant
  int gemm_stream_row_tiles = 0;  // both GEMMs' stream_row_tiles (0 automatic, 1, 2; A/B)
  MoeCudaPath route_path = MoeCudaPath::kAuto;  // LaunchMoeRoute's shape (output bits unchanged)
  MoeCudaPath sort_path = MoeCudaPath::kAuto;   // LaunchMoePermute's shape (output bits unchanged)
  MoeCudaGemm gemm = MoeCudaGemm::kAuto;        // the expert GEMM (MoeCudaChooseGemm)
  // The down projection's GEMM: kAuto (default) = `gemm`'s; kWgmmaRs = the register-sourced GEMM
  // whatever runs the up projection (session 55 experiment, bench_moe --down-gemm 4: at 768–1,024
  // tokens session 54 measured that GEMM faster on the down projection alone, where kAuto then ran
  // the 16-row streaming GEMM for both; since session 59 kAuto runs the RS GEMM for both from 512
  // tokens, so at E 384 top-6 this acts at 257–511 tokens or after a forced up GEMM). Where the up
  // GEMM is neither the RS GEMM nor the TMA ring MoeCudaChooseGemm picks up to MoeCudaRingMaxSlots
  // (MoeCudaDownRsAfterOtherUp), the tile list is regrouped into 128-row tiles and ag put in the RS
  // operand order between the stages (LaunchMoeRegroupTiles, LaunchMoeToRsOperandOrder); elsewhere
  // it changes nothing. The same bits on exact-arithmetic inputs (only the fp32 summation order
  // differs between GEMMs).
  MoeCudaGemm down_gemm = MoeCudaGemm::kAuto;
  // The register-sourced GEMM's tile rows where it runs both projections (MoeCudaRsTileRows):
  // 0 (default) = by the mean slot rows per expert, 32-row tiles and 8 ring stages at <= 20,
  // 64-row tiles and 6 stages at <= 40, 80-row tiles and 6 stages at <= 64 (since session 61),
  // 96-row tiles and 5 stages at <= 80 (since session 60), else 128-row tiles and 4 stages;
  // 32 / 48 / 64 / 80 / 96 = those tiles only where they apply (48: at <= 32, never kAuto's;
  // kMoeCudaRs48TileRows), else 128; 128 = always 128 (A/B; bench_moe --rs-tile-rows). Output bits
  // unchanged (the same per-row operations; a row's tile does not change its numerics).
  int64_t rs_tile_rows = 0;
  // kAuto's register-sourced GEMM threshold in slot rows per expert on average: 0 (default) = the
  // device's (MoeCudaRsMinSlotsPerExpert: 8 on the H200, 4 on the H100), > 0 = that many (A/B;
  // bench_moe --rs-min-slots). Only kAuto reads it; each GEMM is correct at every size.
  int64_t rs_min_slots_per_expert = 0;
  // false (default): the permute writes each token's QDQ row once ([m, D]) and the up GEMM reads
  // the slot rows through slot_token; true: top_k copies, one per slot row ([m·k, D]; the
  // round-3 gather, kept for A/B). Output bits unchanged (the same values reach the GEMM).
  bool gather_slot_rows = false;
  // With `shared`: true (default) = the shared expert runs on a helper stream forked from
  // `stream` (kernels/common/side_stream.h), concurrently with the routing, permutation and
  // expert GEMMs, and the combine waits for it; false = everything in order on `stream` (A/B).
  // The same kernels on the same data: output bits unchanged.
  bool shared_concurrent = true;
  // true (default): route + permute as one block (LaunchMoeRoutePermute) when MoeCudaFrontFits(m)
  // and route_path / sort_path are kAuto; false: the separate kernels (A/B).
  // Output bits unchanged.
  bool fused_front = true;
  // With the TMA-ring GEMM (kStreamRing): true (default) = the combine sums the down GEMM's
  // partials itself (no down epilogue launch); false = the down epilogue writes the expert
  // outputs and the combine reads them (A/B). Output bits unchanged.
  bool ring_fused_combine = true;
  // With the TMA-ring GEMM: how its calls cut their units (kAuto: by the slot count; A/B).
  MoeCudaRingCut ring_cut = MoeCudaRingCut::kAuto;
  // With the fused front and the TMA-ring GEMM: true = the front lets the up stage's CTAs be
  // scheduled at its start (they initialise their barriers and wait on their SMs while block 0
  // routes); false (default) = they are scheduled when the front ends (A/B, session 76).
  // Output bits unchanged.
  bool early_ring = false;
  // With the fused front: true (default) = each token's top-k by two warp reductions per pass
  // (the maximum key, then the lowest id holding it; a token with a NaN score falls back);
  // false = by the shuffle merge of session 19 (A/B, session 77). Output bits unchanged.
  bool route_redux = true;
  // With the fused front: true = the front is launched as a programmatic dependent of the
  // stream's previous kernel (kernels/common pdl.cuh; e.g. the gate, which signals at its start),
  // so its CTAs hold their SM slots before work forked beside it (the shared expert, the mHC
  // mixes) takes them, and wait for that kernel before reading logits or x; false (default) =
  // a plain launch (A/B, session 78). Output bits unchanged. The decode-layer bench turns it on
  // (H100, 1 token: the step's graph 205.4–206.0 -> 203.8–203.9 µs; 8 tokens level).
  bool front_programmatic = false;
  // Optional: called by MoeCuda with `stream` right after it has enqueued the up stage (and
  // before the down stage), also for m = 0 (before the joins), so that the caller can fork work
  // that should start once the up stage has run — e.g. its shared expert (with shared_y /
  // shared_y_ready) beside the down stage instead of beside the gate, the routing and the up
  // stage (session 83, bench_decoder_layer_step --shared-at 1; measured 21 µs slower at 1 token
  // in session 84: beside the down ring its stream does not overlap).
  // Whatever it forks must be joined by shared_y_ready / hc_post_ready or by the caller after
  // MoeCuda. In a graph capture an event recorded here adds no node: the down stage stays the up
  // stage's programmatic dependent.
  std::function<void(CUstream_st*)> after_up;
};

// Device workspace for up to `max_tokens` tokens: about max_tokens·top_k·(4·D + 2·I + 32) bytes
// (gathered rows and expert outputs share one region) + 8·E + MoeCudaSortScratchBytes(E) + the
// TMA-ring GEMM's partials (MoeCudaRingPartialBytes(min(max_tokens·top_k, MoeCudaRingMaxSlots(E)),
// max(2·I, D)): 2.2 MB at one token, 33.5 MB from 256 tokens at the released dims), plus
// alignment; with `shared` (the weights MoeCudaParams::shared will carry) also 2·max_tokens·D
// (its output) + MoeSharedExpertWorkspaceBytes. Monotone in max_tokens. Errors:
// InvalidArgumentError for invalid weights dims, top_k or max_tokens, invalid shared weights or a
// shared D other than D.
absl::StatusOr<size_t> MoeCudaWorkspaceBytes(const MoeCudaWeights& weights, int64_t max_tokens,
                                             int64_t top_k,
                                             const MoeSharedExpertWeights* shared = nullptr);

absl::Status Validate(const MoeCudaParams& p);

// y = routed MoE(x) (+ the shared expert) with the numerics above: five to eight kernels on
// `stream` (route, sort — one kernel, or three at large m — [quantise + gather], w1/w3 + SwiGLU,
// w2, combine; the shapes by route_path / sort_path), LaunchMoeSharedExpert's first
// when `shared` is given, and, when asked for, two device copies of the routing. Capturable in a
// CUDA graph (no host synchronisation, no allocation). Cost: the touched experts' weights are read
// about once per tile-row block of tokens; see README.md for the measured figures.
absl::Status MoeCuda(const MoeCudaParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
