// Internal to fs_kernels_attention: the workspace layout shared by the validation (its size) and
// the CPU body (its use), and the validation shared with the CUDA launcher. Not for other modules.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention/attention.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels::attention_internal {

inline constexpr size_t kAlign = 64;

// One thread slot's scratch, offsets in floats from the slot's start (which is 64-byte aligned).
struct SlotLayout {
  int64_t kv_block = 0;   // fp32 [64, head_dim]: the block's valid KV rows, compacted
  int64_t q_t = 0;        // fp32 [head_dim, 8]: the group's queries, transposed (head fastest)
  int64_t acc = 0;        // fp32 [8, head_dim]: P·V accumulators
  int64_t part = 0;       // fp32 [head_dim]: one head's block partial Σ bf16(p)·v
  int64_t logits = 0;     // fp32 [8, 64]: scaled logits, then p
  int64_t rows = 0;       // int32 [64]: list positions of the compacted rows
  size_t slot_bytes = 0;  // multiple of kAlign
};

SlotLayout ComputeSlotLayout(int64_t head_dim);

// Whether `p` reads the serving-format rows (kv_rows) instead of the bf16 pool.
inline bool UsesKvRows(const SparseAttnParams& p) {
  return p.kv_rows.window != nullptr || p.kv_rows.compressed != nullptr;
}

// The exclusive upper bound of valid indices: n_kv, or n_window + n_compressed in the row form.
inline int64_t KvIndexBound(const SparseAttnParams& p) {
  return UsesKvRows(p) ? p.kv_rows.n_window + p.kv_rows.n_compressed : p.n_kv;
}

// Thread slots a call uses: pool size + 1 (the caller runs one chunk), or 1 without a pool.
size_t NumSlots(const ThreadPool* pool);

// ValidateSparseAttn with the workspace requirement given (SparseAttnWorkspaceBytes for the CPU
// body, SparseAttnCudaWorkspaceBytes for the launcher). host_values = false skips the checks that
// read tensor values (finite sinks, index range): the launcher's pointers are device pointers.
absl::Status ValidateSparseAttnFor(const SparseAttnParams& p, size_t workspace_need,
                                   bool host_values);

// The output's inverse RoPE as norm_rope's RoPE op in place over p.out (rope_out's definition):
// what SparseAttnCpu runs after the attention, and the CUDA launcher where the wgmma family does
// not apply it itself.
RopeParams OutputRopeParams(const SparseAttnParams& p);

}  // namespace flashserve::kernels::attention_internal
