// The hierarchical (two-level) indexer of DeepSeek-V4.1-Flash, model spec §4.5 steps 4–6, §4.6
// and §10 item 6. Three ops, run by an index-source layer in this order:
//   IndexerScore     score[i, t] = bf16(Σ_h bf16(w[i,h] · ReLU(bf16(q[i,h]·k[t]))))  (causal,
//                    optionally restricted to a published candidate mask)
//   CandidateBlocks  (candidate source layer only) the block-level candidate mask from the scores
//   IndexerTopk      the k best positions per row, ascending, −1 past the row's reach, + offset
// README.md gives the exact recipes, the tie rule and the test tolerances.
//
// Common contract:
// - bf16 tensors are uint16 bit patterns; row-major; every `*_stride` counts ELEMENTS between
//   consecutive rows (query tokens, or key rows for `k`).
// - Rows are query tokens i = 0..tokens−1 at absolute positions p = start_pos + i. Row i reaches
//   the compressed positions t < reach(i) = (start_pos + i + 1) / ratio (integer division; the
//   reference's compress_lens). Every row must satisfy reach(i) <= width, where `width` is the
//   score width (the reference uses width = end_pos / ratio, end_pos = start_pos + tokens). In
//   decode (one row) reach == width, so the causal rule is a no-op there, as in the reference.
// - tokens == 0 (and, for scoring and top-k, width == 0) is a no-op.
// - Errors: InvalidArgumentError naming the offending field, detected before anything is read or
//   written.
// - Ownership: the caller owns every buffer; nothing is allocated. Ops that select take a caller
//   workspace (size from the *WorkspaceBytes functions; 8-byte aligned). Outputs must not overlap
//   inputs.
// - Threading: `pool` may be null (single-threaded). Results do not depend on the pool size or
//   on the workspace size. Calls are thread-safe for disjoint outputs and workspaces.
// This header includes no CUDA header; CUstream_st* is cudaStream_t (nullptr: legacy stream).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

struct CUstream_st;

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels {

// Largest index_head_dim accepted (the scorer keeps a key tile of this depth on the stack).
inline constexpr int64_t kMaxIndexHeadDim = 512;

// Step 4: index scores. Positions t >= reach(i) get −inf; so do positions outside the candidate
// mask when one is given (candidate consumers, §4.5 step 5). Per visible (i, t):
//   qk_h   = bf16(Σ_d q[i,h,d]·k[t,d])        fp32 accumulation over d ascending, one rounding
//   v_h    = bf16(w[i,h] · max(qk_h, 0))
//   score  = bf16(Σ_h v_h)                     fp32 accumulation from +0 over h ascending
// q and k are the caller's FP4 quant-dequantised bf16 values; w = weights_proj(x)·2^-6 (tiny
// model 2^-4), bf16. Scores are never −0.
struct IndexerScoreParams {
  int64_t tokens = 0;
  int64_t heads = 0;            // index_n_heads (32; tiny 4), >= 1
  int64_t head_dim = 0;         // index_head_dim (128; tiny 64), 1..kMaxIndexHeadDim
  int64_t width = 0;            // score width Lc (positions 0..width−1 of k are read)
  int64_t start_pos = 0;        // absolute position of row 0, >= 0
  int64_t ratio = 1;            // compress ratio r, >= 1
  const uint16_t* q = nullptr;  // bf16 [tokens, heads, head_dim], heads contiguous
  int64_t q_stride = 0;         // >= heads * head_dim
  // The index keys, in exactly one of two forms:
  // - k: bf16 [>= width, head_dim] (the caller's FP4-QDQ'd key cache), rows k_stride elements
  //   apart (>= head_dim);
  // - k_rows: the 68-byte FP4 serving rows (docs/kv_layout.md "index K"; formats::EncodeIndexKRow:
  //   head_dim/2 bytes of E2M1 codes, even element in the low nibble, then head_dim/32 UE8M0
  //   scale bytes), rows k_row_stride BYTES apart (>= formats::IndexKRowBytes(head_dim));
  //   head_dim must be a multiple of 32. Each row counts as its decode (formats::DecodeIndexKRow),
  //   i.e. the same scores as k = the decoded rows.
  const uint16_t* k = nullptr;
  int64_t k_stride = 0;
  const uint8_t* k_rows = nullptr;
  int64_t k_row_stride = 0;
  const uint16_t* w = nullptr;  // bf16 [tokens, heads]
  int64_t w_stride = 0;         // >= heads
  // Optional candidate mask (nonzero = candidate) [tokens, width]; candidates_stride 0 applies
  // row 0 to every token (the decode mask [1, Lc]), otherwise >= width.
  const uint8_t* candidates = nullptr;
  int64_t candidates_stride = 0;
  uint16_t* scores = nullptr;  // bf16 [tokens, width] out
  int64_t scores_stride = 0;   // >= width
  // CUDA launcher only (the CPU body ignores these). The bits are the same on every path.
  // cuda_exact_only: always the exact CUDA-core scorer (A/B comparisons; disables the int8
  // k_rows scorer).
  bool cuda_exact_only = false;
  // cuda_i8_lean: the int8 scorer's lean kernel where it applies (k_rows without a candidate mask,
  // row groups and batched decode rows; session 61 experiment, for A/B): the common tiles inline on
  // fewer registers (more resident warps), the others marked and scored by a second (patch) launch.
  // The same bits and fallback count.
  bool cuda_i8_lean = false;
  // Optional device counter (tests / bench), not reset by the call: the warp tiles (of 32 keys,
  // per row group) the lean kernel left to its patch launch.
  unsigned long long* cuda_i8_deferred = nullptr;
  // Optional device counter (debug / bench), not reset by the call: the number of
  // (row, head, position) dot products the int8 k_rows scorer recomputed exactly on the CUDA cores
  // because its exactness condition failed ("fallbacks"). Other scorers leave it untouched.
  unsigned long long* cuda_rechecks = nullptr;
};

// Step 5 (candidate source layer): per row, block scores b[j] = max of the scores at positions
// 8j..8j+7 (padding past `width` counts as −inf); the block holding the row's newest reachable
// position, (reach(i) − 1) / block_size, is forced to +inf; the min(topk_blocks, n_blocks) best
// blocks are picked (ties: the lower block index wins); a picked block is kept iff b[j] > −inf;
// kept blocks mark their positions, cropped to `width`, with 1, all others 0. n_blocks =
// ceil(width / block_size). Every row must reach at least one position (reach(i) >= 1).
struct CandidateBlocksParams {
  int64_t tokens = 0;
  int64_t width = 0;                 // score width Lc, >= 1
  int64_t start_pos = 0;             // as IndexerScoreParams
  int64_t ratio = 1;                 // as IndexerScoreParams (1 at the candidate source)
  int64_t block_size = 8;            // candidate_block_size, >= 1
  int64_t topk_blocks = 0;           // candidate_topk_blocks (2048; tiny 4), >= 1
  const uint16_t* scores = nullptr;  // bf16 [tokens, width]: this layer's causal, UNMASKED scores
  int64_t scores_stride = 0;         // >= width
  uint8_t* candidates = nullptr;     // [tokens, width] out, 1 = candidate position
  int64_t candidates_stride = 0;     // >= width
  uint16_t* block_scores = nullptr;  // optional bf16 [tokens, n_blocks] out (pinned = +inf)
  int64_t block_scores_stride = 0;   // >= n_blocks when block_scores is set
  void* workspace = nullptr;         // >= CandidateBlocksWorkspaceBytes(width, block_size, 1)
                                     // (GPU: CandidateBlocksCudaWorkspaceBytes, may be 0)
  size_t workspace_bytes = 0;
};

// Step 6: k = min(index_topk, width) for every row. Per row: the k largest scores (value order;
// −0 == +0), ties at the k-th value going to the LOWEST positions (the golden run's torch.topk
// choice on every fixture row; the reference leaves it implementation-defined); the chosen
// positions sorted ascending; positions >= reach(i) replaced by −1 (they sort last); the others
// plus `offset`. NaN scores are not expected (their order is unspecified).
struct IndexerTopkParams {
  int64_t tokens = 0;
  int64_t width = 0;                 // score width Lc
  int64_t start_pos = 0;             // as IndexerScoreParams
  int64_t ratio = 1;                 // as IndexerScoreParams
  int64_t index_topk = 0;            // config index_topk (512; tiny 16), >= 1
  int64_t offset = 0;                // window rows: tokens of the call in prefill, window_size
                                     // in decode; >= 0, offset + width <= INT32_MAX
  const uint16_t* scores = nullptr;  // bf16 [tokens, width]
  int64_t scores_stride = 0;         // >= width
  int32_t* indices = nullptr;        // int32 [tokens, k] out
  int64_t indices_stride = 0;        // >= k
  void* workspace = nullptr;         // >= IndexerTopkWorkspaceBytes(width, 1)
                                     // (GPU: IndexerTopkCudaWorkspaceBytes, may be 0)
  size_t workspace_bytes = 0;
};

// ---- Batched decode: one query row per sequence, each with its own key set and length ----
// Row b (b = 0..batch−1) is one decode token of sequence b. Its keys are `widths[b]` FP4 serving
// rows of one pool: key t is pool row k_row_offsets[b] + t. It sees the positions t < reach_b
// (reaches[b], or widths[b] when `reaches` is null); the scores row is [max_width] wide and only
// its first widths[b] entries are written (positions in [reach_b, widths[b]) get −inf, entries
// past widths[b] are left untouched). Row b's output equals IndexerScore over that row alone
// (tokens 1, width = widths[b], start_pos = reach_b − 1, ratio 1, k_rows = the row's keys,
// candidates = its mask row) bit for bit.
// Per-row arrays (k_row_offsets, widths, reaches) are host memory for the CPU body and device
// memory for the CUDA launcher; their values are the caller's contract: 0 <= reaches[b] <=
// widths[b] <= max_width and k_row_offsets[b] >= 0 with the row's keys inside the pool. The CPU
// body checks them (InvalidArgumentError naming the row); the GPU cannot without a sync, so it
// clamps widths to [0, max_width] and reaches to [0, width] and trusts the offsets.
struct IndexerScoreBatchParams {
  int64_t batch = 0;                       // query rows (sequences), >= 0
  int64_t heads = 0;                       // as IndexerScoreParams
  int64_t head_dim = 0;                    // as IndexerScoreParams; a multiple of 32
  int64_t max_width = 0;                   // scores row extent, >= every widths[b]
  const uint16_t* q = nullptr;             // bf16 [batch, heads, head_dim]
  int64_t q_stride = 0;                    // >= heads * head_dim
  const uint16_t* w = nullptr;             // bf16 [batch, heads]
  int64_t w_stride = 0;                    // >= heads
  const uint8_t* k_rows = nullptr;         // the pool of 68-byte FP4 rows (IndexerScoreParams)
  int64_t k_row_stride = 0;                // BYTES, >= formats::IndexKRowBytes(head_dim)
  const int64_t* k_row_offsets = nullptr;  // [batch]: pool row of row b's key 0
  const int32_t* widths = nullptr;         // [batch]: row b's key count (its score width)
  const int32_t* reaches = nullptr;        // optional [batch]: row b's causal limit
  // Optional candidate masks (nonzero = candidate) [batch, max_width]; stride >= max_width.
  const uint8_t* candidates = nullptr;
  int64_t candidates_stride = 0;
  uint16_t* scores = nullptr;                      // bf16 [batch, max_width] out
  int64_t scores_stride = 0;                       // >= max_width
  bool cuda_exact_only = false;                    // as IndexerScoreParams
  unsigned long long* cuda_rechecks = nullptr;     // as IndexerScoreParams
  bool cuda_i8_lean = false;                       // as IndexerScoreParams
  unsigned long long* cuda_i8_deferred = nullptr;  // as IndexerScoreParams
};

// Top-k of a batch of decode rows of different lengths: row b ranks its first widths[b] scores
// exactly as IndexerTopk over that row alone (tokens 1, width = widths[b], k_b =
// min(index_topk, widths[b]), positions >= reach_b → −1, the others + offset), writes its k_b
// indices ascending and then −1 into slots k_b .. K − 1, K = IndexerTopkK(index_topk,
// max_width) (a fixed-width [batch, K] index list). Per-row arrays and their contract as
// IndexerScoreBatchParams (a row of width 0 gets K × −1).
struct IndexerTopkBatchParams {
  int64_t batch = 0;
  int64_t max_width = 0;             // scores row extent, >= every widths[b]
  int64_t index_topk = 0;            // >= 1
  int64_t offset = 0;                // >= 0, offset + max_width <= INT32_MAX
  const int32_t* widths = nullptr;   // [batch]
  const int32_t* reaches = nullptr;  // optional [batch] (null: widths)
  const uint16_t* scores = nullptr;  // bf16 [batch, max_width]
  int64_t scores_stride = 0;         // >= max_width
  int32_t* indices = nullptr;        // int32 [batch, K] out
  int64_t indices_stride = 0;        // >= K
  void* workspace = nullptr;         // CPU: >= IndexerTopkWorkspaceBytes(max_width, 1);
                                     // GPU: IndexerTopkCudaWorkspaceBytes(batch, max_width)
  size_t workspace_bytes = 0;
};

// k of the top-k: min(index_topk, width) (0 when either is <= 0). Pure.
int64_t IndexerTopkK(int64_t index_topk, int64_t width);

// Blocks per row for CandidateBlocks: ceil(width / block_size) (0 for width <= 0 or
// block_size <= 0). Pure.
int64_t CandidateBlockCount(int64_t width, int64_t block_size);

// Workspace for `slots` rows selected concurrently. A call uses at most
// min(workspace_bytes / per-slot bytes, tokens, pool threads + 1) slots, so passing
// slots = pool->size() + 1 gives full parallelism; slots = 1 still works (serially). Per slot:
// 8·width bytes for the top-k, 8·n_blocks for the candidate blocks. Pure.
size_t IndexerTopkWorkspaceBytes(int64_t width, int64_t slots);
size_t CandidateBlocksWorkspaceBytes(int64_t width, int64_t block_size, int64_t slots);

// GPU workspace of LaunchIndexerTopk / LaunchCandidateBlocks for a call of `tokens` rows (the
// CPU sizes above do not apply there). 0 when every row is short enough for the one-block kernel
// (width <= 16384 positions for the top-k, <= 4096 blocks for the candidates); otherwise
// 4·tokens·(512 + 2·c) bytes, c = ceil(width / 2048) for the top-k and ceil(n_blocks / 512)
// for the candidates (about 2 KiB + 4 B per 1,000 positions per row). It grows with tokens and
// width: size it once for the largest call (more is fine). Pure.
size_t IndexerTopkCudaWorkspaceBytes(int64_t tokens, int64_t width);
size_t CandidateBlocksCudaWorkspaceBytes(int64_t tokens, int64_t width, int64_t block_size);

// Validation shared by every backend (what the launchers check first). Cost O(1).
absl::Status Validate(const IndexerScoreParams& p);
absl::Status Validate(const CandidateBlocksParams& p);
absl::Status Validate(const IndexerTopkParams& p);
// The batched ops check the scalar fields and pointers only (not the per-row arrays' values).
absl::Status Validate(const IndexerScoreBatchParams& p);
absl::Status Validate(const IndexerTopkBatchParams& p);

// ---- CPU bodies (cpu/*.cc; target fs_kernels_indexer). ----
// Scores. Work is split over (row, 2048-position chunk) pairs, so one decode row with a long
// history still spreads over the pool. Cost: visible positions · heads · head_dim multiply-adds;
// positions outside the candidate mask or the reach cost one store.
absl::Status IndexerScoreCpu(const IndexerScoreParams& p, ThreadPool* pool);
// Candidate mask, split over rows. Cost per row O(width) (max pass, nth_element, mask write).
absl::Status CandidateBlocksCpu(const CandidateBlocksParams& p, ThreadPool* pool);
// Top-k, split over rows. Cost per row O(width) for the selection plus O(k log k) for the sort.
absl::Status IndexerTopkCpu(const IndexerTopkParams& p, ThreadPool* pool);
// Batched decode rows (host per-row arrays, checked: InvalidArgumentError naming the row): the
// single-row bodies above, row after row (each spreads over the pool).
absl::Status IndexerScoreBatchCpu(const IndexerScoreBatchParams& p, ThreadPool* pool);
absl::Status IndexerTopkBatchCpu(const IndexerTopkBatchParams& p, ThreadPool* pool);

// ---- CUDA launchers (cuda/*.cu; target fs_kernels_indexer_cuda, FLASHSERVE_CUDA only) ----
// Same params as the CPU bodies; every tensor pointer (q, k, w, candidates, scores, indices,
// block_scores) is a device pointer (or managed memory). The launchers validate first (the same
// checks and messages as the CPU bodies, except that the selections' `workspace` is the GPU's:
// see *CudaWorkspaceBytes; device memory, 8-byte aligned, not shared with a concurrent call),
// then enqueue their work on `stream` and return; buffers must stay valid until the stream
// passes it. Nothing is allocated and nothing waits on the host, so the calls can be captured in
// a CUDA graph. CUDA launch failures abort (CUDA_CHECK). Results equal the CPU bodies' bit for
// bit (README.md "CUDA").
// Scores (README.md "CUDA" has the table of which scorer runs):
// - k_rows at the released dims (32 heads × 128, 4-byte aligned rows; unless cuda_exact_only):
//   the int8 tensor-core scorer — mma.sync s8·s8 → s32 per 32-block of d on the E2M1 codes and
//   q's integer mantissas, blocks combined with exponent shifts in exact integer arithmetic, the
//   result taken only where a checked condition proves the CPU's sequential fp32 sum is exact
//   (every product and partial sum an integer multiple of 2^Eref below 2^(Eref + 24)); other
//   (row, head, key) triples are recomputed in the CPU's order ("fallbacks", counted in
//   cuda_rechecks). Keys read at 68 B per position, once per 8 rows.
// - Otherwise (every bf16 k call): a 128-position key tile (k_rows decoded while staging) is
//   staged in shared memory once per CTA and scored for up to 8 rows of the call; each head's
//   dot product is the CPU's fp32 mul + add over d ascending, done as one FMA per step wherever
//   every product of the (row, key) pair is exact in fp32 (checked from the exponent ranges; then
//   FMA and mul + add round identically), heads summed ascending. bf16 k with head_dim % 8 != 0
//   or key rows not 16-byte aligned: a thread per (row, position), mul + add.
// Cost: keys read once per 8 rows; visible positions · heads · head_dim multiply-adds (tensor
// cores, or CUDA-core FMAs on the exact path).
absl::Status LaunchIndexerScore(const IndexerScoreParams& p, CUstream_st* stream);
// Top-k: an exact two-pass radix select on the 16-bit order key of the bf16 scores (the k-th
// value), then one ordered pass that takes every larger value plus the lowest positions of the
// k-th value, writing them already ascending. Rows up to 16384 positions: a block per row, one
// kernel, no workspace. Longer rows: split over CTAs of 2048 or 4096 positions (2048 where the
// launch then has <= 256 CTAs), four passes — high-byte histogram, low-byte histogram, per-CTA
// counts, ordered write — in one cooperative launch where the grid is resident, else a memset
// and four kernels; workspace IndexerTopkCudaWorkspaceBytes(tokens, width). Cost per row: four
// reads of the row's scores (L2-resident after the first), one write of k indices.
absl::Status LaunchIndexerTopk(const IndexerTopkParams& p, CUstream_st* stream);
// Candidate blocks: the same selection over the block maxima (recomputed in each pass), then the
// mask (and block_scores) written; split over CTAs of 512 or 1024 blocks beyond 4096 per row
// (workspace CandidateBlocksCudaWorkspaceBytes(tokens, width, block_size)). Cost per row: four
// reads of the row's scores, one mask write.
absl::Status LaunchCandidateBlocks(const CandidateBlocksParams& p, CUstream_st* stream);
// Batched decode rows (device per-row arrays; README.md "CUDA", "Batched decode"): one launch
// scores every row, a grid of (key-tile CTAs, rows) sized to one wave of resident CTAs; each CTA
// prepares its row's q once and walks that row's key tiles (its own pool offset, width and
// reach), so B short rows fill the GPU as one long row does. The int8 scorer (released dims,
// 4-byte aligned rows, not cuda_exact_only) or else the exact tiled scorer, with the same bits
// and the same fallbacks as per-row LaunchIndexerScore calls. Cost: Σ_b widths[b] · 68 B of keys
// read once; no workspace.
absl::Status LaunchIndexerScoreBatch(const IndexerScoreBatchParams& p, CUstream_st* stream);
// The top-k of every row in one selection (the one-block kernel up to 16,384 positions of
// max_width, else the split selection planned for max_width: CTAs past a row's width do nothing),
// workspace IndexerTopkCudaWorkspaceBytes(batch, max_width). Results equal per-row
// LaunchIndexerTopk calls (plus the −1 padding).
absl::Status LaunchIndexerTopkBatch(const IndexerTopkBatchParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
