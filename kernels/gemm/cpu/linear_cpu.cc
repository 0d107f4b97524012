// LinearCpu: validation and dispatch, and the fast body (fp32 sgemm on QDQ'd activations).
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "common/base/thread_pool.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/linear_internal.h"

namespace flashserve::kernels {
namespace gemm_internal {
namespace {

// Our pool owns the parallelism; OpenBLAS must not start its own threads inside our tiles
// (2 cores running 2 × N BLAS threads would oversubscribe). Process-wide and idempotent.
void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// c[m, nn] (ldc) = a[m, k] (lda) · b[nn, k]^T (ldb = k). c is zeroed first so that garbage in it
// (NaN from an old workspace) cannot leak through a beta = 0 that a BLAS might implement as a
// multiply.
void Sgemm(int64_t m, int64_t nn, int64_t k, const float* a, int64_t lda, const float* b, float* c,
           int64_t ldc) {
  for (int64_t r = 0; r < m; ++r) std::memset(c + r * ldc, 0, static_cast<size_t>(nn) * 4);
  if (m == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(nn), static_cast<blasint>(k),
                1.0f, b, static_cast<blasint>(k), a, 1, 0.0f, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(nn), static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(k), 0.0f, c, static_cast<blasint>(ldc));
}

// How many slots get tiles: no more than there are tiles, and enough work for each.
size_t UsedSlots(size_t slots, int64_t tiles, int64_t m, int64_t n, int64_t k) {
  const int64_t by_work = std::max<int64_t>(1, m * n * k / kMinMacsPerSlot);
  return static_cast<size_t>(std::min<int64_t>({static_cast<int64_t>(slots), tiles, by_work}));
}

}  // namespace

void RunLinearFast(const LinearParams& p, ThreadPool* pool, uint8_t* ws,
                   const WorkspaceLayout& layout, size_t slots) {
  const PreparedLinear& w = *p.weight;
  const int64_t m = p.m, n = w.out_features(), k = w.in_features();
  const bool quantize = w.quantizes_activations();
  const float* a = p.x_f32;
  int64_t lda = p.x_stride;
  if (quantize || p.x_bf16 != nullptr) {
    float* x = reinterpret_cast<float*>(ws + layout.x);
    ParallelRange(pool, static_cast<size_t>(m), std::max<size_t>(1, 65536 / k),
                  [&](size_t r0, size_t r1) {
                    for (size_t r = r0; r < r1; ++r) {
                      const auto off = static_cast<int64_t>(r) * p.x_stride;
                      PrepareActivationRow(p.x_bf16 + off, nullptr, k, quantize,
                                           /*fold_scale=*/true, x + r * k, nullptr);
                    }
                  });
    a = x;
    lda = k;
  }

  const int64_t tiles = CeilDiv(n, kFastTileN);
  const size_t used = UsedSlots(slots, tiles, m, n, k);
  const int64_t per_slot = CeilDiv(tiles, static_cast<int64_t>(used));
  ParallelRange(pool, used, 1, [&](size_t s0, size_t s1) {
    for (size_t s = s0; s < s1; ++s) {
      uint8_t* slot = ws + layout.slots + s * layout.slot_bytes;
      auto* c_tile = reinterpret_cast<float*>(slot);
      auto* w_tile = reinterpret_cast<float*>(slot + layout.slot_b);
      const int64_t t_end = std::min(tiles, static_cast<int64_t>(s + 1) * per_slot);
      for (int64_t t = static_cast<int64_t>(s) * per_slot; t < t_end; ++t) {
        const int64_t n0 = t * kFastTileN, nn = std::min(kFastTileN, n - n0);
        const float* b = w_tile;
        if (w.expanded()) {
          b = w.f32() + n0 * k;
        } else {
          DequantizeRows(w, n0, nn, w_tile);
        }
        float* c = p.y_f32 != nullptr ? p.y_f32 + n0 : c_tile;
        const int64_t ldc = p.y_f32 != nullptr ? p.y_stride : kFastTileN;
        Sgemm(m, nn, k, a, lda, b, c, ldc);
        const float* bias = w.bias() != nullptr ? w.bias() + n0 : nullptr;
        for (int64_t r = 0; r < m; ++r) {
          StoreRow(c + r * ldc, bias, nn, p.y_bf16 ? p.y_bf16 + r * p.y_stride + n0 : nullptr,
                   p.y_f32 ? p.y_f32 + r * p.y_stride + n0 : nullptr);
        }
      }
    }
  });
}

}  // namespace gemm_internal

absl::Status LinearCpu(const LinearParams& p, ThreadPool* pool) {
  using namespace gemm_internal;  // NOLINT(build/namespaces): internal helpers of this launcher
  if (absl::Status s = ValidateLinearParams(p, pool); !s.ok()) return s;
  if (p.m == 0) return absl::OkStatus();
  const size_t slots = NumSlots(pool);
  const WorkspaceLayout layout = ComputeLayout(*p.weight, p.m, p.mode, slots);
  const auto base = reinterpret_cast<uintptr_t>(p.workspace);
  auto* ws = reinterpret_cast<uint8_t*>((base + kAlign - 1) / kAlign * kAlign);
  if (p.mode == LinearMode::kExact) {
    RunLinearExact(p, pool, ws, layout, slots);
  } else {
    UseSingleThreadedBlas();
    RunLinearFast(p, pool, ws, layout, slots);
  }
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
