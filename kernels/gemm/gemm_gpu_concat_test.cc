// A stacked Linear (ConcatLinearRows) on the GPU: wq_a | wkv (1,280 + 512 rows, K 5,120), the
// two Linears that read attn_norm's output, as one launch. Its output columns must be the parts'
// outputs side by side:
// - exact-arithmetic inputs, the automatic plan at decode and prefill sizes: bit for bit whatever
//   the plan (the stream kernel's split count depends on N; exact sums do not);
// - random inputs at prefill sizes, on the bf16 wgmma plans (by-waves and 256-column tiles, the
//   kept expansion, a pre-QDQ'd x) with the same K splits forced on the whole and the parts: bit
//   for bit too, because a column's K order does not depend on N or on the tile width. (The
//   automatic split count does depend on N — wkv alone splits K in 2 at M 4,096, the stack does
//   not — so there the stack differs from the parts as any two split counts do;
//   kernels/gemm/fused_linears.md.)
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/base/check.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_gpu_bits.h"
#include "kernels/gemm/gemm_gpu_test_util.h"
#include "kernels/gemm/gemm_test_util.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using gemm_test::ExpectBitEqual;
using gemm_test::GpuRunOptions;
using gemm_test::HostLinear;
using gemm_test::Rng;

constexpr int64_t kK = 5120;
constexpr int64_t kRows[] = {1280, 512};  // wq_a, wkv

class GemmGpuConcatTest : public ::testing::Test {
 protected:
  void SetUp() override { FS_SKIP_WITHOUT_GPU(); }
};

// The parts uploaded one by one and stacked; `keep`: every upload keeps its bf16 expansion.
struct Stacked {
  std::vector<std::unique_ptr<PreparedLinear>> host;
  std::vector<DeviceFp8Linear> parts;
  DeviceFp8Linear whole;
};
Stacked Stack(const std::vector<HostLinear>& hs, bool keep) {
  Stacked s;
  std::vector<const PreparedLinear*> ptrs;
  for (const HostLinear& h : hs) {
    s.host.push_back(gemm_test::PrepareCodesOnly(h));
    s.parts.push_back(gemm_test::UploadOrDie(*s.host.back(), keep));
    ptrs.push_back(s.host.back().get());
  }
  auto cat = ConcatLinearRows(ptrs, {.expand_to_f32 = false});
  CHECK_OK(cat.status());
  s.whole = gemm_test::UploadOrDie(*cat, keep);
  return s;
}

// Runs the whole and each part with the same options and compares the part's columns.
int CompareSideBySide(const Stacked& s, const std::vector<uint16_t>& x, int64_t m,
                      const GpuRunOptions& o, const std::string& what) {
  const int64_t n = s.whole.view().n;
  const std::vector<float> whole = gemm_test::RunLinearGpu(s.whole.view(), x, m, kK, o);
  int64_t col = 0;
  for (const DeviceFp8Linear& p : s.parts) {
    const int64_t pn = p.view().n;
    std::vector<float> cols(m * pn);
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(whole.begin() + r * n + col, pn, cols.begin() + r * pn);
    }
    ExpectBitEqual(cols, gemm_test::RunLinearGpu(p.view(), x, m, kK, o), m, pn, pn,
                   what + " M " + std::to_string(m) + " part at column " + std::to_string(col));
    col += pn;
  }
  return 1;
}

TEST_F(GemmGpuConcatTest, ExactArithmeticAutomaticPlanAtEveryM) {
  Rng rng(61);
  std::vector<HostLinear> hs;
  std::vector<std::vector<int>> bases(2);
  for (int i = 0; i < 2; ++i) {
    hs.push_back(gemm_test::ExactArithFp8(kRows[i], kK, 125, 125, false, rng, &bases[i]));
  }
  const Stacked s = Stack(hs, false);
  int runs = 0;
  for (int64_t m : {1, 7, 64, 300, 1024}) {
    const std::vector<uint16_t> x = gemm_test::SmallIntActivations(m, kK, kK, 2, rng);
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(gemm_test::ExactPremiseHolds(hs[i], bases[i], x, m, kK));
    runs += CompareSideBySide(s, x, m, GpuRunOptions{}, "exact, automatic plan");
  }
  std::printf("stacked wq_a | wkv, exact arithmetic: %d runs bit-identical to the parts\n", runs);
}

TEST_F(GemmGpuConcatTest, RandomInputsPrefillPlansWithTheSameSplitsBitIdentical) {
  Rng rng(62);
  std::vector<HostLinear> hs;
  for (int64_t n : kRows) {
    hs.push_back(gemm_test::RandomLinear(WeightFormat::kFp8Block32, n, kK, true, rng));
  }
  int runs = 0;
  for (bool keep : {false, true}) {
    const Stacked s = Stack(hs, keep);
    for (int64_t m : {1024, 4096}) {
      const std::vector<uint16_t> x = gemm_test::RandomActivations(m, kK, kK, rng);
      std::vector<uint16_t> xq(x.size());
      ASSERT_TRUE(
          quant::QdqCpu({quant::BlockFormat::kFp8E4m3Ue8m0B32, m, kK, x.data(), kK, xq.data(), kK})
              .ok());
      for (int64_t split : {1, 2}) {
        for (int64_t cols : {0, 256}) {
          for (bool pre : {false, true}) {
            GpuRunOptions o;
            o.split_k = split;
            o.ws_tile_cols = cols;
            o.x_qdq = pre;
            runs += CompareSideBySide(s, pre ? xq : x, m, o,
                                      std::string(keep ? "kept expansion, " : "") +
                                          (cols == 0 ? "by-waves tiles" : "256-column tiles") +
                                          (pre ? ", pre-QDQ'd x" : "") + ", splits " +
                                          std::to_string(split));
          }
        }
      }
    }
  }
  std::printf("stacked wq_a | wkv, random inputs: %d prefill runs bit-identical to the parts\n",
              runs);
}

}  // namespace
}  // namespace flashserve::kernels
