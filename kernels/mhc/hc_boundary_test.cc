// The site boundary's host side (hc_boundary.h): ValidateHcBoundary's links between the three
// ops' params (every mismatch named, nothing written), HcBoundaryCpu equal to its three CPU bodies
// run by hand, and the shapes HcBoundaryFuses gives the fused kernel.
#include "kernels/mhc/hc_boundary.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mhc/mhc_test_util.h"

namespace flashserve::kernels {
namespace {

constexpr int kS = kMhcStreams;

// Buffers of a 2-token, D = 16 boundary with hc_post.
struct Small {
  static constexpr int64_t kT = 2, kD = 16;
  std::vector<uint16_t> residual, streams, f, collapsed, normed, weight;
  std::vector<float> pre, post, comb;
  Small() {
    std::mt19937_64 rng(3);
    residual = mhc_test::RandomBf16(kT * kS * kD, 1.0, rng);
    streams.assign(residual.size(), 0);
    f = mhc_test::RandomBf16(kT * kD, 1.0, rng);
    collapsed.assign(kT * kD, 0);
    normed.assign(kT * kD, 0);
    weight = mhc_test::RandomBf16(kD, 1.0, rng);
    std::uniform_real_distribution<float> u(0.1f, 1.0f);
    for (int i = 0; i < kT * kS; ++i) pre.push_back(u(rng)), post.push_back(2 * u(rng));
    for (int i = 0; i < kT * kS * kS; ++i) comb.push_back(u(rng));
  }
  HcBoundaryParams Params() {
    HcBoundaryParams p;
    p.has_post = true;
    p.post = {kT,          kD,          f.data(),       kD,     residual.data(), kS * kD,
              post.data(), comb.data(), streams.data(), kS * kD};
    p.pre = {kT, kD, streams.data(), kS * kD, pre.data(), collapsed.data(), kD};
    p.norm.rows = kT;
    p.norm.cols = kD;
    p.norm.x = collapsed.data();
    p.norm.x_stride = kD;
    p.norm.weight_bf16 = weight.data();
    p.norm.eps = 1e-6f;
    p.norm.out = normed.data();
    p.norm.out_stride = kD;
    return p;
  }
};

void ExpectInvalid(const HcBoundaryParams& p, const std::string& field) {
  const absl::Status s = ValidateHcBoundary(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s.message();
}

TEST(HcBoundaryTest, ValidationNamesEveryBrokenLink) {
  Small b;
  ASSERT_TRUE(ValidateHcBoundary(b.Params()).ok());
  HcBoundaryParams p = b.Params();
  p.pre.x = b.residual.data();  // the collapse must read hc_post's output
  ExpectInvalid(p, "pre.x");
  p = b.Params();
  p.norm.x = b.f.data();
  ExpectInvalid(p, "norm.x");
  p = b.Params();
  p.norm.rows = 1;
  ExpectInvalid(p, "norm.rows/cols");
  p = b.Params();
  p.norm.out = b.streams.data() + 8;
  ExpectInvalid(p, "norm.out");
  p = b.Params();
  p.pre.out = b.f.data();
  p.norm.x = b.f.data();
  ExpectInvalid(p, "pre.out");
  p = b.Params();
  p.post.tokens = 1;
  p.pre.tokens = 2;
  ExpectInvalid(p, "post.tokens/dim");
  p = b.Params();
  p.norm.eps = 0.0f;  // the ops' own checks still run
  ExpectInvalid(p, "eps");
  for (const int64_t n : {-1, 3, 16}) {
    p = b.Params();
    p.cluster_ctas = n;
    ExpectInvalid(p, "cluster_ctas");
  }
  for (const int64_t n : {0, 1, 2, 4, 8}) {
    p = b.Params();
    p.cluster_ctas = n;
    EXPECT_TRUE(ValidateHcBoundary(p).ok()) << n;
    p.pre.tokens = kHcBoundaryClusterAutoTokens + 1;  // past the automatic rule's range
    EXPECT_EQ(HcBoundaryClusterCtas(p), n > 0 ? n : 1) << n;
    p.pre.tokens = kHcBoundaryClusterAutoTokens;
    EXPECT_EQ(HcBoundaryClusterCtas(p), n > 0 ? n : kHcBoundaryClusterAutoCtas) << n;
  }
  // Without hc_post the streams are only read: the collapse may take any stream tensor.
  p = b.Params();
  p.has_post = false;
  p.pre.x = b.residual.data();
  EXPECT_TRUE(ValidateHcBoundary(p).ok());
  // Nothing is written by a rejected call.
  p = b.Params();
  p.norm.rows = 1;
  EXPECT_FALSE(HcBoundaryCpu(p, nullptr).ok());
  EXPECT_EQ(b.normed, std::vector<uint16_t>(b.normed.size(), 0));
  EXPECT_EQ(b.streams, std::vector<uint16_t>(b.streams.size(), 0));
}

TEST(HcBoundaryTest, CpuIsTheThreeBodiesInOrder) {
  Small a, b;
  ASSERT_TRUE(HcBoundaryCpu(a.Params(), nullptr).ok());
  const HcBoundaryParams p = b.Params();
  ASSERT_TRUE(HcPostCpu(p.post, nullptr).ok());
  ASSERT_TRUE(HcPreCpu(p.pre, nullptr).ok());
  ASSERT_TRUE(RmsNormCpu(p.norm, nullptr).ok());
  EXPECT_EQ(a.streams, b.streams);
  EXPECT_EQ(a.collapsed, b.collapsed);
  EXPECT_EQ(a.normed, b.normed);
  EXPECT_NE(a.normed, a.collapsed);
}

TEST(HcBoundaryTest, FusesOnlyWhereTheKernelApplies) {
  // Addresses are never dereferenced here: only their alignment matters.
  auto at = [](uintptr_t a) { return reinterpret_cast<uint16_t*>(a); };
  auto params = [&](int64_t tokens, int64_t dim) {
    HcBoundaryParams p;
    p.has_post = true;
    p.post = {tokens,  dim,     at(0x10000), dim,         at(0x20000),
              4 * dim, nullptr, nullptr,     at(0x30000), 4 * dim};
    p.pre = {tokens, dim, at(0x30000), 4 * dim, nullptr, at(0x40000), dim};
    p.norm.rows = tokens;
    p.norm.cols = dim;
    p.norm.x = at(0x40000);
    p.norm.x_stride = dim;
    p.norm.weight_bf16 = at(0x50000);
    p.norm.out = at(0x60000);
    p.norm.out_stride = dim;
    return p;
  };
  EXPECT_TRUE(HcBoundaryFuses(params(1, 5120)));
  EXPECT_TRUE(HcBoundaryFuses(params(kHcBoundaryMaxTokens, 1032)));
  EXPECT_TRUE(HcBoundaryFuses(params(1, kHcBoundaryMaxDim)));
  EXPECT_FALSE(HcBoundaryFuses(params(kHcBoundaryMaxTokens + 1, 5120)));
  EXPECT_FALSE(HcBoundaryFuses(params(1, 1024)));  // RmsNorm's warp-per-row split
  EXPECT_FALSE(HcBoundaryFuses(params(1, kHcBoundaryMaxDim + 8)));
  EXPECT_FALSE(HcBoundaryFuses(params(1, 5124)));  // D % 8 != 0
  HcBoundaryParams p = params(1, 5120);
  p.norm.weight_bf16 = nullptr;
  p.norm.weight_f32 = reinterpret_cast<const float*>(at(0x50000));
  EXPECT_FALSE(HcBoundaryFuses(p));
  p = params(1, 5120);
  p.post.f = at(0x10008);
  EXPECT_FALSE(HcBoundaryFuses(p));
  p = params(2, 5120);
  p.norm.out_stride = 5124;
  EXPECT_FALSE(HcBoundaryFuses(p));
  p = params(1, 5120);
  p.has_post = false;
  p.post.f = at(0x10008);  // unused without hc_post
  EXPECT_TRUE(HcBoundaryFuses(p));
}

}  // namespace
}  // namespace flashserve::kernels
