// The exact Linear body: the reference's blockwise summation order, bit for bit.
//
// Per output tile of 64 columns and per 32-wide K block, the weight block is decoded once into a
// k-major [32][64] tile; each activation row then runs the block's 32 multiply-adds with the
// 64 columns as independent lanes. Vectorising across columns (never across k) keeps every
// column's sum in exactly the sequential ascending-k order the test's scalar loop uses.
#include <algorithm>
#include <cstdint>

#include "common/base/thread_pool.h"
#include "kernels/gemm/linear_internal.h"

namespace flashserve::kernels::gemm_internal {
namespace {

constexpr int64_t kT = kExactTileN;

// acc[j] += (Σ_k x[k]·tile[k][j] · a_scale) · col_scale[j], the sum sequential in k from +0.
void QuantizedBlockRow(const float* x, int64_t kk, const float* tile, float a_scale,
                       const float* col_scale, float* acc) {
  float partial[kT] = {};
  for (int64_t i = 0; i < kk; ++i) {
    const float xi = x[i];
    const float* wi = tile + i * kT;
    for (int64_t j = 0; j < kT; ++j) partial[j] += xi * wi[j];
  }
  for (int64_t j = 0; j < kT; ++j) acc[j] += (partial[j] * a_scale) * col_scale[j];
}

// acc[j] += x[k]·tile[k][j] for k ascending (bf16 / fp32 weights: one running fp32 sum).
void PlainBlockRow(const float* x, int64_t kk, const float* tile, float* acc) {
  for (int64_t i = 0; i < kk; ++i) {
    const float xi = x[i];
    const float* wi = tile + i * kT;
    for (int64_t j = 0; j < kT; ++j) acc[j] += xi * wi[j];
  }
}

}  // namespace

void RunLinearExact(const LinearParams& p, ThreadPool* pool, uint8_t* ws,
                    const WorkspaceLayout& layout, size_t slots) {
  const PreparedLinear& w = *p.weight;
  const int64_t m = p.m, n = w.out_features(), k = w.in_features();
  const int64_t k_blocks = CeilDiv(k, kKBlock);
  const bool quantize = w.quantizes_activations();
  auto* x = reinterpret_cast<float*>(ws + layout.x);
  auto* x_scale = reinterpret_cast<float*>(ws + layout.x_scale);
  ParallelRange(pool, static_cast<size_t>(m), std::max<size_t>(1, 65536 / k),
                [&](size_t r0, size_t r1) {
                  for (size_t r = r0; r < r1; ++r) {
                    const auto off = static_cast<int64_t>(r) * p.x_stride;
                    PrepareActivationRow(p.x_bf16 ? p.x_bf16 + off : nullptr,
                                         p.x_f32 ? p.x_f32 + off : nullptr, k, quantize,
                                         /*fold_scale=*/false, x + r * k, x_scale + r * k_blocks);
                  }
                });

  const int64_t tiles = CeilDiv(n, kT);
  const auto used = static_cast<size_t>(std::min<int64_t>(
      {static_cast<int64_t>(slots), tiles, std::max<int64_t>(1, m * n * k / kMinMacsPerSlot)}));
  const int64_t per_slot = CeilDiv(tiles, static_cast<int64_t>(used));
  ParallelRange(pool, used, 1, [&](size_t s0, size_t s1) {
    for (size_t s = s0; s < s1; ++s) {
      uint8_t* slot = ws + layout.slots + s * layout.slot_bytes;
      auto* tile = reinterpret_cast<float*>(slot);
      auto* col_scale = reinterpret_cast<float*>(slot + layout.slot_b);
      auto* acc = reinterpret_cast<float*>(slot + layout.slot_c);
      const int64_t t_end = std::min(tiles, static_cast<int64_t>(s + 1) * per_slot);
      for (int64_t t = static_cast<int64_t>(s) * per_slot; t < t_end; ++t) {
        const int64_t n0 = t * kT, nn = std::min(kT, n - n0);
        std::fill(acc, acc + m * kT, 0.0f);
        for (int64_t b = 0; b < k_blocks; ++b) {
          const int64_t k0 = b * kKBlock, kk = std::min(kKBlock, k - k0);
          DecodeWeightBlock(w, n0, nn, k0, kk, tile, col_scale);
          for (int64_t r = 0; r < m; ++r) {
            if (quantize) {
              QuantizedBlockRow(x + r * k + k0, kk, tile, x_scale[r * k_blocks + b], col_scale,
                                acc + r * kT);
            } else {
              PlainBlockRow(x + r * k + k0, kk, tile, acc + r * kT);
            }
          }
        }
        const float* bias = w.bias() != nullptr ? w.bias() + n0 : nullptr;
        for (int64_t r = 0; r < m; ++r) {
          StoreRow(acc + r * kT, bias, nn, p.y_bf16 ? p.y_bf16 + r * p.y_stride + n0 : nullptr,
                   p.y_f32 ? p.y_f32 + r * p.y_stride + n0 : nullptr);
        }
      }
    }
  });
}

}  // namespace flashserve::kernels::gemm_internal
