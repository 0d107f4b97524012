// Elementwise activations of the ViT MLP and the aligner, with the reference's bf16 roundings
// (spec §10 item 10): each op reads bf16, computes in fp32 and rounds its result to bf16 once.
//
// Pure functions over caller-owned buffers; thread-safe for disjoint outputs. Cost O(count).
#pragma once

#include <cstdint>

namespace flashserve::model::vit {

// out[r, c] = bf16( bf16(silu(gate[r, c])) · up[r, c] ), silu(x) = x / (1 + exp(−x)) in fp32:
// torch's F.silu(gate) * up on bf16 tensors. gate/up/out rows sit at `stride` / `out_stride`
// elements apart; out may equal gate (same stride) but must not overlap up otherwise.
void SiluMulBf16(int64_t rows, int64_t cols, const uint16_t* gate, const uint16_t* up,
                 int64_t stride, uint16_t* out, int64_t out_stride);

// x[i] = bf16( x · 0.5 · (1 + erf(x / √2)) ) in fp32 for i < count, in place: torch's exact
// (erf) F.gelu on a bf16 tensor.
void GeluBf16InPlace(uint16_t* x, int64_t count);

}  // namespace flashserve::model::vit
