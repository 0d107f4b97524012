// Manifold hyper-connections (mHC) of DeepSeek-V4.1-Flash, model spec §4.2 and §10 item 4: the
// residual is kMhcStreams = 4 parallel streams of width D per token. Each sublayer site (attention,
// FFN) owns hc_{site}_fn [24, 4·D], hc_{site}_base [24] and hc_{site}_scale [3] (all fp32), from
// which a "mixes" pass over the stream derives
//   pre[4]      read-out weights (collapse 4 streams into the sublayer input),
//   post[4]     write-back weights of the sublayer output into each stream,
//   comb[4][4]  stream-to-stream mixing, near doubly stochastic (Sinkhorn),
// and two element-wise ops use them:
//   hc_pre  (X, pre)            -> sum_c pre[c]·X[c]                          [tokens, D]
//   hc_post (f, R, post, comb)  -> out[j] = post[j]·f + sum_i comb[i][j]·R[i]  [tokens, 4, D]
// README.md gives the exact recipe, the Block.forward sequence that orders these calls (the
// one-sublayer pre-mix shift lives in the model layer, not here) and the test tolerances.
//
// Common contract:
// - bf16 tensors are uint16 bit patterns. A stream tensor [tokens, 4, D] keeps the 4 streams of a
//   token contiguous (stream c of token t at base + t * stride + c * D); `stride` counts elements
//   between tokens and must be >= 4 * D. Row strides of [tokens, D] tensors must be >= D.
// - fp32 per-token outputs (mixes, pre, post, comb) are packed: 24, 4, 4 and 16 floats per token;
//   comb[i][j] is at comb + t * 16 + i * 4 + j, with i the source stream and j the destination.
// - All math is fp32 (§10 item 4); each bf16 output element is rounded once (RNE).
// - tokens == 0 is a no-op. Pointers that are used must be non-null.
// - Errors: InvalidArgumentError naming the offending field, detected before anything is read or
//   written.
// - Ownership: the caller owns every buffer; nothing is allocated (the mixes pass keeps a few KB on
//   the stack per token).
// - Threading: `pool` may be null (single-threaded). Calls are thread-safe for disjoint outputs;
//   results do not depend on the pool size (tokens are independent; the summation order inside a
//   token is fixed).
// This header includes no CUDA header; CUstream_st* is cudaStream_t (nullptr: legacy stream).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

struct CUstream_st;

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::kernels {

// Number of residual streams (config hc_mult; 4 for the released and the tiny model).
inline constexpr int kMhcStreams = 4;
// Mix outputs per token: 4 pre + 4 post + 16 comb.
inline constexpr int kMhcMixes = (2 + kMhcStreams) * kMhcStreams;

// One site's mixes pass over a stream tensor X, optionally fused with the collapse of the same X
// by an incoming pre mix (the sublayer input), so X is read once.
struct MhcMixesParams {
  int64_t tokens = 0;
  int64_t dim = 0;               // D, width of one stream (>= 1)
  const uint16_t* x = nullptr;   // bf16 [tokens, 4, D]
  int64_t x_stride = 0;          // elements between tokens, >= 4 * D
  const float* fn = nullptr;     // fp32 [24, 4 * D] row-major, contiguous (hc_{site}_fn)
  const float* base = nullptr;   // fp32 [24] (hc_{site}_base)
  const float* scale = nullptr;  // fp32 [3] (hc_{site}_scale: pre, post, comb)
  int sinkhorn_iters = 20;       // >= 1 (config hc_sinkhorn_iters)
  float hc_eps = 1e-6f;          // >= 0, finite (config hc_eps)
  float norm_eps = 1e-20f;       // > 0, finite (config norm_eps)
  float* pre = nullptr;          // fp32 [tokens, 4] out
  float* post = nullptr;         // fp32 [tokens, 4] out
  float* comb = nullptr;         // fp32 [tokens, 4, 4] out, [i][j] = source i, destination j
  float* mixes = nullptr;        // optional fp32 [tokens, 24] out: raw (X·fn^T)·r, for debugging
  // Optional fused collapse: when pre_in is set, collapsed = HcPre(X, pre_in) is written too.
  const float* pre_in = nullptr;  // fp32 [tokens, 4] (the previous sublayer's pre)
  uint16_t* collapsed = nullptr;  // bf16 [tokens, D] out, required iff pre_in is set
  int64_t collapsed_stride = 0;   // elements, >= D
  // Optional, GPU tensor-core bodies only: fn prepared once per weight by LaunchMhcPrepareFn (for
  // this fn and D; MhcFnFragmentBytes(D) bytes, 16-byte aligned). With it the kernels copy each
  // slice's bf16 pieces instead of splitting fn on every call (the split cost a block ~6 us per
  // slice on an H200); the results are the same bits. fn stays required (the other bodies).
  const void* fn_frags = nullptr;
  // The GPU small-batch body's grid: at most this many CTAs (0, the default: one per item, slices
  // x 8, up to the resident limit). Its items are the same whatever the grid (a CTA walks every
  // gridDim-th), so the bits do not change; a call on a forked stream beside weight streams can
  // leave them SM slots (the decode step's mixes: 160 CTAs of 256 threads at D 5120). >= 0.
  int64_t small_batch_ctas = 0;
};

// hc_pre: out[t] = bf16(sum_c pre[t][c] · X[t][c]), fp32 products summed over c = 0..3 in order.
struct HcPreParams {
  int64_t tokens = 0;
  int64_t dim = 0;
  const uint16_t* x = nullptr;  // bf16 [tokens, 4, D]
  int64_t x_stride = 0;         // elements, >= 4 * D
  const float* pre = nullptr;   // fp32 [tokens, 4]
  uint16_t* out = nullptr;      // bf16 [tokens, D]; must not overlap x
  int64_t out_stride = 0;       // elements, >= D
};

// hc_post: out[t][j] = bf16(post[t][j]·f[t] + sum_{i=0..3} comb[t][i][j]·R[t][i]), all fp32, in
// the reference expression's order: the source sum (i ascending) first, then the post term added.
struct HcPostParams {
  int64_t tokens = 0;
  int64_t dim = 0;
  const uint16_t* f = nullptr;         // bf16 [tokens, D], the sublayer output
  int64_t f_stride = 0;                // elements, >= D
  const uint16_t* residual = nullptr;  // bf16 [tokens, 4, D], the sublayer's input stream
  int64_t residual_stride = 0;         // elements, >= 4 * D
  const float* post = nullptr;         // fp32 [tokens, 4]
  const float* comb = nullptr;         // fp32 [tokens, 4, 4]
  uint16_t* out = nullptr;             // bf16 [tokens, 4, D]; may equal residual (same stride),
  int64_t out_stride = 0;              // otherwise must not overlap residual or f; >= 4 * D
};

// Validation shared by every backend (what the launchers check first). Cost O(1).
absl::Status Validate(const MhcMixesParams& p);
absl::Status Validate(const HcPreParams& p);
absl::Status Validate(const HcPostParams& p);

// The per-token tail of the mixes pass (spec §4.2 A, B, C), exposed so tests and tools can check
// it on given mixes. Inputs: mixes[24], base[24], scale[3]; outputs pre[4], post[4], comb[16]:
//   pre[c]  = sigmoid(mixes[c]·scale[0] + base[c]) + hc_eps
//   post[c] = 2·sigmoid(mixes[4+c]·scale[1] + base[4+c])
//   comb    = row softmax of (mixes[8+4i+j]·scale[2] + base[8+4i+j]) + hc_eps, divided by its
//             column sums (+hc_eps); then sinkhorn_iters − 1 rounds of row-sum division (+hc_eps)
//             followed by column-sum division (+hc_eps).
// sigmoid(v) = 1 / (1 + exp(−v)). No validation (sinkhorn_iters < 1 acts as 1). Pure, thread-safe.
void MhcSplitSinkhorn(const float* mixes, const float* base, const float* scale, int sinkhorn_iters,
                      float hc_eps, float* pre, float* post, float* comb);

// ---- CPU bodies (cpu/*.cc; target fs_kernels_mhc). ----
// Mixes (+ optional fused collapse). Cost: tokens · 4D · (24 + 1) multiply-adds, plus 20 small
// Sinkhorn rounds per token; reads fn once per token (it stays in cache for small D).
absl::Status MhcMixesCpu(const MhcMixesParams& p, ThreadPool* pool);
// Collapse of the streams; cost tokens · 4D multiply-adds, memory bound.
absl::Status HcPreCpu(const HcPreParams& p, ThreadPool* pool);
// Write-back and stream mixing; cost tokens · 4D · 5 multiply-adds, memory bound.
absl::Status HcPostCpu(const HcPostParams& p, ThreadPool* pool);

// ---- CUDA launchers (cuda/*.cu; target fs_kernels_mhc_cuda, FLASHSERVE_CUDA only) ----
// All pointers are device pointers (or managed memory). Each launcher validates first (Validate
// above, the same checks and messages as the CPU bodies), then enqueues its kernels on `stream` and
// returns; buffers must stay valid until the stream passes them. Nothing is allocated. CUDA launch
// failures abort (CUDA_CHECK). Alignment is not required: 16-byte aligned rows with D % 8 == 0
// (4-byte aligned, D even, for the mixes pass) take the vectorised paths. README.md "CUDA" gives
// the numerics; in short, LaunchHcPre / LaunchHcPost and the fused collapse equal the CPU bodies
// bit for bit, while the mixes pass sums its 4·D-long dot products in another order (fp32 FMAs,
// split over slices of kMhcMixesSliceDims), so mixes agree with MhcMixesCpu to ~1e-6 relative and
// pre/post/comb to ~1e-6 absolute. GPU results are deterministic and do not depend on the batch:
// a token's outputs depend only on its own row, D and the site's weights.

// The mixes pass reduces each token's row in slices of this many dims of every stream (4 x 256
// values, 96 KB of fn in shared memory per block), one partial sum per slice, in the workspace.
inline constexpr int64_t kMhcMixesSliceDims = 256;

// Small batches (<= kMhcMixesSmallBatchTokens tokens, D <= kMhcMixesSmallBatchMaxSlices x 256)
// can take a one-launch body that computes the same bits (README.md "CUDA"); it keeps the 32 chunk
// results of every (token, slice, mix) in the workspace, so it needs more of it. kTensorCore picks
// it only up to kMhcMixesSmallBatchAutoTokens tokens: on an H200 at D = 5120 it beats the
// large-batch body up to ~40 tokens (16: 21.0 vs 31.7 us) and loses above (64: 40.3 vs 32.6 us).
inline constexpr int64_t kMhcMixesSmallBatchTokens = 256;
inline constexpr int64_t kMhcMixesSmallBatchAutoTokens = 32;
inline constexpr int64_t kMhcMixesSmallBatchMaxSlices = 64;
static_assert(kMhcMixesSmallBatchAutoTokens <= kMhcMixesSmallBatchTokens);

// The least fp32 workspace LaunchMhcMixes accepts: 25 partial sums per token per slice (4 KB per
// token per 1024 channels of D; 2 KB/token at D = 5120: 32 MiB for 16384 tokens). With only this
// much, every batch takes the large-batch body.
inline int64_t MhcMixesSliceWorkspaceFloats(int64_t tokens, int64_t dim) {
  const int64_t slices = (dim + kMhcMixesSliceDims - 1) / kMhcMixesSliceDims;
  return tokens * slices * (kMhcMixes + 1);
}

// What the small-batch body needs (0 where it does not apply): 24 x 32 + 1 floats per token per
// slice (60 KB per token at D = 5120: 15.4 MiB at 256 tokens).
inline int64_t MhcMixesSmallBatchWorkspaceFloats(int64_t tokens, int64_t dim) {
  const int64_t slices = (dim + kMhcMixesSliceDims - 1) / kMhcMixesSliceDims;
  if (tokens > kMhcMixesSmallBatchTokens || slices > kMhcMixesSmallBatchMaxSlices) return 0;
  return tokens * slices * (kMhcMixes * 32 + 1);
}

// Bytes of a prepared fn (MhcMixesParams::fn_frags, LaunchMhcPrepareFn): per slice of
// kMhcMixesSliceDims dims, the 24 × 4 × 256 fp32 weights as three bf16 pieces in the tensor-core
// bodies' mma fragment order (147,456 bytes; 2.8 MiB at D = 5120). Pure.
constexpr int64_t MhcFnFragmentBytes(int64_t dim) {
  const int64_t slices = (dim + kMhcMixesSliceDims - 1) / kMhcMixesSliceDims;
  return slices * (kMhcMixes * kMhcStreams * kMhcMixesSliceDims * 6);
}

// The fp32 workspace to give LaunchMhcMixes (the larger of the two above) for a batch of `tokens`.
// Sized once for the largest batch, it covers the small-batch body wherever the launcher picks it
// by default (<= 32 tokens) when that batch has >= 1,024 tokens at D = 5120 (32 x 769 <= 1,024 x
// 25 floats per slice); below, a small batch the workspace cannot hold takes the large-batch body
// (same bits). It holds nothing between launches.
inline int64_t MhcMixesWorkspaceFloats(int64_t tokens, int64_t dim) {
  const int64_t slice = MhcMixesSliceWorkspaceFloats(tokens, dim);
  const int64_t small = MhcMixesSmallBatchWorkspaceFloats(tokens, dim);
  return slice > small ? slice : small;
}

// The device bodies of the mixes pass. kFp32Fma's bits differ from the tensor-core bodies'
// (another summation order); the three tensor-core choices give identical bits.
enum class MhcMixesGpuKernel {
  // Default. The tensor-core body (bf16 tensor-core products, mma.sync or, for the mixes alone at
  // large batches, wgmma with the same bits; fn split exactly into three bf16 pieces, so every
  // product is exact; fp32 sums), memory-bound. Small batches (<=
  // kMhcMixesSmallBatchAutoTokens, D <= 16384, a workspace of >= MhcMixesSmallBatchWorkspaceFloats
  // floats, 16-byte aligned) run the small-batch body, others the large-batch body: same bits
  // either way.
  kTensorCore,
  // The first body: fp32 FMAs on the CUDA cores, bound by the fp32 FMA rate (README.md).
  kFp32Fma,
  // Tests and benches: the tensor-core large-batch body (two kernels) at every batch size.
  kTensorCoreLargeBatch,
  // Tests and benches: the tensor-core small-batch body (one cooperative launch);
  // InvalidArgumentError where it does not apply (see kTensorCore).
  kTensorCoreSmallBatch,
  // Tests and benches: kTensorCoreLargeBatch on mma.sync only — where the large-batch body runs
  // its wgmma kernel (README.md "Session 72"), the TMA kernel of sessions 35–50 runs instead.
  kTensorCoreMmaSync,
};

// The mixes pass (+ optional fused collapse) on the GPU. Large batches: two kernels, a split
// reduction of (X·fn^T, sum X^2) over slices of D into `workspace`, then a finish kernel sums the
// slices in order and runs MhcSplitSinkhorn's fp32 recipe. Small batches (kTensorCore): one
// cooperative launch with the same arithmetic (README.md "CUDA"). workspace: device, >=
// MhcMixesSliceWorkspaceFloats floats (MhcMixesWorkspaceFloats to allow the small-batch body),
// overlapping no operand; not read before it is written. Errors: Validate's, plus
// InvalidArgumentError for a missing or small workspace or > 65535 slices (D > 16M). Cost: one
// read of X; kTensorCore: fn read from L2 once per block and slice (large) or once (small),
// memory-bound; kFp32Fma: fn read once per 32 tokens, 24·4·D FMAs per token, bound by the fp32 FMA
// rate on an H200 (README.md).
absl::Status LaunchMhcMixes(const MhcMixesParams& p, float* workspace, int64_t workspace_floats,
                            CUstream_st* stream,
                            MhcMixesGpuKernel kernel = MhcMixesGpuKernel::kTensorCore);
// Prepares fn for MhcMixesParams::fn_frags: each fp32 weight split exactly into its three bf16
// pieces (hi + mid + lo), laid out as the tensor-core bodies stage them. Run it once per weight
// upload (fn must not change afterwards, or prepare again). frags: device, 16-byte aligned, >=
// MhcFnFragmentBytes(dim) bytes. Errors: InvalidArgumentError for dim < 1, null fn / frags, a
// misaligned or small frags. Cost: one read of fn, 1.5x its bytes written.
absl::Status LaunchMhcPrepareFn(int64_t dim, const float* fn, void* frags, int64_t frags_bytes,
                                CUstream_st* stream);
// hc_pre on the GPU, bit for bit HcPreCpu. Memory bound: X read once, out written once.
absl::Status LaunchHcPre(const HcPreParams& p, CUstream_st* stream);
// hc_post on the GPU, bit for bit HcPostCpu (in place allowed as there). Memory bound.
absl::Status LaunchHcPost(const HcPostParams& p, CUstream_st* stream);

}  // namespace flashserve::kernels
