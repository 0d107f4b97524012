// RMSNorm and rotary position embedding (RoPE) of DeepSeek-V4.1-Flash: params structs and
// launchers. Model spec §10 items 2 and 5, §4.3 (text RoPE) and §4.10 (the ViT's 2-D RoPE);
// README.md gives the exact recipes and the test tolerances. Frequencies and cos/sin come from
// rope_table.h.
//
// Common contract:
// - bf16 tensors are uint16 bit patterns; fp32 tensors are float. Strides count elements.
// - Each op reads bf16, computes in fp32 and rounds each output element to bf16 once (RNE).
// - In place is allowed: out == x with equal strides. Otherwise x and out must not overlap.
// - An empty shape (rows or tokens == 0) is a no-op; pointers that are used must be non-null.
// - Errors: InvalidArgumentError naming the offending field, detected before anything is read or
//   written.
// - Ownership: the caller owns every buffer; nothing is allocated (a few KB of stack per row).
// - Threading: `pool` may be null (single-threaded). Calls are thread-safe for disjoint outputs;
//   results do not depend on the pool size (rows/tokens are independent, the order of the
//   arithmetic inside one row is fixed).
// This header includes no CUDA header; CUstream_st* is cudaStream_t (nullptr: legacy stream).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/norm_rope/rope_table.h"

struct CUstream_st;

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels {

// ---- RMSNorm: out[r, c] = bf16( w[c] * (x[r, c] * rsqrt(mean_c(x[r, :]^2) + eps)) ) ----
// Text norms carry a bf16 weight (eps = config norm_eps, 1e-20); the ViT's carry fp32 (eps 1e-6).
struct RmsNormParams {
  int64_t rows = 0;
  int64_t cols = 0;                       // >= 1
  const uint16_t* x = nullptr;            // bf16 [rows, cols], row r at x + r * x_stride
  int64_t x_stride = 0;                   // >= cols
  const uint16_t* weight_bf16 = nullptr;  // bf16 [cols]; exactly one of the two weights is set
  const float* weight_f32 = nullptr;      // fp32 [cols]
  float eps = 1e-20f;                     // > 0, finite
  uint16_t* out = nullptr;                // bf16 [rows, cols], row r at out + r * out_stride
  int64_t out_stride = 0;                 // >= cols; == x_stride when out == x
  // Optional second output: bf16 [rows, cols], the FP8 E4M3 × UE8M0/32 QDQ of `out` (kernels/quant
  // QdqCpu / LaunchQdq of kFp8E4m3Ue8m0B32 along each row, bit for bit), for FP8 Linears that
  // take it with LinearCudaParams::x_qdq instead of running their own activation pass (~2·rows·
  // cols·2 bytes each; this costs rows·cols·2 written). cols % 32 == 0; disjoint from x and out.
  // Not with RmsNormRope.
  uint16_t* out_qdq = nullptr;
  int64_t out_qdq_stride = 0;  // >= cols
};

absl::Status ValidateRmsNorm(const RmsNormParams& p);

// Cost O(rows * cols).
absl::Status RmsNormCpu(const RmsNormParams& p, ThreadPool* pool);

// The normalising factor alone, fp32 1 / sqrt(fp32(sum x^2) * fp32(1/n) + eps) with x^2 in fp32
// and the sum accumulated in double; this is what RmsNormCpu multiplies each x by. For callers
// that need r itself (Engram's gate; the mHC mixes have their own in kernels/mhc). n >= 1.
float RmsInverse(const uint16_t* x_bf16, int64_t n, float eps);
float RmsInverse(const float* x, int64_t n, float eps);

// ---- Text RoPE: GPT-J / interleaved pairs over the LAST rope_dims dims of every head ----
// For token t at position p = positions[t], head h, pair k of the rotated tail (dims
// head_dim - rd + 2k and +1; a = even = real, b = odd = imaginary):
//   (a, b) -> (a*cos - b*sin, a*sin + b*cos)   with cos/sin of table->CosSin(p), in fp32,
// and sin -> -sin when `inverse` (the conjugate rotation applied to the attention output).
// The first head_dim - rd dims are left as they are (copied when out != x).
// positions cover prefill chunks (start_pos + t), decode batches (one position per sequence) and
// the compressor's group positions (j * ratio).
struct RopeParams {
  const RopeTable* table = nullptr;  // rd = table->rope_dims()
  int64_t tokens = 0;
  int64_t heads = 0;                   // >= 1
  int64_t head_dim = 0;                // >= rd
  const int64_t* positions = nullptr;  // [tokens], each >= 0
  const uint16_t* x = nullptr;         // bf16 [tokens, heads, head_dim]
  int64_t x_stride = 0;       // elements between tokens, >= (heads-1)*x_head_stride+head_dim
  int64_t x_head_stride = 0;  // elements between heads, >= head_dim
  uint16_t* out = nullptr;    // bf16, same shape; may equal x (then equal strides)
  int64_t out_stride = 0;
  int64_t out_head_stride = 0;
  bool inverse = false;
};

absl::Status ValidateRope(const RopeParams& p);
// Everything ValidateRope checks except the values of `positions` (only that it is non-null): what
// the GPU launchers check, since their positions live in device memory. Cost O(1).
absl::Status ValidateRopeLayout(const RopeParams& p);

// Cost O(tokens * (rd/2 sin/cos on cache misses + heads * head_dim)).
absl::Status RopeCpu(const RopeParams& p, ThreadPool* pool);

// RopeCpu's rotation of one head's tail: out[2k], out[2k + 1] = the interleaved pair (x[2k],
// x[2k + 1]) rotated by (cos[k], sin[k]), k < pairs (pass -sin for the inverse), in fp32 from the
// bf16 values, each output rounded to bf16 once. For fused callers (kernels/attention rope_q);
// out may equal x. No checks.
void RopeRotateInterleaved(const uint16_t* x, const float* cos, const float* sin, int64_t pairs,
                           uint16_t* out);

// ---- The cos/sin of a call's positions, once (for RoPE fused into other kernels) ----
// out[2·(t·rd/2 + k)] = cos, out[2·(t·rd/2 + k) + 1] = sin of pair k at positions[t]: exactly the
// values RopeTable::CosSin gives and every RoPE kernel computes where it rotates (a double sin/cos
// of fp32(pos)·freq, rounded to fp32). The attention's fused RoPE reads such a table
// (SparseAttnParams::rope_cos_sin) instead of computing a double-precision sin/cos in every work
// unit, which cost it ~5 µs per unit at 64K positions (kernels/attention README "RoPE table"); a
// decode step builds one per (RopeTable, positions) and every layer with that table reads it.
struct RopeCosSinParams {
  const RopeTable* table = nullptr;    // rd = table->rope_dims()
  int64_t tokens = 0;                  // >= 0
  const int64_t* positions = nullptr;  // [tokens], each >= 0
  float* out = nullptr;                // fp32 [tokens][rd/2][2] (cos, sin)
};

// Non-null table / positions / out (the latter two when tokens > 0), tokens in [0, 2^31), and
// (host_values) every position >= 0 — the GPU launcher does not read its device positions. O(1)
// without host values, O(tokens) with.
absl::Status ValidateRopeCosSin(const RopeCosSinParams& p, bool host_values);

// Cost O(tokens · rd/2) sin/cos (cache hits below table->cached_positions()).
absl::Status RopeCosSinCpu(const RopeCosSinParams& p);

// ---- Vision 2-D RoPE: NeoX half-split over all head_dim dims of every head (§4.10) ----
// With half = head_dim/2 and q = head_dim/4 frequencies f (ComputeVisionRopeFrequencies), angle j
// (0 <= j < half) of a patch at (row, col) is fp32(row * f_j) for j < q, fp32(col * f_{j-q})
// otherwise; dims (j, j + half) rotate:
//   x1 = x[j], x2 = x[j + half]:  out[j] = x1*cos - x2*sin,  out[j + half] = x2*cos + x1*sin.
struct VisionRope2dParams {
  int64_t patches = 0;
  int64_t heads = 0;              // >= 1
  int64_t head_dim = 0;           // multiple of 4 in [4, kMaxRopeDims] (64 in the ViT)
  double theta = 10000.0;         // vision_rope_theta, > 1
  const int32_t* rows = nullptr;  // [patches] patch row (0 .. n_h-1), >= 0
  const int32_t* cols = nullptr;  // [patches] patch column (0 .. n_w-1), >= 0
  const uint16_t* x = nullptr;    // bf16 [patches, heads, head_dim]
  int64_t x_stride = 0;           // elements between patches
  int64_t x_head_stride = 0;      // elements between heads, >= head_dim
  uint16_t* out = nullptr;        // may equal x (then equal strides)
  int64_t out_stride = 0;
  int64_t out_head_stride = 0;
};

absl::Status ValidateVisionRope2d(const VisionRope2dParams& p);

// Cost O(patches * (head_dim/2 sin/cos + heads * head_dim)).
absl::Status VisionRope2dCpu(const VisionRope2dParams& p, ThreadPool* pool);

// ---- Fused RMSNorm + text RoPE over one head per row (kv_norm then RoPE on the kv tail) ----
// Row r is normalised as RmsNormParams says, and its last rd = table->rope_dims() dims are then
// rotated as RopeParams says (one head of head_dim = cols) at position positions[r], reading the
// bf16-rounded normed values: bit for bit RmsNormCpu followed by RopeCpu on its output (out may be
// x, as for both). RmsNormRopeCpu is that composition (the GPU tests' and bench's reference);
// LaunchRmsNormRope does it in one pass.
struct RmsNormRopeParams {
  RmsNormParams norm;                  // rows = tokens, cols = head_dim (>= rd)
  const RopeTable* table = nullptr;    // host object; its frequencies travel with the launch
  const int64_t* positions = nullptr;  // [rows], device memory on the GPU path
  bool inverse = false;
};

// ValidateRmsNorm(norm) plus a non-null table with rope_dims <= cols and non-null positions
// (values not read). Cost O(1).
absl::Status ValidateRmsNormRope(const RmsNormRopeParams& p);

// CPU body: RmsNormCpu(p.norm), then RopeCpu in place on out (one head of cols dims per row,
// host positions). Every check — the RoPE's positions included — runs before anything is written.
// Cost O(rows * cols).
absl::Status RmsNormRopeCpu(const RmsNormRopeParams& p, ThreadPool* pool);

// ---- CUDA launchers (cuda/*.cu; target fs_kernels_norm_rope_cuda, FLASHSERVE_CUDA only) ----
// All tensor pointers (x, out, weights, positions) are device pointers (or managed memory); the
// RopeTable stays on the host (its rd/2 fp32 frequencies are passed by value with the launch, and
// cos/sin are computed on the device: no table lives in device memory). The launchers validate
// first (the same checks and messages as the CPU bodies, except that device positions are not
// read: a negative position rotates by its negative angle), then enqueue one kernel on `stream`
// and return; buffers must stay valid until the stream passes it. Nothing is allocated. CUDA
// launch failures abort (CUDA_CHECK). Results equal the CPU bodies' bit for bit (README.md "CUDA"
// gives the recipe and the one theoretical exception: a double sin/cos or sum rounding within
// 2^-29 of an fp32 tie). Alignment is not required; 16-byte aligned rows (4-byte for RoPE pairs)
// take the vectorised path.
// RMSNorm: a warp per row for cols <= 1024, a 256-thread block per row above. Cost: one read of
// x and of the weight per row, one write of out.
absl::Status LaunchRmsNorm(const RmsNormParams& p, CUstream_st* stream);
// Text RoPE: a block per token; cos/sin (double sin/cos rounded to fp32, rd/2 per token) shared
// by the token's heads. Cost: the rotated tails read and written; the other dims copied when
// out != x (untouched in place).
absl::Status LaunchRope(const RopeParams& p, CUstream_st* stream);
// Fused RMSNorm + RoPE: LaunchRmsNorm's kernel, rotating the tail pairs before they are stored.
absl::Status LaunchRmsNormRope(const RmsNormRopeParams& p, CUstream_st* stream);
// The cos/sin table (RopeCosSinParams): a thread per (token, pair); out equals RopeCosSinCpu's
// bit for bit. Cost: tokens · rd/2 double sin/cos, 4·rd bytes written per token.
absl::Status LaunchRopeCosSin(const RopeCosSinParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
