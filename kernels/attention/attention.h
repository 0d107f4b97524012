// Sparse attention of DeepSeek-V4.1-Flash (the reference's `sparse_attn` kernel): one softmax per
// (token, head) over a list of rows of a shared K = V latent pool, plus the per-head attention
// sink. Model spec §4.3 steps 2–5, numerics §10 items 5 and 7; README.md gives the exact recipe,
// the reading of the rescale order and the test tolerances. The index lists come from
// window_indices.h.
//
// Contract:
// - bf16 tensors are uint16 bit patterns; fp32 tensors are float; strides count elements.
// - The caller has already RoPE'd the KV rows (and q, unless rope_q) and quant-dequantised the rows
// (bf16 `kv`) or
//   passes them in their serving formats (`kv_rows`, decoded exactly here); q is never quantised.
//   With `rope` set the kernel applies q's RoPE and / or the output's inverse RoPE (spec §4.3
//   step 5) itself (the same bits as kernels/norm_rope RopeCpu before / after it); else they are
//   the caller's.
// - Errors: InvalidArgumentError naming the offending field, detected before anything is written.
// - Ownership: the caller owns every buffer, the workspace included; nothing is allocated (the
//   pool's task queue aside).
// - Threading: `pool` may be null (single-threaded). Work is split over (token, group of 8
//   heads); results do not depend on the pool size. Concurrent calls are safe with distinct
//   outputs and workspaces. Must not be called from inside a task of `pool`.
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

class RopeTable;  // kernels/norm_rope/rope_table.h

// The online softmax walks each index list in blocks of this many entries (K41:328 `block`).
inline constexpr int64_t kSparseAttnBlock = 64;
// Heads that one work item handles together (they share the gathered KV block).
inline constexpr int64_t kSparseAttnHeadGroup = 8;
// Largest head_dim accepted (512 in the released model, 128 in the tiny fixture).
inline constexpr int64_t kSparseAttnMaxHeadDim = 4096;

// The KV rows in their serving formats (docs/kv_layout.md; kernels/quant/quant.h KvRowKind), an
// alternative to the bf16 pool that needs no separate decode pass over the cache. List entry
// i < n_window reads window row i (kSwaKv: head_dim E4M3 codes, then head_dim/32 UE8M0 scales;
// 528 B at 512); entry i >= n_window reads compressed row i − n_window (kMainKv: head_dim/2 bytes
// of E2M1 codes, even element in the low nibble, then head_dim/16 E4M3 scales; 288 B at 512):
// the model's concat(window, compressed + n_window) lists. Rows are decoded exactly (quant
// DecodeRows) to bf16 first, so results are those of the bf16 pool holding the decoded window
// rows followed by the decoded compressed rows (n_kv = n_window + n_compressed).
struct SparseAttnKvRows {
  const uint8_t* window = nullptr;      // kSwaKv rows, row i at window + i * window_stride
  int64_t n_window = 0;                 // >= 0
  int64_t window_stride = 0;            // bytes, >= head_dim + head_dim/32
  const uint8_t* compressed = nullptr;  // kMainKv rows, row j at compressed + j * ..._stride
  int64_t n_compressed = 0;             // >= 0
  int64_t compressed_stride = 0;        // bytes, >= head_dim/2 + head_dim/16
  // Optional, CUDA only (SparseAttnCpu ignores it): bf16 scratch for the decode-once variant,
  // room for [n_window + n_compressed][head_dim] (decoded_bytes >= SparseAttnDecodedBytes),
  // 16-byte aligned, overlapping no other buffer. Where the lists read each row often enough
  // (SparseAttnDecodeOncePays: prefill chunks of one sequence, whose tokens share its rows), the
  // launcher decodes every row into it once (quant LaunchDecodeRows: the window rows, then the
  // compressed rows after them, i.e. the bf16 pool the indices address) and attends over that
  // pool, instead of decoding each gathered row again for every (token, head group). Same output
  // bits: the row kernels decode exactly as DecodeRows does, and the bf16 bodies agree bit for
  // bit (README.md "Decode once"). Its contents are scratch: undefined after the call; like the
  // workspace, it must not be used by another launch that may run concurrently.
  uint16_t* decoded = nullptr;
  size_t decoded_bytes = 0;
};

// Bytes of SparseAttnKvRows::decoded for pools of n_window + n_compressed rows of head_dim.
constexpr size_t SparseAttnDecodedBytes(int64_t n_window, int64_t n_compressed, int64_t head_dim) {
  return static_cast<size_t>(n_window + n_compressed) * static_cast<size_t>(head_dim) * 2;
}

// When the CUDA launcher decodes once (SparseAttnKvRows::decoded set): from
// kSparseAttnDecodeOnceMinTokens tokens (below, the two decode launches cost more than the
// per-reference decode they save), where the lists' entries (tokens · width) are at least
// kSparseAttnDecodeOnceRefsPerRow times the rows decoded (every row is decoded, referenced or
// not). A decode batch, each token another sequence with its own 128 window rows, reads its rows
// at most width / 128 = 5 times each on average, so it never qualifies (its window rows are read
// once each: decoding them first only adds a write and a read); a prefill chunk of one sequence
// over a pool up to 1/8 of its list entries does (README.md "Decode once").
inline constexpr int64_t kSparseAttnDecodeOnceMinTokens = 64;
inline constexpr int64_t kSparseAttnDecodeOnceRefsPerRow = 8;
constexpr bool SparseAttnDecodeOncePays(int64_t tokens, int64_t width, int64_t rows) {
  return tokens >= kSparseAttnDecodeOnceMinTokens &&
         static_cast<double>(tokens) * static_cast<double>(width) >=
             static_cast<double>(kSparseAttnDecodeOnceRefsPerRow) * static_cast<double>(rows);
}

// o[t, h, :] = Σ_e softmax_e · kv[idx[t, e], :] with the sink in the denominator, computed by the
// reference's blocked online softmax (README.md "Exact recipe"):
//   logit_e = fp32(q[t,h]·kv[idx_e]) × scale         (fp32 accumulation over head_dim, ascending)
//   per block of 64 list entries, in list order:  m' = max(m, block max)  (m starts at -1e30)
//     α = exp(m − m');  denom = denom·α + Σ_block exp(logit − m');
//     acc = acc·α + Σ_block bf16(exp(logit − m'))·kv[idx_e]
//   denom += exp(sink[h] − m);  o = bf16(acc / denom)
// Entries equal to -1 are ignored (they only occupy list positions, which decide the blocking);
// a row without any valid entry yields +0 everywhere.
struct SparseAttnParams {
  int64_t tokens = 0;    // rows of q / indices / out; 0 is a no-op
  int64_t heads = 0;     // >= 1
  int64_t head_dim = 0;  // in [1, kSparseAttnMaxHeadDim]; also the width of a KV row

  const uint16_t* q = nullptr;  // bf16 [tokens, heads, head_dim]
  int64_t q_stride = 0;         // elements between tokens, >= (heads-1)*q_head_stride + head_dim
  int64_t q_head_stride = 0;    // elements between heads, >= head_dim

  const uint16_t* kv = nullptr;  // bf16 [n_kv, head_dim] pool, row i at kv + i * kv_stride
  int64_t n_kv = 0;              // >= 0 (may be 0 when every index is -1)
  int64_t kv_stride = 0;         // >= head_dim

  // The row form (used instead of kv when kv_rows.window or kv_rows.compressed is non-null; kv
  // must then be null and n_kv 0; head_dim a multiple of 32). Indices then address
  // [0, n_window + n_compressed).
  SparseAttnKvRows kv_rows;

  const int32_t* indices = nullptr;  // int32 [tokens, width], each -1 or in [0, n_kv)
  int64_t width = 0;                 // >= 0 list entries per token
  int64_t indices_stride = 0;        // elements between tokens, >= width

  const float* attn_sink = nullptr;  // fp32 [heads], finite; not scaled, carries no value
  float softmax_scale = 0.0f;        // finite, > 0 (512^-0.5 at full size)

  uint16_t* out = nullptr;      // bf16 [tokens, heads, head_dim]; must not overlap the inputs
  int64_t out_stride = 0;       // as q_stride
  int64_t out_head_stride = 0;  // as q_head_stride

  // Optional RoPE of the attention inside the kernel (spec §4.3 steps 1 and 5), at
  // rope_positions[t] with the text table `rope` over the last rd = rope->rope_dims() (<= head_dim)
  // dims of every head, each exactly as RopeCpu (interleaved pairs, fp32 rotation of the bf16
  // values, one bf16 rounding):
  //   rope_q   — q is rotated before the scores (the kernel's copy; q itself is not written), as
  //              if RopeCpu had been applied to q first;
  //   rope_out — the output gets the inverse (conjugate) rotation, as RopeCpu with inverse = true
  //              applied to the output afterwards.
  // rope and rope_positions are set together, with at least one of the flags. The table must
  // outlive the call; positions are host memory for SparseAttnCpu, device memory for
  // LaunchSparseAttn (checked >= 0 only on the CPU). CUDA: rope_q needs the wgmma family (see
  // "CUDA launcher" below).
  const RopeTable* rope = nullptr;
  const int64_t* rope_positions = nullptr;  // [tokens]
  bool rope_q = false;
  bool rope_out = false;
  // With rope, on CUDA: the cos/sin of rope_positions under `rope`, fp32 [tokens][rd/2][2], 8-byte
  // aligned device memory, as norm_rope's LaunchRopeCosSin writes it — a decode step builds it
  // once for every layer that uses the table. The wgmma family's fused RoPE reads it (the kernels
  // compute no sin/cos: README.md "RoPE table"); it must hold exactly those values (the results
  // are then the bits of RopeCpu). Without it rope_q is an error on CUDA and rope_out runs after
  // the attention. SparseAttnCpu ignores it (set only with rope).
  const float* rope_cos_sin = nullptr;

  // Scratch of at least SparseAttnWorkspaceBytes(head_dim, pool) bytes, any alignment, owned by
  // the caller, not used concurrently by another call. May be null when tokens == 0.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Workspace bytes SparseAttnCpu needs for rows of `head_dim` with `pool` (pass the same pool, or
// one of the same size, to SparseAttnCpu). Independent of tokens, heads and width: per thread
// slot (pool size + 1, or 1 without a pool) 4·(head_dim·(64 + 2·8 + 1) + 8·64 + 64) bytes for the
// fp32 KV block, the group's queries, accumulators and block partial, plus 64 bytes of alignment
// slack — about 166 KB per slot at head_dim 512. Returns 0 for head_dim outside the valid range.
size_t SparseAttnWorkspaceBytes(int64_t head_dim, const ThreadPool* pool);

// Checks every field of `p` (shapes, strides, pointers, index range, overlaps, workspace size
// for `pool`). Errors: InvalidArgumentError naming the field. Cost O(tokens · width).
absl::Status ValidateSparseAttn(const SparseAttnParams& p, const ThreadPool* pool);

// Runs the recipe above. Errors: those of ValidateSparseAttn; nothing is written then.
// Cost O(tokens · heads · width · head_dim) multiply-adds (twice: q·k and p·v).
absl::Status SparseAttnCpu(const SparseAttnParams& p, ThreadPool* pool);

// ---- CUDA launcher (cuda/*.cu; target fs_kernels_attention_cuda, FLASHSERVE_CUDA only) ----
// Every tensor pointer of the params (q, kv, kv_rows, indices, attn_sink, out, workspace) is a
// device pointer (or managed memory). README.md "CUDA" gives the design and the numerics.
//
// The row form (kv_rows) runs on the wgmma path only: head_dim 512, 16-byte aligned q / out and
// row pools, q / out strides multiples of 8 elements and row strides multiples of 16 bytes (any
// head count; InvalidArgumentError naming kv_rows otherwise; a path override other than wgmma-ws,
// which forces the opt-in warp-specialised row kernel, is ignored). The kernel gathers the raw
// rows (288 / 528 B) and decodes them in shared memory, exactly as quant's decoders do; its output
// equals, bit for bit, that of the same kernel fed the decoded bf16 pool. With kv_rows.decoded
// set and heads a multiple of 64, a launch that SparseAttnDecodeOncePays decodes every row into
// it first (one launch per non-empty pool) and runs the bf16 pool's default body on it (wgmma or
// wgmma-ws; a wgmma / wgmma-ws override picks one, other overrides are ignored as for the row
// form): the same bits.
//
// Paths: head_dim 128, 256 or 512 with 16-byte aligned q / kv / out and strides that are multiples
// of 8 elements take a tensor-core path: at head_dim 512 with heads a multiple of 64, the Hopper
// wgmma path (two warpgroups per token and group of 64 heads, operands in 128-byte-swizzled shared
// memory; when a CTA's range of the list has at least 3 blocks of 64 entries, a third warpgroup
// gathers the rows, same output bits); otherwise mma.sync bf16 (one CTA per token and group of 16,
// 32 or 64 heads). Both use fp32 accumulation and share each gathered 64-row KV block among the
// CTA's heads. The recipe is the one above, but the q·k and Σ bf16(p)·v sums run in the tensor
// cores' order (the wgmma path adds each block's products straight into the α-rescaled accumulator
// and uses CUDA's expf for p), the block sums of p in a tree order, and when a launch has fewer
// than kSparseAttnCudaSplitCtas (token, head group) items the list is split into contiguous ranges
// of 64-blocks whose states (m, denom, acc) are merged by a second kernel (exp(m_s − M) weights),
// so bf16(p) is taken against the split-so-far max. Results agree with SparseAttnCpu to
// rounding: per element |gpu − cpu| <= 2^-8·(|cpu| + mass) + 1e-6 (mass as in the CPU tests);
// most elements are bit-identical. Every other valid params struct takes the scalar path (a CTA
// per (token, head), the CPU's operations in the CPU's order; equal to SparseAttnCpu bit for bit
// except where the device exp (double exp rounded to fp32) and glibc expf differ, about never).
// Results are deterministic (no atomics; fixed reduction orders) for a given params struct.
//
// Differences from SparseAttnCpu's validation: the launcher reads no device values, so a
// non-finite sink is not rejected (it gives NaN or 0 outputs), and an index outside [-1, n_kv)
// is not rejected either; the kernels treat it as -1 (the list position is kept, the row is not
// read). The workspace requirement is SparseAttnCudaWorkspaceBytes.
//
// RoPE on CUDA (README.md "RoPE inside the attention"): the wgmma family (head_dim 512) applies
// both rotations itself for tables of up to 64 rotated dims, reading the caller's rope_cos_sin;
// rope_out without rope_cos_sin, with a wider table or on the mma.sync / scalar paths runs
// norm_rope's LaunchRope(inverse) on the output after the attention. rope_q needs the wgmma family
// and rope_cos_sin: with them, head_dim 512 and the tensor path's alignment, the default path
// takes wgmma / wgmma-ws whatever the head count; anything else (no rope_cos_sin, another
// head_dim, a wider table, an override forcing mma.sync or scalar) is InvalidArgumentError naming
// rope_q.

// Launches with fewer (token, head group) items than this split their lists so that about this
// many CTAs run; it also bounds the split states, hence the workspace.
inline constexpr int64_t kSparseAttnCudaSplitCtas = 128;

// Device workspace bytes LaunchSparseAttn needs: the fp32 states of up to kSparseAttnCudaSplitCtas
// split CTAs, (head_dim + 2) floats for each of the CTA's 16 / 32 / 64 head slots, + 16 bytes so
// that the launcher can align them to 16 bytes (the workspace pointer may have any alignment);
// 16.8 MB at 64 heads × 512. Independent of tokens and width: size it once. 0 for invalid dims.
inline size_t SparseAttnCudaWorkspaceBytes(int64_t heads, int64_t head_dim) {
  if (heads < 1 || head_dim < 1 || head_dim > kSparseAttnMaxHeadDim) return 0;
  const int64_t slots = heads <= 16 ? 16 : heads <= 32 ? 32 : 64;
  return static_cast<size_t>(kSparseAttnCudaSplitCtas * slots * (head_dim + 2)) * sizeof(float) +
         16;
}

// Validates (ValidateSparseAttn's checks and messages, less the value checks above, with the
// workspace sized by SparseAttnCudaWorkspaceBytes), then enqueues one or two kernels on `stream`
// and returns; buffers must stay valid until the stream passes them. The workspace holds nothing
// between launches; launches sharing one must be ordered (same stream). Nothing is allocated.
// CUDA launch failures abort (CUDA_CHECK). Cost: each gathered KV row is read once per (token,
// head group) from L2/HBM; 4·heads·head_dim·valid_entries FLOPs per token on the tensor cores.
absl::Status LaunchSparseAttn(const SparseAttnParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
