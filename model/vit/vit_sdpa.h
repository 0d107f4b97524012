// The ViT's attention core: full bidirectional scaled dot-product attention per head over the
// patches of one image (no mask, scale head_dim^-0.5), on the CPU. The reference calls
// F.scaled_dot_product_attention on 3-D [heads, n, head_dim] bf16 tensors; every fused torch
// backend requires 4-D inputs, so both the golden (GPU) and the reference's CPU run take the math
// backend, which upcasts bf16 inputs to fp32, computes (q·√s)(k·√s)^T, softmax and P·V in fp32
// and casts the output to bf16 once. SdpaRounding::kNone is that recipe (what we run); the two
// other variants are kept so the fixture test can show they match worse (README.md).
//
// Layout: row t of q / k / v / out is patch t; head h occupies elements [h·head_dim,
// (h+1)·head_dim) of that row. bf16 tensors are uint16 bit patterns; strides count elements.
//
// Threading: (head, query row) pairs are split over `pool` (null = the calling thread only); the
// result does not depend on the pool size. Thread-safe for disjoint outputs and workspaces.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace flashserve {
class ThreadPool;
}  // namespace flashserve

namespace flashserve::model::vit {

enum class SdpaRounding : uint8_t {
  // torch's math backend for bf16 inputs (upcast): fp32 scores, fp32 softmax, fp32 P·V, one
  // bf16 rounding of the output. What the reference ran.
  kNone = 0,
  // Flash-attention style: exp(s − max) rounded to bf16 before P·V, the row sum over the
  // unrounded fp32 values, the normalisation after P·V.
  kProbabilitiesBf16 = 1,
  // torch's math backend without the upcast (bf16 tensors between its ops): scores, softmax
  // output and P·V each rounded to bf16.
  kScoresAndProbabilitiesBf16 = 2,
};

struct VisionSdpaParams {
  int64_t patches = 0;   // n, >= 1
  int64_t heads = 0;     // >= 1
  int64_t head_dim = 0;  // >= 1
  const uint16_t* q = nullptr;
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  int64_t qkv_stride = 0;   // elements between patches in q, k and v, >= heads·head_dim
  uint16_t* out = nullptr;  // bf16 [patches, heads·head_dim]; must not overlap q, k, v
  int64_t out_stride = 0;   // >= heads·head_dim
  SdpaRounding rounding = SdpaRounding::kNone;
  // fp32 scratch of at least VisionSdpaWorkspaceFloats(patches, heads, head_dim, pool) floats,
  // owned by the caller and not used concurrently by another call.
  float* workspace = nullptr;
  size_t workspace_floats = 0;
};

// Scratch the call needs: fp32 copies of q, k, v (3·n·heads·head_dim) plus one score row and
// one output row per thread. Monotone in `patches`; size once for the largest image.
size_t VisionSdpaWorkspaceFloats(int64_t patches, int64_t heads, int64_t head_dim,
                                 const ThreadPool* pool);

// out = softmax(q k^T / √head_dim) v per head, as documented above. Errors: InvalidArgument
// naming the field for non-positive sizes, null pointers, short strides, a bad rounding value or
// a missing / too small workspace; nothing is written then. Cost O(heads · n² · head_dim); the
// scores are never materialised beyond one row per thread (no n² memory).
absl::Status VisionSdpaCpu(const VisionSdpaParams& p, ThreadPool* pool);

}  // namespace flashserve::model::vit
