// Sparse attention of DeepSeek-V4.1-Flash (the reference's `sparse_attn` kernel): one softmax per
// (token, head) over a list of rows of a shared K = V latent pool, plus the per-head attention
// sink. Model spec §4.3 steps 2–5, numerics §10 items 5 and 7; README.md gives the exact recipe,
// the reading of the rescale order and the test tolerances. The index lists come from
// window_indices.h.
//
// Contract:
// - bf16 tensors are uint16 bit patterns; fp32 tensors are float; strides count elements.
// - The caller has already RoPE'd and quant-dequantised the KV rows; q is never quantised. The
//   inverse RoPE of the output (spec §4.3 step 5) is the caller's too (kernels/norm_rope RopeCpu
//   with inverse = true).
// - Errors: InvalidArgumentError naming the offending field, detected before anything is written.
// - Ownership: the caller owns every buffer, the workspace included; nothing is allocated (the
//   pool's task queue aside).
// - Threading: `pool` may be null (single-threaded). Work is split over (token, group of 8
//   heads); results do not depend on the pool size. Concurrent calls are safe with distinct
//   outputs and workspaces. Must not be called from inside a task of `pool`.
// This header includes no CUDA header (the CUDA backend adds LaunchSparseAttn here later).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels {

// The online softmax walks each index list in blocks of this many entries (K41:328 `block`).
inline constexpr int64_t kSparseAttnBlock = 64;
// Heads that one work item handles together (they share the gathered KV block).
inline constexpr int64_t kSparseAttnHeadGroup = 8;
// Largest head_dim accepted (512 in the released model, 128 in the tiny fixture).
inline constexpr int64_t kSparseAttnMaxHeadDim = 4096;

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

  const int32_t* indices = nullptr;  // int32 [tokens, width], each -1 or in [0, n_kv)
  int64_t width = 0;                 // >= 0 list entries per token
  int64_t indices_stride = 0;        // elements between tokens, >= width

  const float* attn_sink = nullptr;  // fp32 [heads], finite; not scaled, carries no value
  float softmax_scale = 0.0f;        // finite, > 0 (512^-0.5 at full size)

  uint16_t* out = nullptr;      // bf16 [tokens, heads, head_dim]; must not overlap the inputs
  int64_t out_stride = 0;       // as q_stride
  int64_t out_head_stride = 0;  // as q_head_stride

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

}  // namespace flashserve::kernels
