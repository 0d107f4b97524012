// Which CUDA body LaunchSparseAttn runs, and a process-wide override for tests and the bench (A/B
// of the paths on the same inputs). Internal to this folder; no CUDA header.
#pragma once

#include "kernels/attention/attention.h"

namespace flashserve::kernels::attention_internal {

enum class SparseAttnCudaPath {
  kAuto,     // the launcher's choice (README.md "CUDA")
  kScalar,   // ScalarKernel: any valid params
  kMmaSync,  // TensorKernel: head_dim 128 / 256 / 512, 16-byte aligned rows, strides % 8 == 0
  kWgmma,    // WgmmaKernel: head_dim 512 and the mma.sync path's alignment
  // WgmmaKernel's split-K S variant (README.md "wgmma path"): same fit as kWgmma; never the
  // default, selectable for A/B (tests, bench).
  kWgmmaSplitK,
  // WgmmaWsKernel (README.md "wgmma-ws"): the wgmma path's math with a producer warpgroup
  // gathering into an mbarrier ring; same fit as kWgmma. The default at the released dims when
  // SparseAttnWsPays (below).
  kWgmmaWs,
};

// How the wgmma-family launchers cut a launch (MakeGeometry in sparse_attn_launch.cu): units of
// (token, group of heads_per_cta heads, split), each split a range of blocks_per_split list blocks
// of kSparseAttnBlock entries. Fewer than kSparseAttnCudaSplitCtas (token, group) items split the
// list so that about kSparseAttnCudaSplitCtas units run (items · splits <= kSparseAttnCudaSplitCtas
// keeps the split states in the workspace). Defined for any input, validated or not (0 tokens or
// heads: one split; width 0: zero blocks).
struct SparseAttnCudaCut {
  int64_t groups = 0;
  int64_t splits = 1;
  int64_t blocks_per_split = 0;
};
constexpr SparseAttnCudaCut SparseAttnCudaCutFor(int64_t tokens, int64_t heads, int64_t width,
                                                 int64_t heads_per_cta) {
  SparseAttnCudaCut cut;
  cut.groups = heads > 0 ? (heads + heads_per_cta - 1) / heads_per_cta : 0;
  const int64_t items = tokens > 0 ? tokens * cut.groups : 0;
  const int64_t n_blocks = width > 0 ? (width + kSparseAttnBlock - 1) / kSparseAttnBlock : 0;
  int64_t splits = 1;
  if (items > 0 && items < kSparseAttnCudaSplitCtas) {
    splits = kSparseAttnCudaSplitCtas / items;
    splits = splits < n_blocks ? splits : n_blocks;
    splits = splits > 1 ? splits : 1;
  }
  cut.blocks_per_split = splits > 1 ? (n_blocks + splits - 1) / splits : n_blocks;
  cut.splits = splits > 1 ? (n_blocks + cut.blocks_per_split - 1) / cut.blocks_per_split : 1;
  return cut;
}

// The wgmma path's heads per CTA (WgmmaShape::kHeads; the launcher static_asserts the two agree).
inline constexpr int64_t kSparseAttnWgmmaHeads = 64;

// Whether the default (kAuto) takes kWgmmaWs instead of kWgmma for the bf16 form: when a unit has
// at least kSparseAttnWsMinBlocks list blocks. The producer's ring overlaps a block's gather with
// the previous block's compute; with 1-block units (one unit per CTA at these sizes) it pays the
// producer hand-off for nothing. Measured on the H200 (README.md "wgmma-ws", released dims, width
// 640 = 10 blocks; graph µs, wgmma vs wgmma-ws): session 27 (persistent CTAs) 1 token 12.96 vs
// 13.82, 8 tokens 15.16 vs 15.89 (1-block units lose); session 29 (whole-block S on alternating
// warpgroups) 1 token 12.97 vs 13.13, 8 tokens 15.18 vs 15.27, 16 tokens (2-block units) 18.21 vs
// 17.22, 24 tokens 20.39 vs 19.40, 32 tokens (3 blocks) 22.64 vs 20.68. So from 2 blocks: 13
// tokens and up at width 640.
inline constexpr int64_t kSparseAttnWsMinBlocks = 2;
constexpr bool SparseAttnWsPays(int64_t tokens, int64_t heads, int64_t width) {
  return SparseAttnCudaCutFor(tokens, heads, width, kSparseAttnWgmmaHeads).blocks_per_split >=
         kSparseAttnWsMinBlocks;
}

// The wgmma family's split combine (README.md "Split states of the wgmma family"): from
// kSparseAttnCombineSharedMinSplits splits the form that computes each (head, split) weight once in
// shared memory (WgmmaCombineKernel<kD, true>, 116 registers), below it the per-thread form (42
// registers; its grid reaches 1,024 CTAs at 64 tokens, where the shared form's registers cost
// occupancy). At the released width (10 blocks) 1–12 tokens take the shared form (10 splits,
// <= 192 combine CTAs), 13 and up the per-thread one (<= 5 splits).
inline constexpr int64_t kSparseAttnCombineSharedMinSplits = 6;
constexpr bool SparseAttnCombineShared(int64_t splits) {
  return splits >= kSparseAttnCombineSharedMinSplits;
}

const char* SparseAttnCudaPathName(SparseAttnCudaPath path);

// Makes later LaunchSparseAttn calls prefer `path` (kAuto restores the default). A preferred path
// that does not fit the params falls back: kWgmma / kWgmmaSplitK / kWgmmaWs → kMmaSync → kScalar.
// Not synchronised with launches in flight on other threads: set it between launches (tests,
// benches).
void SetSparseAttnCudaPathOverride(SparseAttnCudaPath path);

// The path LaunchSparseAttn takes for `p` under the current override (p need not be validated).
// Default: for head_dim 512 with heads a multiple of 64, kWgmmaWs when SparseAttnWsPays, else
// kWgmma; kMmaSync for the other tensor shapes, kScalar for the rest. The row form (kv_rows) is
// kWgmma unless the override is kWgmmaWs (the opt-in warp-specialised row kernel); other
// overrides are ignored for it. A row form that decodes once (SparseAttnDecodesOnce) takes the
// wgmma family on its decoded bf16 pool: wgmma-ws where SparseAttnWsPays, else wgmma, or the
// wgmma / wgmma-ws override (others are ignored, so that the bits stay the row kernel's).
SparseAttnCudaPath SparseAttnCudaPathFor(const SparseAttnParams& p);

// The decode-once variant of the row form (attention.h SparseAttnKvRows::decoded): kAuto follows
// SparseAttnDecodeOncePays, kOff never decodes once, kOn always where the scratch is set (tests
// and benches: both variants on the same params). Not synchronised with launches in flight.
enum class SparseAttnDecodeOnce { kAuto, kOff, kOn };
void SetSparseAttnDecodeOnceOverride(SparseAttnDecodeOnce mode);

// The wgmma family's combine form. kAuto: the combine kernel in the form SparseAttnCombineShared
// picks. kShared / kPerThread: the combine kernel in that form at any split count. kCluster
// (session 85; opt-in, measured slower): the row kernel merges a split list's states inside
// thread-block clusters of `splits` CTAs (sparse_attn_wgmma_cluster.cuh: no combine launch)
// where 2–16 splits and the device runs such a cluster, else as kAuto. All forms run the same
// operations in the same order and give the same bits (tests). Not synchronised with launches in
// flight.
enum class SparseAttnCombineForm { kAuto, kShared, kPerThread, kCluster };
void SetSparseAttnCombineFormOverride(SparseAttnCombineForm form);

// Whether LaunchSparseAttn(p) would run the row kernel with the cluster merge (under the
// overrides): the row form, not decoded once, on its wgmma body, kCluster, 2–16 splits and a
// device that runs such a cluster (asked of the driver on first use).
bool SparseAttnMergesInCluster(const SparseAttnParams& p);

// Whether LaunchSparseAttn decodes p's rows once into kv_rows.decoded (under the override): the
// row form with the scratch set, params the row form fits, heads a multiple of 64 (whole wgmma
// head groups, as the row kernel runs them), pools quant's GPU decoder takes in one launch each,
// and the rule or the override says so.
bool SparseAttnDecodesOnce(const SparseAttnParams& p);

}  // namespace flashserve::kernels::attention_internal
