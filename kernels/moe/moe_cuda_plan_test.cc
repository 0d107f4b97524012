// The host side of the route / permute shape choice (no GPU needed): MoeCudaRoutePath,
// MoeCudaPlanSort's chunking invariants, the validation of the new fields, the workspace region
// of the multi-block sort's scratch, and a host emulation of the multi-block sort's arithmetic
// (per-block counts, a scan over blocks × experts, per-block bases) against MoeCpu's counting
// sort — the algorithm the kernels implement, checked on the chunkings the launcher uses.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

void ExpectInvalid(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field << ": " << s;
  EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s;
}

TEST(MoeCudaPlanTest, RoutePathByTokens) {
  EXPECT_EQ(MoeCudaRoutePath(1), MoeCudaPath::kSmall);
  EXPECT_EQ(MoeCudaRoutePath(kMoeCudaRouteWarpMinTokens - 1), MoeCudaPath::kSmall);
  EXPECT_EQ(MoeCudaRoutePath(kMoeCudaRouteWarpMinTokens), MoeCudaPath::kLarge);
  EXPECT_EQ(MoeCudaRoutePath(4096), MoeCudaPath::kLarge);
  EXPECT_EQ(MoeCudaRoutePath(4096, MoeCudaPath::kSmall), MoeCudaPath::kSmall);
  EXPECT_EQ(MoeCudaRoutePath(1, MoeCudaPath::kLarge), MoeCudaPath::kLarge);
}

TEST(MoeCudaPlanTest, SortPlanChunksCoverTheSlots) {
  // kAuto: the multi-block sort from the threshold on, and only with scratch.
  EXPECT_EQ(MoeCudaPlanSort(6, MoeCudaPath::kAuto, true).path, MoeCudaPath::kSmall);
  EXPECT_EQ(MoeCudaPlanSort(kMoeCudaSortMultiBlockMinSlots - 1, MoeCudaPath::kAuto, true).path,
            MoeCudaPath::kSmall);
  EXPECT_EQ(MoeCudaPlanSort(kMoeCudaSortMultiBlockMinSlots, MoeCudaPath::kAuto, true).path,
            MoeCudaPath::kLarge);
  EXPECT_EQ(MoeCudaPlanSort(24576, MoeCudaPath::kAuto, false).path, MoeCudaPath::kSmall);
  EXPECT_EQ(MoeCudaPlanSort(24576, MoeCudaPath::kSmall, true).path, MoeCudaPath::kSmall);
  EXPECT_EQ(MoeCudaPlanSort(6, MoeCudaPath::kLarge, true).path, MoeCudaPath::kLarge);
  // 4096 tokens at top-6: 24 chunks of 1024.
  const MoeCudaSortPlan p4096 = MoeCudaPlanSort(4096 * 6, MoeCudaPath::kAuto, true);
  EXPECT_EQ(p4096.chunk, 1024);
  EXPECT_EQ(p4096.blocks, 24);
  for (int64_t slots :
       {int64_t{1}, int64_t{6}, int64_t{1535}, int64_t{1536}, int64_t{1537}, int64_t{6144},
        int64_t{30000}, int64_t{65536}, int64_t{65537}, int64_t{1} << 20, (int64_t{1} << 31) - 1}) {
    SCOPED_TRACE(slots);
    const MoeCudaSortPlan p = MoeCudaPlanSort(slots, MoeCudaPath::kLarge, true);
    ASSERT_EQ(p.path, MoeCudaPath::kLarge);
    EXPECT_GE(p.blocks, 1);
    EXPECT_LE(p.blocks, kMoeCudaSortMaxBlocks);
    EXPECT_EQ(p.chunk % kMoeCudaSortChunkUnit, 0);
    EXPECT_GE(p.blocks * p.chunk, slots);        // every slot has a block
    EXPECT_LT((p.blocks - 1) * p.chunk, slots);  // no empty block
    // The smallest such chunk.
    const int64_t per_block = (slots + kMoeCudaSortMaxBlocks - 1) / kMoeCudaSortMaxBlocks;
    EXPECT_LT(p.chunk, std::max<int64_t>(per_block, 1) + kMoeCudaSortChunkUnit);
  }
}

TEST(MoeCudaPlanTest, PathFieldsAreValidated) {
  alignas(256) static uint8_t buf[256];
  MoePermuteParams pp;
  pp.m = 2;
  pp.n_experts = 8;
  pp.top_k = 2;
  pp.dim = 256;
  pp.path = MoeCudaPath::kLarge;
  ExpectInvalid(Validate(pp), "sort_scratch");
  pp.path = static_cast<MoeCudaPath>(3);
  ExpectInvalid(Validate(pp), "path");
  pp.path = MoeCudaPath::kAuto;
  pp.sort_scratch = reinterpret_cast<int32_t*>(buf + 2);
  ExpectInvalid(Validate(pp), "sort_scratch");

  MoeRouteParams rp;
  rp.m = 1;
  rp.n_experts = 8;
  rp.options.top_k = 2;
  ExpectInvalid(moe_cuda_internal::ValidateMoeRouteCuda(rp, static_cast<MoeCudaPath>(-1)), "path");

  MoeCudaWeights w = moe_test::StandInCudaWeights(buf);
  MoeCudaParams p;
  p.weights = &w;
  p.options.top_k = 2;
  p.route_path = static_cast<MoeCudaPath>(7);
  ExpectInvalid(Validate(p), "route_path");
  p.route_path = MoeCudaPath::kLarge;
  p.sort_path = static_cast<MoeCudaPath>(7);
  ExpectInvalid(Validate(p), "sort_path");
}

// LaunchMoeRoutePermute's contract: each stage valid, one call described by both, m within the
// fused front's limit, the one-block sort, the permute reading the route's outputs.
TEST(MoeCudaPlanTest, FusedFrontValidation) {
  alignas(256) static uint8_t buf[4096];
  int32_t* ids = reinterpret_cast<int32_t*>(buf);
  float* wts = reinterpret_cast<float*>(buf + 512);
  MoeRouteParams rp;
  rp.m = 3;
  rp.n_experts = 8;
  rp.options.top_k = 2;
  rp.logits = reinterpret_cast<const float*>(buf + 1024);
  rp.expert_ids = ids;
  rp.expert_weights = wts;
  MoePermuteParams pp;
  pp.m = 3;
  pp.n_experts = 8;
  pp.top_k = 2;
  pp.dim = 256;
  pp.tile_rows = 8;
  pp.expert_ids = ids;
  pp.expert_weights = wts;
  pp.x = reinterpret_cast<const uint16_t*>(buf + 2048);
  pp.x_stride = 256;
  pp.offsets = pp.slot_token = pp.token_slot = pp.tiles = pp.num_tiles =
      reinterpret_cast<int32_t*>(buf + 3072);
  pp.slot_weight = reinterpret_cast<float*>(buf + 3072);
  pp.xg = reinterpret_cast<uint16_t*>(buf + 3072);
  EXPECT_TRUE(ValidateMoeRoutePermute(rp, pp).ok()) << ValidateMoeRoutePermute(rp, pp);

  MoePermuteParams bad = pp;
  bad.m = 2;
  ExpectInvalid(ValidateMoeRoutePermute(rp, bad), "permute");
  bad = pp;
  bad.top_k = 3;
  ExpectInvalid(ValidateMoeRoutePermute(rp, bad), "permute");
  bad = pp;
  bad.expert_ids = ids + 16;
  ExpectInvalid(ValidateMoeRoutePermute(rp, bad), "expert_ids");
  bad = pp;
  bad.path = MoeCudaPath::kLarge;
  bad.sort_scratch = ids;
  ExpectInvalid(ValidateMoeRoutePermute(rp, bad), "permute.path");
  bad = pp;
  bad.xg = nullptr;
  ExpectInvalid(ValidateMoeRoutePermute(rp, bad), "xg");  // the permute's own checks
  MoeRouteParams big = rp;
  big.m = kMoeCudaFrontMaxTokens + 1;
  bad = pp;
  bad.m = big.m;
  ExpectInvalid(ValidateMoeRoutePermute(big, bad), "m");
  big.m = kMoeCudaFrontMaxTokens;
  bad.m = big.m;
  EXPECT_TRUE(ValidateMoeRoutePermute(big, bad).ok());
  // At E 1024 too (64 KB of scores).
  big.n_experts = bad.n_experts = 1024;
  EXPECT_TRUE(ValidateMoeRoutePermute(big, bad).ok());
  EXPECT_TRUE(MoeCudaFrontFits(kMoeCudaFrontMaxTokens));
  EXPECT_FALSE(MoeCudaFrontFits(kMoeCudaFrontMaxTokens + 1));
  MoeRouteParams no_logits = rp;
  no_logits.logits = nullptr;
  ExpectInvalid(ValidateMoeRoutePermute(no_logits, pp), "logits");  // the route's own checks
}

TEST(MoeCudaPlanTest, WorkspaceHoldsTheSortScratch) {
  for (int64_t e : {int64_t{8}, int64_t{384}, int64_t{1024}}) {
    const auto l = moe_cuda_internal::ComputeMoeCudaLayout(e, 256, 128, 100, 6);
    EXPECT_GE(l.offsets - l.sort_scratch, static_cast<size_t>(MoeCudaSortScratchBytes(e)));
    EXPECT_GT(l.sort_scratch, l.counts);
    EXPECT_EQ(l.sort_scratch % 256, 0u);
  }
}

// The multi-block sort's arithmetic on the host: block b counts its chunk per expert, an
// exclusive scan over blocks gives the slots of e in earlier blocks, and a slot's row is
// offsets[e] + that base + the slots of e before it inside the chunk.
moe_test::HostPermutation EmulateMultiBlockSort(const std::vector<int32_t>& ids,
                                                const std::vector<float>& wts, int64_t m, int64_t k,
                                                int64_t n_experts, const MoeCudaSortPlan& plan) {
  const int64_t slots = m * k;
  std::vector<int32_t> scratch(plan.blocks * n_experts, 0);
  for (int64_t i = 0; i < slots; ++i) ++scratch[(i / plan.chunk) * n_experts + ids[i]];
  moe_test::HostPermutation h;
  h.counts.assign(n_experts, 0);
  for (int64_t e = 0; e < n_experts; ++e) {
    int32_t run = 0;
    for (int64_t b = 0; b < plan.blocks; ++b) {
      const int32_t c = scratch[b * n_experts + e];
      scratch[b * n_experts + e] = run;
      run += c;
    }
    h.counts[e] = run;
  }
  h.offsets.assign(n_experts + 1, 0);
  for (int64_t e = 0; e < n_experts; ++e) h.offsets[e + 1] = h.offsets[e] + h.counts[e];
  h.slot_token.assign(slots, -1);
  h.slot_weight.assign(slots, 0.f);
  h.token_slot.assign(slots, -1);
  for (int64_t b = 0; b < plan.blocks; ++b) {
    std::vector<int32_t> inside(n_experts, 0);
    for (int64_t i = b * plan.chunk; i < std::min(slots, (b + 1) * plan.chunk); ++i) {
      const int32_t e = ids[i];
      const int32_t pos = h.offsets[e] + scratch[b * n_experts + e] + inside[e]++;
      h.slot_token[pos] = static_cast<int32_t>(i / k);
      h.slot_weight[pos] = wts[i];
      h.token_slot[i] = pos;
    }
  }
  return h;
}

TEST(MoeCudaPlanTest, MultiBlockSortArithmeticEqualsTheCountingSort) {
  struct Case {
    int64_t m, k, e;
    int skew;  // 0 uniform, 1 every token on experts 0..k-1 (few experts), 2 all on expert 5
  };
  const Case cases[] = {{1, 6, 384, 0},    {255, 6, 384, 0},  {256, 6, 384, 0},
                        {257, 6, 384, 0},  {1024, 6, 384, 1}, {4096, 6, 384, 0},
                        {5000, 6, 384, 1}, {5000, 1, 8, 2},   {20000, 16, 1024, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "m " << c.m << " k " << c.k << " E " << c.e << " skew " << c.skew);
    std::mt19937 rng(static_cast<uint32_t>(c.m * 7 + c.k));
    std::vector<int32_t> ids(c.m * c.k);
    std::vector<float> wts(c.m * c.k);
    std::vector<int32_t> perm(c.e);
    for (int64_t t = 0; t < c.m; ++t) {
      for (int64_t e = 0; e < c.e; ++e) perm[e] = static_cast<int32_t>(e);
      for (int64_t j = 0; j < c.k; ++j) {
        std::swap(perm[j], perm[j + rng() % (c.e - j)]);
        ids[t * c.k + j] = c.skew == 0 ? perm[j] : c.skew == 1 ? static_cast<int32_t>(j) : 5;
        wts[t * c.k + j] = static_cast<float>(rng() % 1000);
      }
    }
    const auto want = moe_test::CountingSort(ids, wts, c.m, c.k, c.e);
    for (MoeCudaPath path : {MoeCudaPath::kAuto, MoeCudaPath::kLarge}) {
      MoeCudaSortPlan plan = MoeCudaPlanSort(c.m * c.k, path, true);
      if (plan.path != MoeCudaPath::kLarge) continue;
      const auto got = EmulateMultiBlockSort(ids, wts, c.m, c.k, c.e, plan);
      EXPECT_EQ(got.offsets, want.offsets);
      EXPECT_EQ(got.slot_token, want.slot_token);
      EXPECT_EQ(got.slot_weight, want.slot_weight);
      EXPECT_EQ(got.token_slot, want.token_slot);
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels
