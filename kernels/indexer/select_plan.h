// How the CUDA selections (LaunchIndexerTopk, LaunchCandidateBlocks) split a row over CTAs, and
// the GPU workspace that split needs. Pure host code (no CUDA), shared by the launchers and the
// host tests; README.md "CUDA" describes the kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flashserve::kernels::indexer_plan {

// Threads of a split-selection CTA.
inline constexpr int64_t kSplitThreads = 256;
// Consecutive items a thread handles per tile: 8 positions (one 16-byte load of bf16 scores) for
// the top-k, 2 blocks for the candidate blocks (each block of 8 is itself a 16-byte load).
inline constexpr int64_t kTopkItemsPerThread = 8;
inline constexpr int64_t kCandidateItemsPerThread = 2;
// Tiles (kSplitThreads × items per thread) per CTA: one where the whole launch then has at most
// kOneTileMaxCtas CTAs (every CTA resident at the fused kernel's 2 per SM on an H200's 132 SMs,
// twice the CTAs of two tiles, each with half the latency chain per pass), else kTilesPerCta.
// Measured on an H200 (bench_indexer): candidate blocks over 2^20 positions 26.5 -> 22.9 us (128
// -> 256 CTAs), batched top-512 over 8 x 65,536 21.1 -> 17.9; one tile where the CTAs no longer
// fit (top-512 over 2^20: 512 CTAs; 8 rows; 64 x 65,536) was 7-15 % slower.
inline constexpr int64_t kTilesPerCta = 2;
inline constexpr int64_t kOneTileMaxCtas = 256;
// Rows with more items than this run split over several CTAs; shorter rows keep the one-block
// kernel (a block per row), which needs no workspace and has one launch instead of four.
inline constexpr int64_t kTopkSplitMinItems = 16384;
inline constexpr int64_t kCandidateSplitMinItems = 4096;
// Bins per row in the workspace: 256 for the high byte of the order key, 256 for the low byte.
inline constexpr int64_t kHistWords = 512;

// The split of one call. Workspace layout (uint32 words, 8-byte aligned base):
//   hist   [tokens][512]          zeroed by the launcher (cudaMemsetAsync) before pass 1
//   counts [tokens][ctas_per_row][2]  per CTA: (# keys > K, # keys == K) in its chunk
// workspace_bytes always counts the one-tile CTAs of a row, so the size grows with tokens and
// items and a workspace sized for the largest call holds every smaller one.
struct SelectSplitPlan {
  int64_t items = 0;         // items per row: positions (top-k) or blocks (candidates)
  int64_t chunk = 0;         // items per CTA (one or kTilesPerCta tiles)
  int64_t ctas_per_row = 0;  // 0: the one-block kernel (no split, no workspace)
  size_t hist_bytes = 0;     // bytes zeroed before pass 1 (the hist region)
  size_t workspace_bytes = 0;

  bool split() const { return ctas_per_row > 0; }
};

// items <= 0 or tokens <= 0 gives the empty plan (no split, 0 bytes).
SelectSplitPlan PlanSelectSplit(int64_t tokens, int64_t items, int64_t items_per_thread,
                                int64_t split_min_items);
SelectSplitPlan PlanTopkSplit(int64_t tokens, int64_t width);
SelectSplitPlan PlanCandidateSplit(int64_t tokens, int64_t width, int64_t block_size);

}  // namespace flashserve::kernels::indexer_plan
