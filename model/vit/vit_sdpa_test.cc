// VisionSdpaCpu against a double-precision softmax attention, hand-checkable cases, pool
// independence and parameter validation.
#include "model/vit/vit_sdpa.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/formats/bf16.h"
#include "gtest/gtest.h"

namespace flashserve::model::vit {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;

struct Case {
  int64_t n, heads, head_dim, stride;
  std::vector<uint16_t> q, k, v;  // [n, stride] each
};

Case RandomCase(int64_t n, int64_t heads, int64_t head_dim, float scale, uint32_t seed) {
  Case c{n, heads, head_dim, heads * head_dim + 5, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (auto* t : {&c.q, &c.k, &c.v}) {
    t->resize(n * c.stride);
    for (auto& x : *t) x = FloatToBf16Bits(dist(rng));
  }
  return c;
}

// softmax(q k^T / sqrt(d)) v per head in double from the bf16 inputs.
std::vector<double> ReferenceAttention(const Case& c) {
  std::vector<double> out(c.n * c.heads * c.head_dim);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  for (int64_t h = 0; h < c.heads; ++h) {
    for (int64_t i = 0; i < c.n; ++i) {
      std::vector<double> s(c.n);
      double max_s = -1e300, sum = 0;
      for (int64_t j = 0; j < c.n; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < c.head_dim; ++e) {
          dot += double{Bf16BitsToFloat(c.q[i * c.stride + h * c.head_dim + e])} *
                 Bf16BitsToFloat(c.k[j * c.stride + h * c.head_dim + e]);
        }
        s[j] = dot * scale;
        max_s = std::max(max_s, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - max_s));
      for (int64_t e = 0; e < c.head_dim; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < c.n; ++j) {
          acc += s[j] / sum * Bf16BitsToFloat(c.v[j * c.stride + h * c.head_dim + e]);
        }
        out[(i * c.heads + h) * c.head_dim + e] = acc;
      }
    }
  }
  return out;
}

std::vector<uint16_t> RunSdpa(const Case& c, SdpaRounding rounding, ThreadPool* pool) {
  const int64_t width = c.heads * c.head_dim;
  std::vector<uint16_t> out(c.n * width);
  std::vector<float> ws(VisionSdpaWorkspaceFloats(c.n, c.heads, c.head_dim, pool));
  VisionSdpaParams p;
  p.patches = c.n;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.q = c.q.data();
  p.k = c.k.data();
  p.v = c.v.data();
  p.qkv_stride = c.stride;
  p.out = out.data();
  p.out_stride = width;
  p.rounding = rounding;
  p.workspace = ws.data();
  p.workspace_floats = ws.size();
  const absl::Status s = VisionSdpaCpu(p, pool);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(VisionSdpaTest, MatchesDoubleReferenceWithinOneBf16Step) {
  // Scale 2 makes the softmax peaked (scores of a few units), scale 0.3 nearly uniform.
  for (float scale : {0.3f, 2.0f}) {
    const Case c = RandomCase(37, 3, 16, scale, 7);
    const std::vector<double> ref = ReferenceAttention(c);
    const std::vector<uint16_t> got = RunSdpa(c, SdpaRounding::kNone, nullptr);
    int64_t exact = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double g = Bf16BitsToFloat(got[i]);
      // fp32 math then one bf16 rounding: within one bf16 step (2^-7 relative) of the exact value.
      EXPECT_LE(std::abs(g - ref[i]), std::abs(ref[i]) * 0x1p-7 + 1e-6) << i << " scale " << scale;
      exact += got[i] == FloatToBf16Bits(static_cast<float>(ref[i]));
    }
    // Almost every element is the correctly rounded value.
    EXPECT_GT(exact, static_cast<int64_t>(got.size() * 95 / 100)) << "scale " << scale;
  }
}

TEST(VisionSdpaTest, RoundedVariantsStayClose) {
  const Case c = RandomCase(29, 2, 8, 1.5f, 11);
  const std::vector<double> ref = ReferenceAttention(c);
  for (SdpaRounding r :
       {SdpaRounding::kProbabilitiesBf16, SdpaRounding::kScoresAndProbabilitiesBf16}) {
    const std::vector<uint16_t> got = RunSdpa(c, r, nullptr);
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err2 += std::pow(Bf16BitsToFloat(got[i]) - ref[i], 2);
      ref2 += ref[i] * ref[i];
    }
    EXPECT_LT(std::sqrt(err2 / ref2), 0.02) << static_cast<int>(r);
    EXPECT_GT(std::sqrt(err2 / ref2), 0.0) << static_cast<int>(r);
  }
}

TEST(VisionSdpaTest, HandCheckableCases) {
  // Identical keys: uniform attention, the output is the mean of the values (exact in bf16 here).
  Case c{
      4, 1, 4, 4, std::vector<uint16_t>(16), std::vector<uint16_t>(16), std::vector<uint16_t>(16)};
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t e = 0; e < 4; ++e) {
      c.q[t * 4 + e] = FloatToBf16Bits(static_cast<float>(t - e));
      c.k[t * 4 + e] = FloatToBf16Bits(1.0f);
      c.v[t * 4 + e] = FloatToBf16Bits(static_cast<float>(t * 4 + e));  // mean over t: 6 + e
    }
  }
  std::vector<uint16_t> got = RunSdpa(c, SdpaRounding::kNone, nullptr);
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(Bf16BitsToFloat(got[t * 4 + e]), 6.0f + e);
  }
  // One key aligned with every query and far larger: all weight on its value row.
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t e = 0; e < 4; ++e) {
      c.q[t * 4 + e] = FloatToBf16Bits(8.0f);
      c.k[t * 4 + e] = FloatToBf16Bits(t == 2 ? 8.0f : 0.0f);
    }
  }
  got = RunSdpa(c, SdpaRounding::kNone, nullptr);
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(Bf16BitsToFloat(got[t * 4 + e]), 8.0f + e);
  }
}

TEST(VisionSdpaTest, PoolSizeDoesNotChangeBits) {
  const Case c = RandomCase(23, 4, 8, 1.0f, 3);
  const std::vector<uint16_t> serial = RunSdpa(c, SdpaRounding::kNone, nullptr);
  for (size_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(RunSdpa(c, SdpaRounding::kNone, &pool), serial) << threads;
  }
}

TEST(VisionSdpaTest, RejectsBadParams) {
  const Case c = RandomCase(5, 2, 4, 1.0f, 1);
  std::vector<uint16_t> out(5 * 8);
  std::vector<float> ws(VisionSdpaWorkspaceFloats(5, 2, 4, nullptr));
  auto good = [&] {
    VisionSdpaParams p;
    p.patches = 5;
    p.heads = 2;
    p.head_dim = 4;
    p.q = c.q.data();
    p.k = c.k.data();
    p.v = c.v.data();
    p.qkv_stride = c.stride;
    p.out = out.data();
    p.out_stride = 8;
    p.workspace = ws.data();
    p.workspace_floats = ws.size();
    return p;
  };
  EXPECT_TRUE(VisionSdpaCpu(good(), nullptr).ok());
  std::vector<VisionSdpaParams> bad(7, good());
  bad[0].patches = 0;
  bad[1].head_dim = -1;
  bad[2].k = nullptr;
  bad[3].qkv_stride = 7;
  bad[4].out_stride = 7;
  bad[5].workspace_floats = ws.size() - 1;
  bad[6].rounding = static_cast<SdpaRounding>(9);
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_EQ(VisionSdpaCpu(bad[i], nullptr).code(), absl::StatusCode::kInvalidArgument) << i;
  }
}

}  // namespace
}  // namespace flashserve::model::vit
