// Test-only helpers shared by the FP8 Linear's GPU tests (gemm_gpu_test.cc, gemm_gpu_ws_test.cc):
// bit-for-bit comparison of two outputs and the random cases of the warp-specialised bit tests.
// Header-only because it uses gtest assertions (gemm_gpu_test_util.cc is also linked into
// bench_gemm_gpu, which has no gtest).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_gpu_test_util.h"
#include "kernels/gemm/gemm_test_util.h"
#include "kernels/gemm/prepared_linear.h"

namespace flashserve::kernels::gemm_test {

// `any_zero_sign`: +0 and -0 count as equal (a reference that is not a sum, e.g. the activation
// itself, keeps a -0 that a dot product of it with an identity row turns into +0).
inline void ExpectBitEqual(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t m,
                           int64_t n, int64_t y_stride, const std::string& what,
                           bool any_zero_sign = false) {
  int64_t bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const float g = gpu[r * y_stride + j], c = cpu[r * y_stride + j];
      if (std::isnan(g) && std::isnan(c)) continue;
      if (any_zero_sign && g == 0.0f && c == 0.0f) continue;
      if (std::memcmp(&g, &c, 4) != 0 && ++bad <= 5) {
        ADD_FAILURE() << what << ": y[" << r << "][" << j << "] gpu " << g << " cpu " << c;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// A case of the warp-specialised bit tests, and its random kFp8Block32 weight (with bias),
// prepared on the host (codes only) and uploaded.
struct LinearCase {
  int64_t m, n, k, split_k;
};
struct CaseWeight {
  std::unique_ptr<PreparedLinear> host;
  DeviceFp8Linear device;
};
inline CaseWeight MakeCaseWeight(const LinearCase& c, Rng& rng) {
  const HostLinear h = RandomLinear(WeightFormat::kFp8Block32, c.n, c.k, true, rng);
  CaseWeight cw{PrepareCodesOnly(h), {}};
  cw.device = UploadOrDie(*cw.host);
  return cw;
}

}  // namespace flashserve::kernels::gemm_test
