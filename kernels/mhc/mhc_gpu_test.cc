// GPU launchers against the CPU bodies and the double reference: LaunchMhcMixes vs MhcMixesCpu /
// MixesRef (D = 1, 7, 256, 300, 5120; 1 to 4100 tokens; odd strides; fused collapse), the device
// Sinkhorn tail vs MhcSplitSinkhorn on the GPU's own mixes, batch invariance (also across the
// small-batch threshold), the small-batch body == the large-batch body bit for bit, LaunchHcPre /
// LaunchHcPost vs HcPreCpu / HcPostCpu bit for bit (packed, padded, misaligned, in place), and the
// launchers' errors. Outputs start poisoned, so a value the kernel fails to write (or writes into
// the padding) is a mismatch. Each mixes comparison prints what it measured.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/check.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/mhc/cuda/mhc_tc_plan.h"
#include "kernels/mhc/mhc.h"
#include "kernels/mhc/mhc_test_util.h"

namespace flashserve::kernels {
namespace {

using mhc_test::MixesRef;
using mhc_test::RandomBf16;
using mhc_test::RandomSite;
using mhc_test::SiteParams;

constexpr int kS = kMhcStreams;
constexpr uint16_t kPoison = 0xA5A5;

// Tolerances (README.md "CUDA"). The GPU sums each dot product in another order than the CPU:
// |gpu − double| <= kMixRelTol · Σ|x·fn|·r (the CPU body's own bound), |gpu − cpu| <= twice that.
constexpr double kMixRelTol = 2e-6;
// pre/post/comb from the two bodies' mixes (values O(1)).
constexpr double kSplitAbsTol = 1e-5;
// The device tail on the GPU's own mixes vs MhcSplitSinkhorn on the same mixes: identical but
// for glibc expf's misrounded results (~6e-4 of its arguments), each an fp32 ulp.
constexpr double kTailAbsTol = 2e-6;

// A float vector of n poison values (so unwritten outputs show).
std::vector<float> PoisonF(size_t n) {
  std::vector<float> v(n);
  std::memset(v.data(), 0xA5, n * sizeof(float));
  return v;
}

// Index of the first differing element, or -1.
template <typename T>
int64_t FirstDiff(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

std::vector<float> RandomPre(int64_t tokens, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> pre(static_cast<size_t>(tokens * kS));
  for (float& v : pre) v = u(rng);
  return pre;
}

// All outputs of one mixes pass.
struct MixOutputs {
  std::vector<float> pre, post, comb, mixes;
  std::vector<uint16_t> collapsed;
};

struct MixCase {
  int64_t tokens, dim, x_pad;
  bool collapse;
  int64_t coll_pad = 3;  // collapsed stride = dim + coll_pad (8: 16-byte rows, vector stores)
};

MhcMixesParams SiteParamsFor(const MixCase& c, const SiteParams& site) {
  MhcMixesParams p;
  p.tokens = c.tokens;
  p.dim = c.dim;
  p.x_stride = kS * c.dim + c.x_pad;
  p.fn = site.fn.data();
  p.base = site.base.data();
  p.scale = site.scale.data();
  p.collapsed_stride = c.dim + c.coll_pad;
  return p;
}

MixOutputs RunCpu(MhcMixesParams p, const std::vector<uint16_t>& x, const float* pre_in) {
  MixOutputs o{PoisonF(p.tokens * kS), PoisonF(p.tokens * kS), PoisonF(p.tokens * 16),
               PoisonF(p.tokens * kMhcMixes),
               std::vector<uint16_t>(p.tokens * p.collapsed_stride, kPoison)};
  p.x = x.data();
  p.pre = o.pre.data();
  p.post = o.post.data();
  p.comb = o.comb.data();
  p.mixes = o.mixes.data();
  if (pre_in != nullptr) {
    p.pre_in = pre_in;
    p.collapsed = o.collapsed.data();
  }
  CHECK_OK(MhcMixesCpu(p, nullptr));
  return o;
}

// The same pass on the GPU: x, fn, base, scale and pre_in copied to the device; `prepared`: fn
// also prepared by LaunchMhcPrepareFn (fn_frags, into a poisoned buffer).
MixOutputs RunGpu(MhcMixesParams p, const std::vector<uint16_t>& x, const SiteParams& site,
                  const std::vector<float>* pre_in, MhcMixesGpuKernel kernel,
                  bool prepared = false) {
  const size_t n = static_cast<size_t>(p.tokens);
  DeviceBuffer dx = ToDevice(x), dfn = ToDevice(site.fn), dbase = ToDevice(site.base),
               dscale = ToDevice(site.scale);
  DeviceBuffer dpre = ToDevice(PoisonF(n * kS)), dpost = ToDevice(PoisonF(n * kS)),
               dcomb = ToDevice(PoisonF(n * 16)), dmix = ToDevice(PoisonF(n * kMhcMixes));
  DeviceBuffer dcoll = ToDevice(std::vector<uint16_t>(n * p.collapsed_stride, kPoison));
  DeviceBuffer dpre_in = pre_in != nullptr ? ToDevice(*pre_in) : DeviceBuffer();
  const int64_t ws_floats = MhcMixesWorkspaceFloats(p.tokens, p.dim);
  DeviceBuffer ws = ToDevice(PoisonF(static_cast<size_t>(ws_floats)));
  p.x = dx.get<uint16_t>();
  p.fn = dfn.get<float>();
  p.base = dbase.get<float>();
  p.scale = dscale.get<float>();
  p.pre = dpre.get<float>();
  p.post = dpost.get<float>();
  p.comb = dcomb.get<float>();
  p.mixes = dmix.get<float>();
  if (pre_in != nullptr) {
    p.pre_in = dpre_in.get<float>();
    p.collapsed = dcoll.get<uint16_t>();
  }
  DeviceBuffer frags;
  if (prepared) {
    const int64_t bytes = MhcFnFragmentBytes(p.dim);
    frags = ToDevice(PoisonF(static_cast<size_t>(bytes) / sizeof(float)));
    CHECK_OK(LaunchMhcPrepareFn(p.dim, p.fn, frags.get(), bytes, nullptr));
    p.fn_frags = frags.get();
  }
  CHECK_OK(LaunchMhcMixes(p, ws.get<float>(), ws_floats, nullptr, kernel));
  return {ToHost<float>(dpre, n * kS), ToHost<float>(dpost, n * kS), ToHost<float>(dcomb, n * 16),
          ToHost<float>(dmix, n * kMhcMixes), ToHost<uint16_t>(dcoll, n * p.collapsed_stride)};
}

double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - double{b[i]}));
  return m;
}

const char* KernelName(MhcMixesGpuKernel k) {
  switch (k) {
    case MhcMixesGpuKernel::kTensorCore:
      return "tensor-core";
    case MhcMixesGpuKernel::kFp32Fma:
      return "fp32-fma";
    case MhcMixesGpuKernel::kTensorCoreLargeBatch:
      return "tensor-core-large";
    case MhcMixesGpuKernel::kTensorCoreSmallBatch:
      return "tensor-core-small";
    case MhcMixesGpuKernel::kTensorCoreMmaSync:
      return "tensor-core-mma-sync";
  }
  return "?";
}

// kTensorCore takes the small-batch body up to 256 tokens; kTensorCoreLargeBatch keeps the
// large-batch body covered at those sizes.
constexpr MhcMixesGpuKernel kKernels[] = {MhcMixesGpuKernel::kTensorCore,
                                          MhcMixesGpuKernel::kTensorCoreLargeBatch,
                                          MhcMixesGpuKernel::kFp32Fma};

std::string FirstOutputDiff(const MixOutputs& a, const MixOutputs& b);

void CheckMixes(const MixCase& c, uint64_t seed, MhcMixesGpuKernel kernel) {
  SCOPED_TRACE(absl::StrFormat("%s: tokens %d dim %d pad %d%s", KernelName(kernel), c.tokens, c.dim,
                               c.x_pad, c.collapse ? " collapse" : ""));
  std::mt19937_64 rng(seed);
  const SiteParams site = RandomSite(c.dim, 1.0, rng);
  const MhcMixesParams p = SiteParamsFor(c, site);
  const std::vector<uint16_t> x = RandomBf16(c.tokens * p.x_stride, 1.1, rng);
  const std::vector<float> pre_in = RandomPre(c.tokens, rng);
  const MixOutputs cpu = RunCpu(p, x, c.collapse ? pre_in.data() : nullptr);
  const MixOutputs gpu = RunGpu(p, x, site, c.collapse ? &pre_in : nullptr, kernel);

  double worst_ref = 0, worst_cpu = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    double ref[kMhcMixes], mag[kMhcMixes];
    MixesRef(x.data() + t * p.x_stride, c.dim, site.fn.data(), p.norm_eps, ref, mag);
    for (int m = 0; m < kMhcMixes; ++m) {
      const double g = gpu.mixes[t * kMhcMixes + m];
      const double scale = std::max(mag[m], 1e-30);
      ASSERT_LE(std::fabs(g - ref[m]), kMixRelTol * scale) << "token " << t << " mix " << m;
      ASSERT_LE(std::fabs(g - cpu.mixes[t * kMhcMixes + m]), 2 * kMixRelTol * scale)
          << "token " << t << " mix " << m;
      worst_ref = std::max(worst_ref, std::fabs(g - ref[m]) / scale);
      worst_cpu = std::max(worst_cpu, std::fabs(g - cpu.mixes[t * kMhcMixes + m]) / scale);
    }
  }
  const double split =
      std::max({MaxAbs(gpu.pre, cpu.pre), MaxAbs(gpu.post, cpu.post), MaxAbs(gpu.comb, cpu.comb)});
  EXPECT_LE(split, kSplitAbsTol);

  // The device tail on the GPU's own mixes.
  int64_t identical = 0;
  double tail = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    float pre[kS], post[kS], comb[16];
    MhcSplitSinkhorn(&gpu.mixes[t * kMhcMixes], site.base.data(), site.scale.data(),
                     p.sinkhorn_iters, p.hc_eps, pre, post, comb);
    bool same = std::memcmp(pre, &gpu.pre[t * kS], sizeof(pre)) == 0 &&
                std::memcmp(post, &gpu.post[t * kS], sizeof(post)) == 0 &&
                std::memcmp(comb, &gpu.comb[t * 16], sizeof(comb)) == 0;
    identical += same;
    for (int i = 0; i < kS; ++i) {
      tail = std::max({tail, std::fabs(double{pre[i]} - gpu.pre[t * kS + i]),
                       std::fabs(double{post[i]} - gpu.post[t * kS + i])});
    }
    for (int i = 0; i < 16; ++i)
      tail = std::max(tail, std::fabs(double{comb[i]} - gpu.comb[t * 16 + i]));
  }
  EXPECT_LE(tail, kTailAbsTol);
  std::printf(
      "  %s tokens %ld dim %ld: mixes max |gpu-ref|/mag %.2e, |gpu-cpu|/mag %.2e; pre/post/comb "
      "max |gpu-cpu| %.2e; tail on gpu mixes: %ld of %ld tokens bit-identical, max diff %.2e\n",
      KernelName(kernel), static_cast<long>(c.tokens), static_cast<long>(c.dim), worst_ref,
      worst_cpu, split, static_cast<long>(identical), static_cast<long>(c.tokens), tail);

  if (c.collapse) {
    const int64_t at = FirstDiff(gpu.collapsed, cpu.collapsed);
    EXPECT_EQ(at, -1) << "collapsed differs at element " << at;
  }
  // The tensor-core bodies with fn prepared once (fn_frags): the same bits.
  if (kernel != MhcMixesGpuKernel::kFp32Fma) {
    const MixOutputs prepared =
        RunGpu(p, x, site, c.collapse ? &pre_in : nullptr, kernel, /*prepared=*/true);
    EXPECT_EQ(FirstOutputDiff(prepared, gpu), "") << "with fn_frags";
  }
}

TEST(MhcGpuTest, MixesMatchCpuAndDoubleReference) {
  FS_SKIP_WITHOUT_GPU();
  // Released D = 5120 (1 / 33 / 300 tokens; 2100 tokens: blocks that span two slices), the tiny
  // fixture's 256 over several tiles per block, a partial slice (300), odd D and strides (scalar
  // loads), D = 1 — for both bodies.
  for (MhcMixesGpuKernel kernel : kKernels) {
    uint64_t seed = 7;
    for (const MixCase& c : std::vector<MixCase>{{1, 5120, 0, false},
                                                 {33, 5120, 0, true},
                                                 {300, 5120, 0, false},
                                                 {2100, 5120, 0, true},
                                                 {2100, 5120, 0, true, 8},
                                                 {4100, 256, 0, true},
                                                 {70, 300, 8, true},
                                                 {9, 7, 3, true},
                                                 {5, 5120, 1, true},
                                                 {3, 1, 0, true}}) {
      CheckMixes(c, seed++, kernel);
    }
  }
}

// A token's outputs do not depend on the batch around it (tile slot, token count).
// For the tensor-core body, 600 tokens at D = 5120 put tokens in every tile slot, in blocks that
// span two slices, and in the last, partial tile.
void CheckBatchInvariance(const MixCase& c, MhcMixesGpuKernel kernel,
                          std::initializer_list<int64_t> probe) {
  SCOPED_TRACE(absl::StrFormat("%s: tokens %d", KernelName(kernel), c.tokens));
  std::mt19937_64 rng(99);
  const SiteParams site = RandomSite(c.dim, 1.0, rng);
  const MhcMixesParams p = SiteParamsFor(c, site);
  const std::vector<uint16_t> x = RandomBf16(c.tokens * p.x_stride, 1.1, rng);
  const std::vector<float> pre_in = RandomPre(c.tokens, rng);
  const MixOutputs all = RunGpu(p, x, site, c.collapse ? &pre_in : nullptr, kernel);
  for (int64_t t : probe) {
    MhcMixesParams one = p;
    one.tokens = 1;
    const std::vector<uint16_t> x1(x.begin() + t * p.x_stride, x.begin() + (t + 1) * p.x_stride);
    const std::vector<float> pre1(pre_in.begin() + t * kS, pre_in.begin() + (t + 1) * kS);
    const MixOutputs solo = RunGpu(one, x1, site, c.collapse ? &pre1 : nullptr, kernel);
    EXPECT_EQ(0, std::memcmp(solo.mixes.data(), &all.mixes[t * kMhcMixes], 4 * kMhcMixes)) << t;
    EXPECT_EQ(0, std::memcmp(solo.pre.data(), &all.pre[t * kS], 4 * kS)) << t;
    EXPECT_EQ(0, std::memcmp(solo.post.data(), &all.post[t * kS], 4 * kS)) << t;
    EXPECT_EQ(0, std::memcmp(solo.comb.data(), &all.comb[t * 16], 4 * 16)) << t;
    if (c.collapse) {
      EXPECT_EQ(
          0, std::memcmp(solo.collapsed.data(), &all.collapsed[t * p.collapsed_stride], 2 * c.dim))
          << t;
    }
  }
}

TEST(MhcGpuTest, MixesAreBatchInvariant) {
  FS_SKIP_WITHOUT_GPU();
  for (MhcMixesGpuKernel kernel : kKernels)
    CheckBatchInvariance({37, 5120, 0, true}, kernel, {0, 17, 36});
  // 600 tokens take the large-batch body, the single tokens the small-batch one: invariance
  // across the threshold.
  CheckBatchInvariance({600, 5120, 0, true}, MhcMixesGpuKernel::kTensorCore,
                       {0, 7, 8, 15, 250, 333, 598, 599});
  CheckBatchInvariance({256, 5120, 0, true}, MhcMixesGpuKernel::kTensorCore, {0, 100, 255});
  // The wide block shape (>= 16 units per block, the mixes alone) against single tokens (the
  // small-batch body): X by the TMA unit (aligned, D = 5120), by 4-byte loads with a partial
  // slice (D = 4992, 16-byte rows) and by scalar loads (odd stride).
  CheckBatchInvariance({2100, 5120, 0, false}, MhcMixesGpuKernel::kTensorCore,
                       {0, 15, 16, 1055, 2098, 2099});
  // The same with the fused collapse (the TMA body since session 50), scalar and 16-byte stores.
  CheckBatchInvariance({2100, 5120, 0, true}, MhcMixesGpuKernel::kTensorCore, {0, 17, 2099});
  CheckBatchInvariance({2100, 5120, 0, true, 8}, MhcMixesGpuKernel::kTensorCore, {1, 1056, 2098});
  CheckBatchInvariance({2200, 4992, 8, false}, MhcMixesGpuKernel::kTensorCore, {0, 31, 2199});
  CheckBatchInvariance({2100, 5120, 1, false}, MhcMixesGpuKernel::kTensorCore, {1, 2099});
}

// Where the outputs of two runs first differ ("" if nowhere): the five outputs compared whole.
std::string FirstOutputDiff(const MixOutputs& a, const MixOutputs& b) {
  const struct {
    const char* name;
    int64_t at;
    int64_t per_token;
  } outs[] = {{"mixes", FirstDiff(a.mixes, b.mixes), kMhcMixes},
              {"pre", FirstDiff(a.pre, b.pre), kS},
              {"post", FirstDiff(a.post, b.post), kS},
              {"comb", FirstDiff(a.comb, b.comb), 16}};
  for (const auto& o : outs) {
    if (o.at >= 0) {
      return absl::StrFormat("%s differs first at token %d element %d", o.name, o.at / o.per_token,
                             o.at % o.per_token);
    }
  }
  const int64_t at = FirstDiff(a.collapsed, b.collapsed);
  return at >= 0 ? absl::StrFormat("collapsed differs first at element %d", at) : "";
}

// The small-batch body against the large-batch body, whole buffers bit for bit (README.md
// "CUDA": same products, same chains, same sums), at token counts around the tile size and the
// threshold, the released D, a partial slice, D % 8 != 0 (scalar X) and D % 4 != 0 (scalar fn),
// padded strides, with and without the collapse. Small cases first, so a broken chain order shows
// on one token.
TEST(MhcGpuTest, SmallBatchBodyEqualsLargeBatchBodyBitForBit) {
  FS_SKIP_WITHOUT_GPU();
  uint64_t seed = 40;
  for (const MixCase& c : std::vector<MixCase>{{1, 5120, 0, false},
                                               {1, 5120, 0, true},
                                               {2, 256, 0, true},
                                               {1, 7, 0, false},
                                               {15, 5120, 8, true},
                                               {16, 5120, 0, false},
                                               {17, 300, 0, true},
                                               {33, 5120, 1, true},
                                               {64, 1030, 0, true},
                                               {100, 7, 3, true},
                                               {255, 5120, 0, false},
                                               {256, 5120, 0, true},
                                               {256, 16384, 0, false}}) {
    SCOPED_TRACE(absl::StrFormat("tokens %d dim %d pad %d%s", c.tokens, c.dim, c.x_pad,
                                 c.collapse ? " collapse" : ""));
    std::mt19937_64 rng(seed++);
    const SiteParams site = RandomSite(c.dim, 1.0, rng);
    const MhcMixesParams p = SiteParamsFor(c, site);
    const std::vector<uint16_t> x = RandomBf16(c.tokens * p.x_stride, 1.1, rng);
    const std::vector<float> pre_in = RandomPre(c.tokens, rng);
    const std::vector<float>* pin = c.collapse ? &pre_in : nullptr;
    const MixOutputs small = RunGpu(p, x, site, pin, MhcMixesGpuKernel::kTensorCoreSmallBatch);
    const MixOutputs large = RunGpu(p, x, site, pin, MhcMixesGpuKernel::kTensorCoreLargeBatch);
    const std::string diff = FirstOutputDiff(small, large);
    EXPECT_EQ(diff, "");
    if (!diff.empty() && !small.mixes.empty()) {
      std::printf("  small vs large: %s; token 0 mix 0: small %.9g large %.9g\n", diff.c_str(),
                  small.mixes[0], large.mixes[0]);
    }
    // A capped grid (small_batch_ctas: a CTA walks several items; 1 CTA walks them all).
    if (c.tokens <= 16) {
      for (const int64_t ctas : {int64_t{1}, int64_t{7}, int64_t{40}}) {
        MhcMixesParams q = p;
        q.small_batch_ctas = ctas;
        const MixOutputs capped = RunGpu(q, x, site, pin, MhcMixesGpuKernel::kTensorCoreSmallBatch);
        EXPECT_EQ(FirstOutputDiff(capped, small), "") << "small_batch_ctas " << ctas;
      }
    }
  }
}

// The wgmma body (the large-batch default for the mixes, alone and with the collapse, where X goes
// by the TMA unit) against the mma.sync TMA body it replaces, whole buffers bit for bit
// (mhc_wg_kernel.cuh: same products, chains and sums; the tensor cores' k16 step is the same on
// both instructions): a partial last 64-token tile, padded rows, few units per warpgroup, fn split
// in the kernel and prepared, and 16,384 tokens (several units per warpgroup, blocks straddling
// slices).
TEST(MhcGpuTest, WgmmaBodyEqualsMmaSyncBodyBitForBit) {
  FS_SKIP_WITHOUT_GPU();
  uint64_t seed = 70;
  // The collapse cases run the wgmma body where the build gives it the collapse (the default;
  // FS_MHC_WG_COLLAPSE in mhc_launch.cu), else they compare two mma.sync runs.
  for (const MixCase& c : std::vector<MixCase>{{2100, 5120, 0, false},
                                               {2100, 5120, 8, false},
                                               {1700, 5120, 0, false},
                                               {16384, 5120, 0, false},
                                               {2100, 5120, 0, true},
                                               {2100, 5120, 0, true, 8},
                                               {16384, 5120, 0, true, 8}}) {
    for (bool prepared : {false, true}) {
      SCOPED_TRACE(absl::StrFormat("tokens %d dim %d pad %d%s%s", c.tokens, c.dim, c.x_pad,
                                   c.collapse ? " collapse" : "", prepared ? " prepared" : ""));
      std::mt19937_64 rng(seed++);
      const SiteParams site = RandomSite(c.dim, 1.0, rng);
      const MhcMixesParams p = SiteParamsFor(c, site);
      const std::vector<uint16_t> x = RandomBf16(c.tokens * p.x_stride, 1.1, rng);
      const std::vector<float> pre_in = RandomPre(c.tokens, rng);
      const std::vector<float>* pin = c.collapse ? &pre_in : nullptr;
      const MixOutputs wg = RunGpu(p, x, site, pin, MhcMixesGpuKernel::kTensorCore, prepared);
      const MixOutputs mma =
          RunGpu(p, x, site, pin, MhcMixesGpuKernel::kTensorCoreMmaSync, prepared);
      const std::string diff = FirstOutputDiff(wg, mma);
      EXPECT_EQ(diff, "");
      if (!diff.empty()) {
        std::printf("  wgmma vs mma.sync: %s; token 0 mix 0: wgmma %.9g mma.sync %.9g\n",
                    diff.c_str(), wg.mixes[0], mma.mixes[0]);
      }
    }
  }
}

// The wgmma body's walk (host arithmetic, no device needed): 64-token units split over blocks as
// the tensor-core body's, warpgroup g of G taking units g, g + G, ... of each segment, and warp wl
// of a warpgroup TcWarp::TileOf's tile 4·unit_tile + wl (tile_first 4·(first unit) + wl, 4·G
// warps): every 16-token tile of every slice exactly once, for both block shapes (G = 4, 2).
TEST(MhcGpuTest, WgmmaPartitionCoversEveryTileOnce) {
  for (const int64_t tokens :
       {int64_t{1}, int64_t{63}, int64_t{65}, int64_t{1700}, int64_t{2100}, int64_t{16384}}) {
    for (const int64_t dim : {int64_t{256}, int64_t{5120}}) {
      for (const int sms : {1, 7, 132}) {
        for (const int groups : {4, 2}) {
          const int64_t wg_tiles = mhc_tc::WgTiles(tokens);
          const int64_t units = mhc_tc::WgUnits(tokens, dim);
          const int64_t blocks = mhc_tc::BlocksFor(units, sms);
          const int64_t tiles = 4 * wg_tiles;  // 16-token tiles, the last ones maybe past the end
          std::vector<int> seen(static_cast<size_t>(mhc_tc::Slices(dim) * tiles), 0);
          for (int64_t b = 0; b < blocks; ++b) {
            const int64_t end = mhc_tc::BlockUnitBegin(units, blocks, b + 1);
            for (int64_t u = mhc_tc::BlockUnitBegin(units, blocks, b); u < end;) {
              const int64_t slice = u / wg_tiles;
              const int64_t seg_end = std::min(end, (slice + 1) * wg_tiles);
              for (int g = 0; g < groups; ++g) {
                const int64_t n = mhc_tc::WarpUnits(u, seg_end, g, groups);
                for (int wl = 0; wl < 4; ++wl) {
                  const int64_t tile_first = 4 * (u - slice * wg_tiles + g) + wl;
                  for (int64_t k = 0; k < n; ++k) {
                    const int64_t tile = tile_first + 4 * groups * k;  // TileOf(8 k)
                    ASSERT_LT(tile, tiles);
                    ++seen[static_cast<size_t>(slice * tiles + tile)];
                  }
                }
              }
              u = seg_end;
            }
          }
          for (size_t i = 0; i < seen.size(); ++i) {
            ASSERT_EQ(seen[i], 1) << "tile " << i << " tokens " << tokens << " dim " << dim
                                  << " sms " << sms << " groups " << groups;
          }
        }
      }
    }
  }
  EXPECT_EQ(mhc_tc::WgUnits(16384, 5120), 20 * 256);
  EXPECT_EQ(mhc_tc::WgTiles(2100), 33);
}

// The tensor-core body's work partition (host arithmetic, no device needed): every (slice, tile)
// unit is computed exactly once (per block shape: the walks of 8 and 16 warps), by blocks whose
// loads differ by at most one unit; the wide shape only where every warp has a unit.
TEST(MhcGpuTest, TensorCorePartitionCoversEveryUnitOnce) {
  for (const int64_t tokens : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{256}, int64_t{600},
                               int64_t{1000}, int64_t{16384}}) {
    for (const int64_t dim : {int64_t{1}, int64_t{300}, int64_t{5120}}) {
      for (const int sms : {1, 7, 132}) {
        const int64_t units = mhc_tc::Units(tokens, dim);
        const int64_t tiles = mhc_tc::Tiles(tokens);
        const int64_t slices = mhc_tc::Slices(dim);
        const int64_t even = mhc_tc::BlocksFor(units, sms);
        const int64_t blocks = mhc_tc::SliceAlignedBlocks(units, slices, even);
        ASSERT_GE(blocks, 1);
        ASSERT_LE(blocks, std::min<int64_t>(units, sms));
        // Few units per block and at least a block per slice: a multiple of the slices, so every
        // block stays inside one slice (checked below); otherwise the even split over every SM.
        const bool aligned = units < mhc_tc::kWarpsWide * even && even >= slices;
        EXPECT_EQ(blocks, aligned ? even / slices * slices : even)
            << tokens << " " << dim << " " << sms;
        std::vector<int> seen(static_cast<size_t>(units), 0);
        int64_t most = 0, least = units;
        for (int64_t b = 0; b < blocks; ++b) {
          const int64_t begin = mhc_tc::BlockUnitBegin(units, blocks, b);
          const int64_t end = mhc_tc::BlockUnitBegin(units, blocks, b + 1);
          most = std::max(most, end - begin);
          least = std::min(least, end - begin);
          if (aligned) {
            EXPECT_EQ(begin / tiles, (end - 1) / tiles) << "block " << b << " tokens " << tokens;
          }
          // The kernel's walk: segments cut at slice boundaries, warp w of W takes w, w + W, ...
          // (W = 16 or 8, the wide and narrow block shapes: each walk covers every unit once).
          for (const bool wide : {false, true}) {
            const int warps = mhc_tc::WarpsOf(wide);
            for (int64_t u = begin; u < end;) {
              const int64_t seg_end = std::min(end, (u / tiles + 1) * tiles);
              for (int w = 0; w < warps; ++w) {
                const int64_t n = mhc_tc::WarpUnits(u, seg_end, w, warps);
                for (int64_t i = 0; i < n; ++i) {
                  const int64_t unit = u + w + int64_t{warps} * i;
                  ASSERT_LT(unit, seg_end);
                  ++seen[static_cast<size_t>(unit)];
                }
              }
              u = seg_end;
            }
          }
        }
        EXPECT_LE(most - least, 1) << tokens << " " << dim << " " << sms;
        for (int64_t u = 0; u < units; ++u) {
          ASSERT_EQ(seen[static_cast<size_t>(u)], 2) << "unit " << u << " tokens " << tokens;
        }
      }
    }
  }
  // Wide from 16 units per block, never with the collapse: 2048 tokens (2,560 units on 132 blocks)
  // wide, 512 tokens (640 units) narrow.
  EXPECT_TRUE(mhc_tc::WideFor(mhc_tc::Units(2048, 5120), 132, false));
  EXPECT_FALSE(mhc_tc::WideFor(mhc_tc::Units(2048, 5120), 132, true));
  EXPECT_FALSE(mhc_tc::WideFor(mhc_tc::Units(512, 5120), 132, false));
  EXPECT_TRUE(mhc_tc::WideFor(16 * 132, 132, false));
  EXPECT_FALSE(mhc_tc::WideFor(16 * 132 - 1, 132, false));
  EXPECT_EQ(mhc_tc::Slices(5120), 20);
  EXPECT_EQ(mhc_tc::Units(16384, 5120), 20 * 1024);
  // Slice-aligned grids at D = 5120 on 132 SMs: 256 tokens (320 units) on 120 blocks, 6 per
  // slice; 1 token (20 units) on 20; 16384 tokens keep all 132.
  EXPECT_EQ(mhc_tc::SliceAlignedBlocks(320, 20, 132), 120);
  EXPECT_EQ(mhc_tc::SliceAlignedBlocks(20, 20, 20), 20);
  EXPECT_EQ(mhc_tc::SliceAlignedBlocks(20 * 1024, 20, 132), 132);
  EXPECT_EQ(mhc_tc::SliceAlignedBlocks(40, 64, 40), 40);  // fewer blocks than slices
}

// ---- hc_pre / hc_post --------------------------------------------------------------------------

struct ElemCase {
  int64_t tokens, dim, pad;  // pad: extra elements per row of every tensor (odd: scalar path)
  int64_t offset;            // elements added to every base pointer (odd: misaligned)
};

const ElemCase kElemCases[] = {{1, 5120, 0, 0}, {7, 5120, 0, 0}, {1000, 4096, 8, 0},
                               {9, 5120, 3, 0}, {9, 5120, 0, 1}, {64, 7, 0, 0},
                               {5, 1, 2, 0},    {300, 256, 0, 0}};

void CheckPrePost(const ElemCase& c, uint64_t seed) {
  SCOPED_TRACE(
      absl::StrFormat("tokens %d dim %d pad %d offset %d", c.tokens, c.dim, c.pad, c.offset));
  std::mt19937_64 rng(seed);
  const int64_t xs = kS * c.dim + c.pad, fs = c.dim + c.pad, n = c.tokens;
  std::vector<uint16_t> x = RandomBf16(c.offset + n * xs, 1.3, rng);
  std::vector<uint16_t> f = RandomBf16(c.offset + n * fs, 0.8, rng);
  const std::vector<float> pre = RandomPre(n, rng);
  std::vector<float> post = RandomPre(n, rng), comb = RandomPre(n * 4, rng);
  for (float& v : post) v *= 2.0f;

  // hc_pre.
  std::vector<uint16_t> want(c.offset + n * fs, kPoison);
  CHECK_OK(HcPreCpu({n, c.dim, x.data() + c.offset, xs, pre.data(), want.data() + c.offset, fs},
                    nullptr));
  DeviceBuffer dx = ToDevice(x), dpre = ToDevice(pre),
               dout = ToDevice(std::vector<uint16_t>(want.size(), kPoison));
  ASSERT_TRUE(LaunchHcPre({n, c.dim, dx.get<uint16_t>() + c.offset, xs, dpre.get<float>(),
                           dout.get<uint16_t>() + c.offset, fs},
                          nullptr)
                  .ok());
  const int64_t pre_at = FirstDiff(ToHost<uint16_t>(dout, want.size()), want);
  EXPECT_EQ(pre_at, -1) << "hc_pre differs at element " << pre_at;

  // hc_post out of place, then in place over the residual.
  std::vector<uint16_t> want_post(c.offset + n * xs, kPoison);
  const HcPostParams cpu{
      n,           c.dim,       f.data() + c.offset,         fs, x.data() + c.offset, xs,
      post.data(), comb.data(), want_post.data() + c.offset, xs};
  CHECK_OK(HcPostCpu(cpu, nullptr));
  DeviceBuffer df = ToDevice(f), dpost = ToDevice(post), dcomb = ToDevice(comb);
  DeviceBuffer dres_out = ToDevice(std::vector<uint16_t>(want_post.size(), kPoison));
  HcPostParams gpu{n,
                   c.dim,
                   df.get<uint16_t>() + c.offset,
                   fs,
                   dx.get<uint16_t>() + c.offset,
                   xs,
                   dpost.get<float>(),
                   dcomb.get<float>(),
                   dres_out.get<uint16_t>() + c.offset,
                   xs};
  ASSERT_TRUE(LaunchHcPost(gpu, nullptr).ok());
  const int64_t post_at = FirstDiff(ToHost<uint16_t>(dres_out, want_post.size()), want_post);
  EXPECT_EQ(post_at, -1) << "hc_post differs at element " << post_at;

  std::vector<uint16_t> in_place = x;
  HcPostParams cpu_in = cpu;
  cpu_in.residual = in_place.data() + c.offset;
  cpu_in.out = in_place.data() + c.offset;
  CHECK_OK(HcPostCpu(cpu_in, nullptr));
  gpu.out = dx.get<uint16_t>() + c.offset;
  ASSERT_TRUE(LaunchHcPost(gpu, nullptr).ok());
  const int64_t in_at = FirstDiff(ToHost<uint16_t>(dx, x.size()), in_place);
  EXPECT_EQ(in_at, -1) << "hc_post in place differs at element " << in_at;
}

TEST(MhcGpuTest, HcPreAndHcPostMatchCpuBitForBit) {
  FS_SKIP_WITHOUT_GPU();
  uint64_t seed = 300;
  for (const ElemCase& c : kElemCases) CheckPrePost(c, seed++);
}

// ---- errors (no device needed: the launchers fail before any CUDA call) -----------------------

TEST(MhcGpuTest, LaunchersRejectBadParamsBeforeLaunching) {
  std::mt19937_64 rng(5);
  const SiteParams site = RandomSite(8, 1.0, rng);
  std::vector<uint16_t> x(2 * kS * 8);
  std::vector<float> pre(2 * kS), post(2 * kS), comb(2 * 16), ws(1000);
  MhcMixesParams p = SiteParamsFor({2, 8, 0, false}, site);
  p.x = x.data();
  p.pre = pre.data();
  p.post = post.data();
  p.comb = comb.data();
  EXPECT_EQ(LaunchMhcMixes(p, nullptr, 0, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchMhcMixes(p, nullptr, 0, nullptr, MhcMixesGpuKernel::kFp32Fma).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchMhcMixes(p, ws.data(), MhcMixesSliceWorkspaceFloats(2, 8) - 1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MhcMixesSliceWorkspaceFloats(2, 8), 2 * 25);
  EXPECT_EQ(MhcMixesSmallBatchWorkspaceFloats(2, 8), 2 * (24 * 32 + 1));
  EXPECT_EQ(MhcMixesWorkspaceFloats(2, 8), 2 * (24 * 32 + 1));
  EXPECT_EQ(MhcMixesWorkspaceFloats(1, 5120), 20 * (24 * 32 + 1));
  EXPECT_GE(MhcMixesWorkspaceFloats(1024, 5120), MhcMixesSmallBatchWorkspaceFloats(32, 5120));
  EXPECT_EQ(MhcMixesSmallBatchWorkspaceFloats(257, 5120), 0);
  EXPECT_EQ(MhcMixesSmallBatchWorkspaceFloats(1, 16385), 0);  // 65 slices
  EXPECT_EQ(MhcMixesWorkspaceFloats(16384, 5120), int64_t{16384} * 20 * 25);
  // The small-batch body forced where it does not apply: a workspace below its need (but enough
  // for the large-batch body), and a misaligned one.
  constexpr auto kSmall = MhcMixesGpuKernel::kTensorCoreSmallBatch;
  EXPECT_EQ(
      LaunchMhcMixes(p, ws.data(), MhcMixesSliceWorkspaceFloats(2, 8), nullptr, kSmall).code(),
      absl::StatusCode::kInvalidArgument);
  std::vector<float> big_ws(2000);
  EXPECT_EQ(LaunchMhcMixes(p, big_ws.data() + 1, 1999, nullptr, kSmall).code(),
            absl::StatusCode::kInvalidArgument);
  // A misaligned prepared fn; LaunchMhcPrepareFn's own checks.
  std::vector<float> frags(static_cast<size_t>(MhcFnFragmentBytes(8)) / 4 + 4);
  p.fn_frags = frags.data() + 1;
  EXPECT_EQ(LaunchMhcMixes(p, ws.data(), 1000, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p.fn_frags = nullptr;
  EXPECT_EQ(MhcFnFragmentBytes(8), 147456);
  EXPECT_EQ(MhcFnFragmentBytes(5120), 20 * 147456);
  EXPECT_EQ(MhcFnFragmentBytes(257), 2 * 147456);
  const int64_t fb = MhcFnFragmentBytes(8);
  EXPECT_EQ(LaunchMhcPrepareFn(0, site.fn.data(), frags.data(), fb, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchMhcPrepareFn(8, nullptr, frags.data(), fb, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchMhcPrepareFn(8, site.fn.data(), frags.data(), fb - 16, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchMhcPrepareFn(8, site.fn.data(), frags.data() + 1, fb, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  p.sinkhorn_iters = 0;
  EXPECT_EQ(LaunchMhcMixes(p, ws.data(), 1000, nullptr).code(), absl::StatusCode::kInvalidArgument);

  std::vector<uint16_t> out(2 * 8);
  EXPECT_EQ(LaunchHcPre({2, 8, x.data(), kS * 8 - 1, pre.data(), out.data(), 8}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // x_stride below the row extent
  EXPECT_EQ(LaunchHcPost({2, 8, out.data(), 8, x.data(), kS * 8, post.data(), comb.data(),
                          x.data() + 1, kS * 8},
                         nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // out partially overlaps the residual
}

}  // namespace
}  // namespace flashserve::kernels
