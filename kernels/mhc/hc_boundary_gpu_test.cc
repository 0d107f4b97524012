// LaunchHcBoundary (hc_boundary.h) against the three launches it replaces (LaunchHcPost,
// LaunchHcPre, LaunchRmsNorm on the same inputs) and against HcBoundaryCpu, bit for bit: the new
// streams, the collapsed row and the normed row, with and without hc_post, in place (streams over
// the residual, the normed row over the collapsed one), padded strides, every register-slot count
// of the fused kernel (D 1032 .. 8192) and the shapes that take the three launches instead
// (D <= 1024, D % 8 != 0, misaligned rows, more than kHcBoundaryMaxTokens tokens); the cluster
// form (cluster_ctas 2 / 4 / 8) likewise. Outputs start
// poisoned, so an element the kernel fails to write (or writes into the padding) is a mismatch.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/base/check.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/mhc/hc_boundary.h"
#include "kernels/mhc/mhc_test_util.h"

namespace flashserve::kernels {
namespace {

using mhc_test::RandomBf16;

constexpr int kS = kMhcStreams;
constexpr uint16_t kPoison = 0xA5A5;

struct Case {
  int64_t tokens, dim, pad, offset;  // pad: elements added to every row stride; offset: to bases
  bool post, post_in_place, norm_in_place;
  bool fuses;           // what HcBoundaryFuses must say
  int64_t cluster = 1;  // HcBoundaryParams::cluster_ctas
};

// Every tensor of one case, host or device: the same layout either way.
template <typename Ptr16, typename PtrF>
struct Tensors {
  Ptr16 residual, streams, f, collapsed, normed, weight;
  PtrF pre, post, comb;
};

template <typename Ptr16, typename PtrF>
HcBoundaryParams ParamsFor(const Case& c, const Tensors<Ptr16, PtrF>& t) {
  const int64_t xs = kS * c.dim + c.pad, fs = c.dim + c.pad;
  HcBoundaryParams p;
  p.has_post = c.post;
  p.post = {c.tokens, c.dim,  t.f + c.offset,       fs, t.residual + c.offset, xs,
            t.post,   t.comb, t.streams + c.offset, xs};
  if (c.post_in_place) p.post.out = t.residual + c.offset;
  const uint16_t* streams = c.post ? p.post.out : t.residual + c.offset;
  p.pre = {c.tokens, c.dim, streams, xs, t.pre, t.collapsed + c.offset, fs};
  p.norm.rows = c.tokens;
  p.norm.cols = c.dim;
  p.norm.x = p.pre.out;
  p.norm.x_stride = fs;
  p.norm.weight_bf16 = t.weight;
  p.norm.eps = 1e-6f;
  p.norm.out = c.norm_in_place ? p.pre.out : t.normed + c.offset;
  p.norm.out_stride = fs;
  p.cluster_ctas = c.cluster;
  return p;
}

std::vector<float> Uniform(int64_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

int64_t FirstDiff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

struct DeviceSet {
  DeviceBuffer residual, streams, f, collapsed, normed;
  Tensors<uint16_t*, float*> t;
};

void Check(const Case& c, uint64_t seed) {
  SCOPED_TRACE(absl::StrFormat(
      "tokens %d dim %d pad %d offset %d post %d in place %d/%d cluster %d", c.tokens, c.dim, c.pad,
      c.offset, c.post, c.post_in_place, c.norm_in_place, c.cluster));
  std::mt19937_64 rng(seed);
  const int64_t n = c.tokens, xs = kS * c.dim + c.pad, fs = c.dim + c.pad;
  const std::vector<uint16_t> residual = RandomBf16(c.offset + n * xs, 1.3, rng);
  const std::vector<uint16_t> f = RandomBf16(c.offset + n * fs, 0.8, rng);
  const std::vector<uint16_t> weight = RandomBf16(c.dim, 1.0, rng);
  const std::vector<float> pre = Uniform(n * kS, 0.0f, 1.0f, rng);
  const std::vector<float> post = Uniform(n * kS, 0.0f, 2.0f, rng);
  const std::vector<float> comb = Uniform(n * kS * kS, 0.0f, 1.0f, rng);
  const std::vector<uint16_t> poison_streams(residual.size(), kPoison);
  const std::vector<uint16_t> poison_rows(f.size(), kPoison);

  // CPU reference.
  std::vector<uint16_t> h_res = residual, h_streams = poison_streams, h_f = f, h_col = poison_rows,
                        h_norm = poison_rows, h_w = weight;
  const Tensors<uint16_t*, const float*> host{h_res.data(), h_streams.data(), h_f.data(),
                                              h_col.data(), h_norm.data(),    h_w.data(),
                                              pre.data(),   post.data(),      comb.data()};
  const HcBoundaryParams hp = ParamsFor(c, host);
  ASSERT_TRUE(HcBoundaryCpu(hp, nullptr).ok());

  DeviceBuffer d_w = ToDevice(weight), d_pre = ToDevice(pre), d_post = ToDevice(post),
               d_comb = ToDevice(comb);
  auto make_set = [&] {
    DeviceSet s;
    s.residual = ToDevice(residual);
    s.streams = ToDevice(poison_streams);
    s.f = ToDevice(f);
    s.collapsed = ToDevice(poison_rows);
    s.normed = ToDevice(poison_rows);
    s.t = {s.residual.get<uint16_t>(),  s.streams.get<uint16_t>(), s.f.get<uint16_t>(),
           s.collapsed.get<uint16_t>(), s.normed.get<uint16_t>(),  d_w.get<uint16_t>(),
           d_pre.get<float>(),          d_post.get<float>(),       d_comb.get<float>()};
    return s;
  };

  // The fused launch (or its fallback, per HcBoundaryFuses).
  DeviceSet fused = make_set();
  const HcBoundaryParams fp = ParamsFor(c, fused.t);
  EXPECT_EQ(HcBoundaryFuses(fp), c.fuses);
  ASSERT_TRUE(LaunchHcBoundary(fp, nullptr).ok());

  // The three launches it stands for.
  DeviceSet three = make_set();
  const HcBoundaryParams tp = ParamsFor(c, three.t);
  if (c.post) {
    ASSERT_TRUE(LaunchHcPost(tp.post, nullptr).ok());
  }
  ASSERT_TRUE(LaunchHcPre(tp.pre, nullptr).ok());
  ASSERT_TRUE(LaunchRmsNorm(tp.norm, nullptr).ok());
  CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<uint16_t>& want_streams = c.post_in_place ? h_res : h_streams;
  auto streams_of = [&](const DeviceSet& s) {
    return ToHost<uint16_t>(c.post_in_place ? s.residual : s.streams, residual.size());
  };
  const std::vector<uint16_t> fused_streams = streams_of(fused), three_streams = streams_of(three);
  EXPECT_EQ(FirstDiff(fused_streams, want_streams), -1) << "streams vs CPU";
  EXPECT_EQ(FirstDiff(three_streams, want_streams), -1) << "streams, three launches vs CPU";
  const std::vector<uint16_t> fc = ToHost<uint16_t>(fused.collapsed, f.size());
  const std::vector<uint16_t> fn = ToHost<uint16_t>(fused.normed, f.size());
  EXPECT_EQ(FirstDiff(fc, h_col), -1) << "collapsed (normed when in place) vs CPU";
  EXPECT_EQ(FirstDiff(fn, h_norm), -1) << "normed vs CPU";
  EXPECT_EQ(FirstDiff(fc, ToHost<uint16_t>(three.collapsed, f.size())), -1) << "vs three launches";
  EXPECT_EQ(FirstDiff(fn, ToHost<uint16_t>(three.normed, f.size())), -1) << "vs three launches";
  if (!c.norm_in_place) {
    // The normed row is not the collapsed one: a kernel that normalised nothing would show here.
    int64_t same = 0;
    for (int64_t t = 0; t < n; ++t) {
      same += std::memcmp(&fc[c.offset + t * fs], &fn[c.offset + t * fs], 2 * c.dim) == 0;
    }
    EXPECT_EQ(same, 0);
  }
}

TEST(HcBoundaryGpuTest, EqualsTheThreeLaunchesAndTheCpuBitForBit) {
  FS_SKIP_WITHOUT_GPU();
  const Case cases[] = {
      // tokens dim pad offset post in-place(post, norm) fuses
      {1, 5120, 0, 0, true, false, false, true},     // the decode shape, 3 slots (last partial)
      {1, 5120, 0, 0, false, false, false, true},    // collapse + norm only
      {3, 5120, 0, 0, true, true, false, true},      // streams over the residual
      {5, 2048, 0, 0, true, false, true, true},      // 1 slot; normed over the collapsed row
      {2, 1032, 8, 0, false, false, false, true},    // 1 slot, 129 chunks; padded strides
      {17, 8192, 8, 0, true, false, false, true},    // 4 slots
      {9, 4096, 0, 0, true, true, true, true},       // 2 slots, both in place
      {256, 5120, 0, 0, true, false, false, true},   // kHcBoundaryMaxTokens
      {257, 5120, 0, 0, true, false, false, false},  // more tokens: three launches
      {4, 1024, 0, 0, true, false, false, false},    // a warp per norm row: three launches
      {3, 5120, 3, 0, true, false, false, false},    // rows not 16-byte aligned
      {3, 5120, 0, 1, false, false, false, false},   // bases not 16-byte aligned
      {2, 8200, 0, 0, true, false, false, false},    // wider than kHcBoundaryMaxDim
  };
  uint64_t seed = 900;
  for (const Case& c : cases) Check(c, seed++);
}

// The cluster form (cluster_ctas 2 / 4 / 8: each CTA its share of the row, the sum of squares
// exchanged through distributed shared memory) against the CPU and the three launches, over
// 1 .. 4 slots per thread, uneven shares (D 1032: 129 chunks), in place, padded strides, and the
// most tokens.
TEST(HcBoundaryGpuTest, ClusterFormsEqualTheCpuBitForBit) {
  FS_SKIP_WITHOUT_GPU();
  uint64_t seed = 1900;
  for (const int64_t n : {2, 4, 8}) {
    const Case cases[] = {
        {1, 5120, 0, 0, true, false, false, true, n},   // the decode shape
        {1, 5120, 0, 0, false, false, false, true, n},  // collapse + norm only
        {3, 5120, 0, 0, true, true, false, true, n},    // streams over the residual
        {5, 2048, 0, 0, true, false, true, true, n},    // normed over the collapsed row
        {2, 1032, 8, 0, false, false, false, true, n},  // 129 chunks: uneven shares
        {17, 8192, 8, 0, true, false, false, true, n},  // n = 2: 4 slots
        {9, 4096, 0, 0, true, true, true, true, n},     // both in place
        {256, 5120, 0, 0, true, false, false, true, n}  // kHcBoundaryMaxTokens
    };
    for (const Case& c : cases) Check(c, seed++);
  }
}

}  // namespace
}  // namespace flashserve::kernels
