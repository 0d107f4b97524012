// KV compressor of DeepSeek-V4.1-Flash on CPU (model spec §4.4, §10 items 1 and 5): turns the
// attention input x of a KV-source layer into compressed latents, one per group of `ratio`
// consecutive tokens, and prepares them for the compressed (main) KV cache. README.md gives the
// exact recipes and the test tolerances.
//
//   ratio 1: latent_t = RMSNorm(bf16(x_t · wkv^T))               (bf16 GEMM, no activation quant)
//   ratio r >= 2 (the model uses 2): per token kv_t = x_t · wkv^T, z_t = x_t · wgate^T as true
//            fp32 GEMMs; group j = tokens j·r .. j·r + r − 1; per channel c
//            w_i = softmax_i(z[i][c]) (correctly rounded exp, exp_rn.h),
//            pooled[c] = Σ_i w_i · kv[i][c] (fp32),
//            latent_j = RMSNorm(bf16(pooled))                    (cast FIRST, then the norm)
//   cache:   RoPE of the last rd dims at position j·r, then FP4 E2M1 / E4M3-per-16 quant-dequant;
//            optionally the 288-byte serving row (common/formats/kv_row.h).
//
// Streaming: a CompressorState carries the open group's fp32 kv and z (at most ratio − 1 tokens)
// between calls, so any split of a sequence into calls (prefill chunks, one-token decode steps)
// emits exactly the rows, bit for bit, that one call over the whole sequence emits (kExact mode).
//
// Common contract: bf16 tensors are uint16 bit patterns; strides count elements; the caller owns
// every buffer; nothing is allocated per call (the pool's task closures aside). Errors are
// InvalidArgumentError / FailedPreconditionError naming the field, detected before anything is
// written (state included). Calls are thread-safe for distinct states, outputs and workspaces.
// The state, the post-GEMM half (CompressProjectedCpu), the cache tail and the CUDA launchers are
// declared in compressor_params.h (C++17, no GEMM types: the CUDA code includes it), included
// here. This header includes no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/compressor/compressor_params.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/prepared_linear.h"

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels {

// One layer's compressor weights (borrowed; must outlive the calls).
struct CompressorWeights {
  int64_t ratio = 0;                      // 1 .. kMaxCompressRatio (model: 2 or 1)
  const PreparedLinear* wkv = nullptr;    // [C, D]; kBf16 or kF32 (no activation quant)
  const PreparedLinear* wgate = nullptr;  // [C, D], ratio >= 2 only (null for ratio 1)
  const uint16_t* norm_weight = nullptr;  // bf16 [C]
  float norm_eps = 1e-20f;                // config norm_eps, > 0
  // kExact (default) is the reference's sequential fp32 order and makes chunked == one-shot
  // bit-exact. kFast (OpenBLAS) may pick other kernels for other row counts (sgemv at M = 1), so
  // chunk invariance is then only within fp32 rounding.
  LinearMode mode = LinearMode::kExact;
};

// Bytes of the serialized state: int64 next_pos, int64 pending (little-endian), then kv and score
// rows as fp32 (all ratio − 1 rows; unused rows are written as stored).
int64_t CompressorStateBytes(int64_t ratio, int64_t channels);

// Writes / reads the layout above. `out` / `in` must be exactly CompressorStateBytes bytes; the
// state must have been made with the same ratio and channels. Errors: InvalidArgumentError for a
// size mismatch or (Deserialize) a pending count outside [0, ratio) or a negative next_pos; the
// state is unchanged on error.
absl::Status SerializeCompressorState(const CompressorState& state, std::span<uint8_t> out);
absl::Status DeserializeCompressorState(std::span<const uint8_t> in, CompressorState& state);

// Workspace bytes CompressCpu needs for calls of up to `max_tokens` tokens with `pool` (pass the
// same pool, or one of the same size, to CompressCpu). Ratio 1: the wkv Linear's workspace.
// Ratio >= 2: 8·max_tokens·C (fp32 kv and z) + the larger Linear workspace + 128 B slack.
// Returns 0 for weights that fail validation.
size_t CompressorWorkspaceBytes(const CompressorWeights& weights, int64_t max_tokens,
                                const ThreadPool* pool);

struct CompressParams {
  const CompressorWeights* weights = nullptr;
  CompressorState* state = nullptr;  // ratio and channels must match the weights
  int64_t start_pos = 0;             // position of x row 0, >= 0
  int64_t tokens = 0;                // s; 0 is a no-op
  const uint16_t* x = nullptr;       // bf16 [s, D], row t at x + t·x_stride
  int64_t x_stride = 0;              // >= D
  // Output: the completed groups' pre-RoPE latents, bf16 [capacity, C] (row g at latent +
  // g·latent_stride), and their group indices j (first token position j·ratio), ascending.
  uint16_t* latent = nullptr;
  int64_t latent_stride = 0;     // >= C
  int64_t latent_capacity = 0;   // rows; >= CompressMaxGroups(ratio, s)
  int64_t* group_index = nullptr;  // [latent_capacity]
  int64_t* groups_emitted = nullptr;  // out: number of rows written
  void* workspace = nullptr;  // >= CompressorWorkspaceBytes(*weights, s, pool), any alignment
  size_t workspace_bytes = 0;
};

absl::Status ValidateCompress(const CompressParams& p, const ThreadPool* pool);

// Compresses s tokens at positions start_pos .. start_pos + s − 1 following the tokens already
// held in *state, emits every group completed by them and keeps the new open group's tokens in
// *state (next_pos becomes start_pos + s). Preconditions (FailedPreconditionError otherwise):
// state->pending == start_pos % ratio, and start_pos == state->next_pos when pending > 0; a fresh
// or restored-at-a-group-boundary state can start at any multiple of ratio.
// Cost: O(s·D·C) (two GEMMs for ratio >= 2) + O(groups·C).
absl::Status CompressCpu(const CompressParams& p, ThreadPool* pool);

}  // namespace flashserve::kernels
