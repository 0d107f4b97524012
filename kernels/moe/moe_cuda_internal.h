// Internals shared by the CUDA launchers (cuda/moe_launch.cu) and their host-side validation
// (moe_cuda_params.cc); not for other modules.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gemm/gemm_cuda.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_shared_cuda.h"

namespace flashserve::kernels::moe_cuda_internal {

// Byte offsets of MoeCuda's workspace regions from a 256-byte-aligned base.
struct MoeCudaLayout {
  size_t counts = 0;         // i32 [E]
  size_t sort_scratch = 0;   // i32 [kMoeCudaSortMaxBlocks, E] (the multi-block sort's counts)
  size_t offsets = 0;        // i32 [E + 1]
  size_t num_tiles = 0;      // i32 [1]
  size_t tiles = 0;          // i32 [2·S]
  size_t ids = 0;            // i32 [S]
  size_t weights = 0;        // f32 [S]
  size_t slot_token = 0;     // i32 [S]
  size_t slot_weight = 0;    // f32 [S]
  size_t token_slot = 0;     // i32 [S]
  size_t xg = 0;             // bf16 [S, D]; reused for ye [S, D] once the up stage has read it
  size_t ag = 0;             // bf16 [S, I]
  size_t ring_partials = 0;  // f32: MoeCudaRingPartialBytes(min(S, 4·E), max(2I, D))
  // With the GPU shared expert (shared_bytes > 0) only:
  size_t shared_y = 0;   // bf16 [max_tokens, D]: its output, added by the combine
  size_t shared_ws = 0;  // its workspace (MoeSharedExpertWorkspaceBytes), 256-byte aligned
  size_t total = 0;      // including 256 bytes of alignment slack
};

// The streaming GEMM's shared-memory layout of a tile's activation rows (cuda/moe_stream_gemm.cuh):
// 16-byte chunk c of slot row t is stored at chunk MoeStreamSwizzle(c, t) of its row (row pitch a
// multiple of 256 bytes). Only bits 0..2 change, from bits 3, 4 and the row parity, so it is a
// bijection inside every aligned group of 8 chunks; a quarter warp's reads (rows 2p, 2p + 1 × quad
// lanes 0..3 at chunks 16·kG·u + 4·kG·tig + j, j < 4·kG, kG = 1 or 2) hit 8 distinct bank quads
// (tested on the host).
constexpr uint32_t MoeStreamSwizzle(uint32_t c, uint32_t t) {
  return c ^ ((t & 1u) | (((c >> 2) ^ (c >> 3)) & 2u) | ((c >> 1) & 4u));
}

// The streaming GEMM's activation staging (cuda/moe_stream_gemm.cuh): 8- and 16-row tiles keep
// the whole K of their rows in shared memory (K <= kMoeCudaStreamMaxK / kMoeCudaStream16MaxK);
// 32-row tiles (n8 = 4) stage them a chunk of kc columns at a time, 32 rows × kc bf16 within
// kMoeStreamActBytes: the fewest chunks that fit, of equal size rounded up to whole units of
// unit_k (128 or 256) columns, so a chunk holds whole units and whole groups of 8 swizzled 16-byte
// chunks (two of 2,560 at D 5,120; one at I 2,304). The last chunk holds the remaining columns
// (tested on the host).
inline constexpr int64_t kMoeStreamActBytes = 160 * 1024;
constexpr int64_t MoeStreamChunkK(int64_t k, int n8, int unit_k) {
  if (n8 < 4) return k;
  const int64_t max_kc = kMoeStreamActBytes / (16 * n8) / unit_k * unit_k;
  const int64_t chunks = (k + max_kc - 1) / max_kc;
  return ((k + chunks - 1) / chunks + unit_k - 1) / unit_k * unit_k;
}

// The wgmma GEMM's shared-memory layout of a pair of stages of FP4 codes (cuda/moe_wgmma_gemm.cuh):
// 64 bytes per weight row, 16-byte chunk c (0..3) of row r at byte r·64 + 16·(c ^ (r & 2)). A
// bijection inside every row, and a quarter warp's decode reads (rows r0 .. r0 + 3, r0 % 4 == 0,
// chunks 2h and 2h + 1 of each) hit 8 distinct 16-byte bank groups (tested on the host).
constexpr uint32_t MoeWgmmaRawOffset(uint32_t r, uint32_t c) {
  return r * 64u + ((c ^ (r & 2u)) << 4);
}

// The register-sourced wgmma GEMM (cuda/moe_wgmma_rs_gemm.cuh), up projection: CTA-local weight
// row r (0 .. 255) of a stage is row n0 + column of w3 (`up`) or w1: w1's 128 columns, then
// w3's (session 55: two TMA boxes a stage). A consumer thread's slab rows lane/4 and lane/4 + 8
// read rows r and r + 128, the gate and up of one output column (tested on the host and by a
// static_assert in cuda/moe_wgmma_rs_stage.cuh).
struct MoeWgmmaRsUpRow {
  uint32_t column = 0;  // 0 .. 127, relative to the CTA's first output column
  bool up = false;      // w3 (else w1)
};
constexpr MoeWgmmaRsUpRow MoeWgmmaRsUpRowOf(uint32_t r) { return {r % 128, r >= 128}; }

// The same kernel's A fragments: in register a[i] (i < 4, the m16n8k16 A layout: a[0], a[1] hold
// k 2·tig + {0, 1} of rows lane/4 and lane/4 + 8, a[2], a[3] k 8 + 2·tig + {0, 1}) of k16 step s
// (0, 1) of a 32-wide block, quad lane tig puts in half e (0 low, 1 high) the weight of logical
// column MoeWgmmaRsFragmentColumn(s, i, tig, e): pair 2s + i/2 of DecodeFp4x8 of 32-bit code
// word tig of the block (each lane decodes one whole word). B (the activation rows) is stored in
// the RS operand order, so the physical k of that element, 16s + 8·(i/2) + 2·tig + e, holds
// logical column MoeRsOperandColumn^-1 of it; the host test checks
// MoeRsOperandColumn(MoeWgmmaRsFragmentColumn(...)) == that physical k.
constexpr uint32_t MoeWgmmaRsFragmentColumn(uint32_t s, uint32_t i, uint32_t tig, uint32_t e) {
  return 8 * tig + 2 * s + i / 2 + 4 * e;
}

// The register-sourced GEMM's tile widths (cuda/moe_wgmma_rs_stage.cuh): sets of
// narrow widths as bits (128 is in every set). A tile of `rows` slot rows (1 .. 128) runs the
// smallest width of its kernel's set that holds them, 128 otherwise.
inline constexpr uint32_t kMoeRsN16 = 8u, kMoeRsN32 = 1u, kMoeRsN64 = 2u, kMoeRsN96 = 4u;
inline constexpr uint32_t kMoeRsN48 = 16u, kMoeRsN80 = 32u;  // session 60's 48- / 80-row tiles
constexpr int MoeRsTileWidth(uint32_t widths, int rows) {
  if ((widths & kMoeRsN16) != 0 && rows <= 16) return 16;
  if ((widths & kMoeRsN32) != 0 && rows <= 32) return 32;
  if ((widths & kMoeRsN48) != 0 && rows <= 48) return 48;
  if ((widths & kMoeRsN64) != 0 && rows <= 64) return 64;
  if ((widths & kMoeRsN80) != 0 && rows <= 80) return 80;
  if ((widths & kMoeRsN96) != 0 && rows <= 96) return 96;
  return 128;
}
// The set a launch over `slots` slot rows of `experts` experts runs: the two narrow widths that
// bracket the mean rows per expert (20 at 1,280 tokens, 32 at 2,048, 64 at 4,096 for E 384
// top-6; binomial spread ~4–8 rows). Two, because with three narrow widths in one kernel ptxas
// serialised the wgmmas (C7512). The up GEMM (`up`) keeps {64, 128} above a mean of 20 rows:
// there its {32, 64} and {64, 96} kernels measured 12–18 % slower on the H200 than {64, 128}
// (session 54), while the down GEMM's sets gained 7–21 % (kernels/moe/wgmma_rs_gemm_sessions.md
// "Session 54").
constexpr uint32_t MoeRsWidthSetFor(int64_t slots, int64_t experts, bool up) {
  if (slots <= 20 * experts) return kMoeRsN16 | kMoeRsN32;
  if (up) return kMoeRsN64;
  if (slots <= 40 * experts) return kMoeRsN32 | kMoeRsN64;
  return kMoeRsN64 | kMoeRsN96;
}

// S = max_tokens · top_k. shared_bytes: MoeSharedExpertWorkspaceBytes for max_tokens, or 0
// when the shared expert is not run by MoeCuda.
MoeCudaLayout ComputeMoeCudaLayout(int64_t n_experts, int64_t dim, int64_t inter,
                                   int64_t max_tokens, int64_t top_k, size_t shared_bytes = 0);

// What LaunchMoeSharedExpert enqueues, every launch validated: the up GEMM(s) (up[0] = w13 or
// w1, up[1] = w3 when not fused; g in columns [0, Is) and u in [Is, 2·Is) of one [m, 2·Is]
// buffer either way), the SwiGLU, the down GEMM.
struct MoeSharedExpertPlan {
  LinearCudaParams up[2];
  int n_up = 0;
  MoeSharedSwiGluParams swiglu;
  LinearCudaParams down;
};
absl::Status PlanMoeSharedExpert(const MoeSharedExpertParams& p, MoeSharedExpertPlan* plan);

// LaunchMoeRoute's checks (MoeRouteCpu's, minus the host read of is_image, plus the GPU limits,
// plus a valid `path`).
absl::Status ValidateMoeRouteCuda(const MoeRouteParams& p, MoeCudaPath path = MoeCudaPath::kAuto);

// MoeSharedExpertWorkspaceBytes(*shared, max_tokens), 0 when shared is null; InvalidArgumentError
// (prefixed with op) for invalid shared weights or a D other than the experts' `dim`.
absl::StatusOr<size_t> SharedExpertBytes(const char* op, const MoeSharedExpertWeights* shared,
                                         int64_t dim, int64_t max_tokens);

// LaunchMoeFp4ToDeviceOrder's checks.
absl::Status ValidateMoeFp4Conversion(const uint8_t* codes, int64_t bytes);

// Validation of the whole-layer params without the workspace-size check (shared by Validate and
// MoeCuda, which also needs the layout).
absl::Status ValidateMoeCudaParamsCore(const MoeCudaParams& p);

}  // namespace flashserve::kernels::moe_cuda_internal
