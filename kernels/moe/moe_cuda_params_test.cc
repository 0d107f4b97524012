// The host side of the CUDA launchers, runnable without a GPU: params validation (what every
// launcher runs first: bad fields are rejected with a message naming them), the workspace
// size, the tile-size choice, and the premises the GPU tests rely on (deterministic weights,
// exact-arithmetic inputs, the correctly rounded SwiGLU reference). The device layouts' host
// tests are in moe_cuda_layout_test.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/formats/bf16.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_cuda_internal.h"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

using moe_test::LayerSpec;
using moe_test::WeightKind;

// Stand-in "device" buffers: validation only looks at null-ness and alignment.
alignas(256) uint8_t g_buf[4096];

MoeCudaWeights GoodWeights() { return moe_test::StandInCudaWeights(g_buf); }

void ExpectInvalid(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field << ": " << s;
  EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s;
}

TEST(MoeCudaParamsTest, WeightsValidation) {
  EXPECT_TRUE(Validate(GoodWeights()).ok());
  MoeCudaWeights w = GoodWeights();
  w.n_experts = kMoeCudaMaxExperts + 1;
  ExpectInvalid(Validate(w), "n_experts");
  w = GoodWeights();
  w.dim = 192;  // not a multiple of 128
  ExpectInvalid(Validate(w), "dim");
  w = GoodWeights();
  w.inter = 0;
  ExpectInvalid(Validate(w), "inter");
  w = GoodWeights();
  w.w3_scale = nullptr;
  ExpectInvalid(Validate(w), "w3_scale");
  w = GoodWeights();
  w.w2 = g_buf + 8;
  ExpectInvalid(Validate(w), "w2 must be 16-byte aligned");
  w = GoodWeights();
  w.w1_scale = g_buf + 2;
  ExpectInvalid(Validate(w), "w1_scale must be 4-byte aligned");
  w = GoodWeights();
  w.code_order = MoeFp4CodeOrder::kCheckpoint;  // the default: uploaded but not converted
  ExpectInvalid(Validate(w), "code_order must be kDevice");
}

MoeCudaParams GoodLayer(const MoeCudaWeights* w) {
  MoeCudaParams p;
  p.weights = w;
  p.options.top_k = 2;
  p.m = 3;
  p.logits = reinterpret_cast<const float*>(g_buf);
  p.x = reinterpret_cast<const uint16_t*>(g_buf);
  p.x_stride = 256;
  p.y = reinterpret_cast<uint16_t*>(g_buf + 1024);
  p.y_stride = 264;
  p.workspace = g_buf;
  p.workspace_bytes = *MoeCudaWorkspaceBytes(*w, 3, 2);
  return p;
}

// The GPU shared expert's host checks that need no device weights (the rest, with uploaded
// DeviceFp8Linears, is in moe_gpu_shared_test.cc).
TEST(MoeCudaParamsTest, SharedExpertHostValidation) {
  const MoeCudaWeights w = GoodWeights();
  const MoeSharedExpertWeights none;  // all null
  ExpectInvalid(MoeSharedExpertWorkspaceBytes(none, 1).status(), "w2");
  ExpectInvalid(MoeCudaWorkspaceBytes(w, 3, 2, &none).status(), "w2");
  MoeCudaParams p = GoodLayer(&w);
  p.shared = &none;
  p.shared_y = reinterpret_cast<const uint16_t*>(g_buf);
  p.shared_y_stride = 256;
  ExpectInvalid(Validate(p), "shared and shared_y");
  p.shared_y = nullptr;
  ExpectInvalid(Validate(p), "w2");
  p.m = 0;
  ExpectInvalid(Validate(p), "w2");  // checked even for m = 0

  MoeSharedExpertParams sp;
  ExpectInvalid(Validate(sp), "weights");
  sp.weights = &none;
  ExpectInvalid(Validate(sp), "w2");

  MoeSharedSwiGluParams s;
  s.m = 2;
  s.inter = 8;
  s.g = s.u = reinterpret_cast<const uint16_t*>(g_buf);
  s.a = reinterpret_cast<uint16_t*>(g_buf + 1024);
  s.g_stride = s.u_stride = s.a_stride = 8;
  EXPECT_TRUE(Validate(s).ok());
  MoeSharedSwiGluParams q = s;
  q.m = -1;
  ExpectInvalid(Validate(q), "m");
  q = s;
  q.inter = 0;
  ExpectInvalid(Validate(q), "inter");
  q = s;
  q.u = nullptr;
  ExpectInvalid(Validate(q), "u is null");
  q = s;
  q.a_stride = 7;
  ExpectInvalid(Validate(q), "a_stride");
  q = MoeSharedSwiGluParams{};
  q.inter = 8;
  EXPECT_TRUE(Validate(q).ok());  // m = 0: nothing is read

  // The layer's workspace grows by the shared output [m, D] and the shared workspace.
  using moe_cuda_internal::ComputeMoeCudaLayout;
  const auto plain = ComputeMoeCudaLayout(8, 256, 128, 3, 2);
  const auto with = ComputeMoeCudaLayout(8, 256, 128, 3, 2, 1000);
  EXPECT_GE(with.total, plain.total + 2 * 3 * 256 + 1000);
  EXPECT_GE(with.shared_y, plain.ag + 2 * 3 * 2 * 128);
  EXPECT_GE(with.shared_ws, with.shared_y + 2 * 3 * 256);
  EXPECT_EQ(with.shared_y % 256, 0u);
  EXPECT_EQ(with.shared_ws % 256, 0u);
}

TEST(MoeCudaParamsTest, LayerValidation) {
  const MoeCudaWeights w = GoodWeights();
  EXPECT_TRUE(Validate(GoodLayer(&w)).ok());
  MoeCudaParams p = GoodLayer(&w);
  p.options.top_k = 9;
  ExpectInvalid(Validate(p), "top_k");
  p = GoodLayer(&w);
  p.options.gate_temp = 0.f;
  ExpectInvalid(Validate(p), "gate_temp");
  p = GoodLayer(&w);
  p.x_stride = 260;  // not a multiple of 8
  ExpectInvalid(Validate(p), "x_stride");
  p = GoodLayer(&w);
  p.ring_cut = static_cast<MoeCudaRingCut>(3);
  ExpectInvalid(Validate(p), "ring_cut");
  p.ring_cut = MoeCudaRingCut::kDynamic;
  EXPECT_TRUE(Validate(p).ok());
  p = GoodLayer(&w);
  p.y = reinterpret_cast<uint16_t*>(g_buf + 2);
  ExpectInvalid(Validate(p), "y must be 16-byte aligned");
  p = GoodLayer(&w);
  p.shared_y = reinterpret_cast<const uint16_t*>(g_buf);
  p.shared_y_stride = 128;
  ExpectInvalid(Validate(p), "shared_y_stride");
  p = GoodLayer(&w);
  // An event for shared_y without shared_y (a host pointer stands in: never dereferenced).
  p.shared_y_ready = reinterpret_cast<CUevent_st*>(g_buf);
  ExpectInvalid(Validate(p), "shared_y_ready");
  p.shared_y = reinterpret_cast<const uint16_t*>(g_buf);
  p.shared_y_stride = 256;
  EXPECT_TRUE(Validate(p).ok()) << Validate(p);
  p = GoodLayer(&w);
  const uint8_t image[3] = {0, 1, 0};
  p.is_image = image;
  ExpectInvalid(Validate(p), "gate_bias_vl");
  p = GoodLayer(&w);
  p.workspace_bytes -= 1;
  ExpectInvalid(Validate(p), "workspace");
  p = GoodLayer(&w);
  p.gemm_k_step = 64;
  ExpectInvalid(Validate(p), "gemm_k_step");
  p.gemm_k_step = 256;  // I = 128 is not a multiple of 256
  ExpectInvalid(Validate(p), "gemm_k_step");
  p.gemm_k_step = 128;
  EXPECT_TRUE(Validate(p).ok());
  p = GoodLayer(&w);
  p.logits = nullptr;
  ExpectInvalid(Validate(p), "logits");
  p = GoodLayer(&w);
  p.m = 0;
  p.logits = nullptr;
  p.workspace = nullptr;
  EXPECT_TRUE(Validate(p).ok()) << "m = 0 is a no-op";
  p = GoodLayer(&w);
  p.weights = nullptr;
  ExpectInvalid(Validate(p), "weights");
  p = GoodLayer(&w);
  p.down_gemm = MoeCudaGemm::kStream16;  // only kAuto or kWgmmaRs
  ExpectInvalid(Validate(p), "down_gemm");
  p.down_gemm = MoeCudaGemm::kWgmmaRs;
  EXPECT_TRUE(Validate(p).ok()) << Validate(p);
  p = GoodLayer(&w);
  for (const int64_t rows : {0, 32, 48, 64, 80, 96, 128}) {
    p.rs_tile_rows = rows;
    EXPECT_TRUE(Validate(p).ok()) << rows << ": " << Validate(p);
  }
  for (const int64_t rows : {-1, 16, 40, 112, 256}) {
    p.rs_tile_rows = rows;
    ExpectInvalid(Validate(p), "rs_tile_rows");
  }
  p = GoodLayer(&w);
  for (const int64_t slots : {0, 1, 4, 8, 100}) {
    p.rs_min_slots_per_expert = slots;
    EXPECT_TRUE(Validate(p).ok()) << slots << ": " << Validate(p);
  }
  p.rs_min_slots_per_expert = -1;
  ExpectInvalid(Validate(p), "rs_min_slots_per_expert");
}

// down_gemm kWgmmaRs changes the down GEMM only where another GEMM, not the TMA ring, runs the
// up projection (E 384 top-6: the ring up to 256 tokens, RS from 512).
// MoeCudaParams::hc_post / hc_post_ready and MoeCombineParams::hc_post (session 77): y becomes
// optional with hc_post; each hc_post field is checked and named.
TEST(MoeCudaParamsTest, HcPostValidation) {
  const MoeCudaWeights w = GoodWeights();
  alignas(256) static uint8_t hbuf[32768];  // never dereferenced: only addresses are checked
  MoeHcPost h;
  h.post = reinterpret_cast<const float*>(hbuf + 16384);
  h.comb = reinterpret_cast<const float*>(hbuf + 16640);
  h.residual = reinterpret_cast<const uint16_t*>(hbuf);  // 3 rows: bytes [0, 6144)
  h.residual_stride = 1024;                              // 4 streams of D = 256
  h.out = reinterpret_cast<uint16_t*>(hbuf + 8192);      // bytes [8192, 14368)
  h.out_stride = 1032;
  MoeCudaParams p = GoodLayer(&w);
  p.hc_post = h;
  EXPECT_TRUE(Validate(p).ok()) << Validate(p);
  p.y = nullptr;
  EXPECT_TRUE(Validate(p).ok()) << "hc_post without y: " << Validate(p);
  p.hc_post.post = nullptr;
  ExpectInvalid(Validate(p), "hc_post.post is null");
  p.hc_post = h;
  p.hc_post.comb = reinterpret_cast<const float*>(hbuf + 16644);
  ExpectInvalid(Validate(p), "hc_post.comb must be 16-byte aligned");
  p.hc_post = h;
  p.hc_post.residual_stride = 1020;  // below 4·D
  ExpectInvalid(Validate(p), "hc_post.residual_stride");
  p.hc_post = h;
  p.hc_post.out = reinterpret_cast<uint16_t*>(hbuf);  // in place needs the same stride
  ExpectInvalid(Validate(p), "hc_post.out_stride");
  p.hc_post.out_stride = 1024;
  EXPECT_TRUE(Validate(p).ok()) << "in place: " << Validate(p);
  p.hc_post.out = reinterpret_cast<uint16_t*>(hbuf + 16);  // inside residual's rows
  ExpectInvalid(Validate(p), "hc_post.out overlaps hc_post.residual");
  p.hc_post = h;
  p.y = reinterpret_cast<uint16_t*>(hbuf + 10240);  // inside out's rows
  p.y_stride = 256;
  ExpectInvalid(Validate(p), "hc_post.out overlaps y");
  p = GoodLayer(&w);
  p.hc_post_ready = reinterpret_cast<CUevent_st*>(hbuf);  // never dereferenced
  ExpectInvalid(Validate(p), "hc_post_ready");
  p.hc_post = h;
  EXPECT_TRUE(Validate(p).ok()) << Validate(p);
  p = GoodLayer(&w);
  p.y = nullptr;
  ExpectInvalid(Validate(p), "y is null");

  MoeCombineParams c;
  c.m = 3;
  c.top_k = 2;
  c.dim = 256;
  c.expert_ids = reinterpret_cast<const int32_t*>(g_buf);
  c.token_slot = reinterpret_cast<const int32_t*>(g_buf);
  c.ye = reinterpret_cast<const uint16_t*>(g_buf);
  ExpectInvalid(Validate(c), "y is null");
  c.hc_post = h;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c);
  c.hc_post.out_stride = 1028;  // not a multiple of 8
  ExpectInvalid(Validate(c), "hc_post.out_stride");
}

TEST(MoeCudaParamsTest, DownRsAfterOtherUp) {
  constexpr MoeCudaGemm kRs = MoeCudaGemm::kWgmmaRs, kAuto = MoeCudaGemm::kAuto;
  EXPECT_TRUE(MoeCudaDownRsAfterOtherUp(511, 6, 384, kAuto, kRs));  // kStream16 up
  EXPECT_TRUE(MoeCudaDownRsAfterOtherUp(384, 6, 384, kAuto, kRs));  // kStream up
  EXPECT_FALSE(MoeCudaDownRsAfterOtherUp(511, 6, 384, kAuto, kAuto));
  EXPECT_FALSE(MoeCudaDownRsAfterOtherUp(512, 6, 384, kAuto, kRs));   // RS up already
  EXPECT_FALSE(MoeCudaDownRsAfterOtherUp(1280, 6, 384, kAuto, kRs));  // RS up already
  EXPECT_FALSE(MoeCudaDownRsAfterOtherUp(256, 6, 384, kAuto, kRs));   // the TMA ring
  EXPECT_FALSE(MoeCudaDownRsAfterOtherUp(1024, 6, 384, kRs, kRs));
  // Forced: the ring past its slots streams (kStream), so it takes RS down; the others do.
  EXPECT_TRUE(MoeCudaDownRsAfterOtherUp(1024, 6, 384, MoeCudaGemm::kStreamRing, kRs));
  EXPECT_FALSE(MoeCudaDownRsAfterOtherUp(64, 6, 384, MoeCudaGemm::kStreamRing, kRs));
  for (const MoeCudaGemm g : {MoeCudaGemm::kTiled, MoeCudaGemm::kStream, MoeCudaGemm::kStream16,
                              MoeCudaGemm::kStream32, MoeCudaGemm::kWgmma}) {
    EXPECT_TRUE(MoeCudaDownRsAfterOtherUp(64, 6, 384, g, kRs)) << static_cast<int>(g);
  }
}

TEST(MoeCudaParamsTest, StageValidation) {
  MoePermuteParams pp;
  pp.m = 2;
  pp.n_experts = 8;
  pp.top_k = 2;
  pp.dim = 256;
  ExpectInvalid(Validate(pp), "expert_ids");
  pp.tile_rows = 24;
  ExpectInvalid(Validate(pp), "tile_rows");
  pp.tile_rows = 16;
  pp.top_k = 17;
  ExpectInvalid(Validate(pp), "top_k");

  const MoeCudaWeights w = GoodWeights();
  MoeExpertUpParams up;
  up.weights = &w;
  up.slots = 4;
  ExpectInvalid(Validate(up), "offsets");
  const int32_t dummy[2] = {0, 0};
  up.offsets = up.tiles = up.num_tiles = dummy;
  up.k_step = 512;
  ExpectInvalid(Validate(up), "k_step");
  up.k_step = 256;  // D = 256
  ExpectInvalid(Validate(up), "xg");
  up.weights = nullptr;
  ExpectInvalid(Validate(up), "weights");
  MoeExpertDownParams down;
  down.weights = &w;
  down.slots = 0;
  EXPECT_TRUE(Validate(down).ok());
  down.slots = -1;
  ExpectInvalid(Validate(down), "slots");
  down.slots = 4;
  down.offsets = down.tiles = down.num_tiles = dummy;
  down.k_step = 256;  // K = I = 128
  ExpectInvalid(Validate(down), "k_step");

  MoeCombineParams cp;
  cp.m = 1;
  cp.top_k = 2;
  cp.dim = 256;
  ExpectInvalid(Validate(cp), "expert_ids");

  MoeRouteParams rp;
  rp.m = 1;
  rp.n_experts = 2000;
  rp.options.top_k = 2;
  ExpectInvalid(moe_cuda_internal::ValidateMoeRouteCuda(rp), "n_experts");
  rp.n_experts = 8;
  ExpectInvalid(moe_cuda_internal::ValidateMoeRouteCuda(rp), "logits");
  const uint8_t image[1] = {1};
  rp.is_image = image;
  ExpectInvalid(moe_cuda_internal::ValidateMoeRouteCuda(rp), "bias_vl");
}

// The stage params' `stream` is set for these (MoeCuda and the bench derive it so).
bool IsWideStream(MoeCudaGemm g) {
  return g == MoeCudaGemm::kStream16 || g == MoeCudaGemm::kStream32;
}

TEST(MoeCudaParamsTest, WorkspaceAndTileRows) {
  const MoeCudaWeights w = GoodWeights();
  size_t prev = 0;
  for (int64_t m : {0, 1, 7, 100, 1000}) {
    auto bytes = MoeCudaWorkspaceBytes(w, m, 2);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_GE(*bytes, prev);
    // Gathered rows / expert outputs and the SwiGLU activations dominate.
    EXPECT_GE(*bytes, static_cast<size_t>(m * 2 * (2 * 256 + 2 * 128)));
    prev = *bytes;
  }
  EXPECT_FALSE(MoeCudaWorkspaceBytes(w, -1, 2).ok());
  EXPECT_FALSE(MoeCudaWorkspaceBytes(w, 1, 0).ok());
  // kAuto: the register-sourced GEMM from 8 slots per expert on average (512 tokens at E 384
  // top-6), whatever max(D, I); below it, where max(D, I) fits the streaming GEMM, its TMA-ring
  // form up to 4 slots per expert, 8-row tiles up to 6 (or where 16-row tiles do not fit), 16-row
  // tiles above; where it does not fit, the tiled GEMM (16-row tiles below 8 slots per expert).
  EXPECT_EQ(MoeCudaTileRows(1, 6, 384), 8);
  // The TMA ring from one token up to 4 slots per expert (MoeCudaRingMaxSlots: 1,536 at E 384).
  EXPECT_EQ(MoeCudaRingMaxSlots(384), 1536);
  EXPECT_EQ(MoeCudaChooseGemm(1, 6, 384), MoeCudaGemm::kStreamRing);
  EXPECT_EQ(MoeCudaChooseGemm(2, 6, 384), MoeCudaGemm::kStreamRing);
  EXPECT_EQ(MoeCudaChooseGemm(256, 6, 384), MoeCudaGemm::kStreamRing);
  EXPECT_EQ(MoeCudaTileRows(256, 6, 384), 8);
  EXPECT_EQ(MoeCudaChooseGemm(257, 6, 384), MoeCudaGemm::kStream);
  EXPECT_EQ(MoeCudaChooseGemm(768, 2, 384), MoeCudaGemm::kStreamRing);
  EXPECT_EQ(MoeCudaChooseGemm(769, 2, 384), MoeCudaGemm::kStream);
  EXPECT_EQ(MoeCudaChooseGemm(16, 2, 8), MoeCudaGemm::kStreamRing);
  EXPECT_EQ(MoeCudaChooseGemm(17, 2, 8), MoeCudaGemm::kStream);
  EXPECT_EQ(MoeCudaChooseGemm(2, 6, 384, MoeCudaGemm::kAuto, kMoeCudaStreamMaxK + 128),
            MoeCudaGemm::kTiled);
  EXPECT_EQ(MoeCudaChooseGemm(2, 6, 384, MoeCudaGemm::kStream), MoeCudaGemm::kStream);
  EXPECT_EQ(MoeCudaTileRows(256, 6, 384, MoeCudaGemm::kAuto, 5120), 8);
  EXPECT_EQ(MoeCudaTileRows(256, 6, 384, MoeCudaGemm::kAuto, kMoeCudaStreamMaxK + 128), 16);
  EXPECT_EQ(MoeCudaChooseGemm(256, 6, 384, MoeCudaGemm::kAuto, kMoeCudaStreamMaxK + 128),
            MoeCudaGemm::kTiled);
  EXPECT_EQ(MoeCudaTileRows(384, 6, 384), 8);
  EXPECT_EQ(MoeCudaChooseGemm(384, 6, 384), MoeCudaGemm::kStream);
  EXPECT_EQ(MoeCudaTileRows(385, 6, 384), 16);
  EXPECT_EQ(MoeCudaChooseGemm(385, 6, 384), MoeCudaGemm::kStream16);
  EXPECT_TRUE(IsWideStream(MoeCudaChooseGemm(511, 6, 384, MoeCudaGemm::kAuto, 5120)));
  EXPECT_EQ(MoeCudaChooseGemm(511, 6, 384), MoeCudaGemm::kStream16);
  // Where 16-row tiles do not fit, 8-row ones stream up to the RS GEMM's threshold.
  EXPECT_EQ(MoeCudaChooseGemm(511, 6, 384, MoeCudaGemm::kAuto, kMoeCudaStream16MaxK + 128),
            MoeCudaGemm::kStream);
  EXPECT_EQ(MoeCudaChooseGemm(511, 6, 384, MoeCudaGemm::kAuto, kMoeCudaStreamMaxK + 128),
            MoeCudaGemm::kTiled);
  EXPECT_EQ(MoeCudaTileRows(511, 6, 384, MoeCudaGemm::kAuto, kMoeCudaStreamMaxK + 128), 16);
  // The RS GEMM from 8 slots per expert, whatever max(D, I), on 32-row tiles up to 20 slots per
  // expert (1,280 tokens), 64-row ones up to 40 (2,560), 80-row ones up to 64 (4,096), 96-row
  // ones up to 80 (5,120), then 128-row tiles.
  for (const int64_t max_k :
       {int64_t{0}, int64_t{5120}, kMoeCudaStream16MaxK + 128, kMoeCudaStreamMaxK + 128}) {
    EXPECT_EQ(MoeCudaChooseGemm(512, 6, 384, MoeCudaGemm::kAuto, max_k), MoeCudaGemm::kWgmmaRs)
        << max_k;
    EXPECT_EQ(MoeCudaChooseGemm(4096, 6, 384, MoeCudaGemm::kAuto, max_k), MoeCudaGemm::kWgmmaRs)
        << max_k;
  }
  EXPECT_EQ(MoeCudaChooseGemm(1024, 6, 384), MoeCudaGemm::kWgmmaRs);
  EXPECT_EQ(MoeCudaTileRows(512, 6, 384), kMoeCudaRsNarrowTileRows);
  EXPECT_EQ(MoeCudaTileRows(1280, 6, 384), kMoeCudaRsNarrowTileRows);
  EXPECT_EQ(MoeCudaTileRows(1281, 6, 384), kMoeCudaRsMidTileRows);
  EXPECT_EQ(MoeCudaTileRows(2560, 6, 384), kMoeCudaRsMidTileRows);
  EXPECT_EQ(MoeCudaTileRows(2561, 6, 384), kMoeCudaRs80TileRows);
  EXPECT_EQ(MoeCudaTileRows(4096, 6, 384), kMoeCudaRs80TileRows);
  EXPECT_EQ(MoeCudaTileRows(4097, 6, 384), kMoeCudaRsWideTileRows);
  EXPECT_EQ(MoeCudaTileRows(5120, 6, 384), kMoeCudaRsWideTileRows);
  EXPECT_EQ(MoeCudaTileRows(5121, 6, 384), kMoeCudaWgmmaTileRows);
  EXPECT_EQ(MoeCudaTileRows(4096, 6, 384, MoeCudaGemm::kAuto, kMoeCudaStreamMaxK + 128),
            kMoeCudaRs80TileRows);
  EXPECT_EQ(MoeCudaTileRows(1, 6, 384, MoeCudaGemm::kWgmma), kMoeCudaWgmmaTileRows);
  EXPECT_EQ(MoeCudaTileRows(512, 6, 384, MoeCudaGemm::kWgmma), kMoeCudaWgmmaTileRows);
  EXPECT_EQ(MoeCudaTileRows(1, 6, 384, MoeCudaGemm::kWgmmaRs), kMoeCudaRsNarrowTileRows);
  EXPECT_EQ(MoeCudaTileRows(4096, 6, 384, MoeCudaGemm::kWgmmaRs), kMoeCudaRs80TileRows);
  EXPECT_EQ(MoeCudaTileRows(5120, 6, 384, MoeCudaGemm::kWgmmaRs), kMoeCudaRsWideTileRows);
  EXPECT_EQ(MoeCudaTileRows(8192, 6, 384, MoeCudaGemm::kWgmmaRs), kMoeCudaWgmmaTileRows);
  // On a device of less DRAM bandwidth per SM-cycle (the H100: 12.8 B against the H200's 18.8)
  // from 4 slot rows per expert (256 tokens), the TMA ring below.
  EXPECT_EQ(MoeCudaRsMinSlotsPerExpertFor(12.8), kMoeCudaWgmmaMinSlotsPerExpertLowBandwidth);
  EXPECT_EQ(MoeCudaRsMinSlotsPerExpertFor(10.0), kMoeCudaWgmmaMinSlotsPerExpertLowBandwidth);
  EXPECT_EQ(MoeCudaRsMinSlotsPerExpertFor(18.8), kMoeCudaWgmmaMinSlotsPerExpert);
  EXPECT_EQ(MoeCudaRsMinSlotsPerExpertFor(kMoeCudaRsLowBandwidthBytesPerSmCycle),
            kMoeCudaWgmmaMinSlotsPerExpert);
  EXPECT_EQ(MoeCudaRsMinSlotsPerExpertFor(0.0), kMoeCudaWgmmaMinSlotsPerExpert);  // unknown
  EXPECT_EQ(MoeCudaRsMinSlotsPerExpertFor(-1.0), kMoeCudaWgmmaMinSlotsPerExpert);
  constexpr int64_t kLow = kMoeCudaWgmmaMinSlotsPerExpertLowBandwidth;
  EXPECT_EQ(MoeCudaChooseGemm(256, 6, 384, MoeCudaGemm::kAuto, 5120, kLow), MoeCudaGemm::kWgmmaRs);
  EXPECT_EQ(MoeCudaChooseGemm(255, 6, 384, MoeCudaGemm::kAuto, 5120, kLow),
            MoeCudaGemm::kStreamRing);
  EXPECT_EQ(MoeCudaChooseGemm(256, 6, 384, MoeCudaGemm::kAuto, 5120), MoeCudaGemm::kStreamRing);
  EXPECT_EQ(MoeCudaChooseGemm(384, 6, 384, MoeCudaGemm::kAuto, 5120), MoeCudaGemm::kStream);
  EXPECT_EQ(MoeCudaChooseGemm(384, 6, 384, MoeCudaGemm::kAuto, 5120, kLow), MoeCudaGemm::kWgmmaRs);
  EXPECT_EQ(MoeCudaTileRows(256, 6, 384, MoeCudaGemm::kAuto, 5120, kLow), kMoeCudaRsNarrowTileRows);
  EXPECT_EQ(MoeCudaTileRows(256, 6, 384, MoeCudaGemm::kAuto, 5120), kMoeCudaStreamTileRows);
  // Forced GEMMs ignore it.
  EXPECT_EQ(MoeCudaChooseGemm(4096, 6, 384, MoeCudaGemm::kStream16, 5120, kLow),
            MoeCudaGemm::kStream16);
  // The down GEMM after another up GEMM follows the up GEMM's choice.
  EXPECT_TRUE(
      MoeCudaDownRsAfterOtherUp(384, 6, 384, MoeCudaGemm::kAuto, MoeCudaGemm::kWgmmaRs, 5120));
  EXPECT_FALSE(MoeCudaDownRsAfterOtherUp(384, 6, 384, MoeCudaGemm::kAuto, MoeCudaGemm::kWgmmaRs,
                                         5120, kLow));
  // The same threshold at other expert counts: E 8 top-2 from 32 tokens.
  EXPECT_EQ(MoeCudaChooseGemm(32, 2, 8), MoeCudaGemm::kWgmmaRs);
  EXPECT_EQ(MoeCudaChooseGemm(31, 2, 8), MoeCudaGemm::kStream16);
  EXPECT_EQ(MoeCudaChooseGemm(32, 2, 8, MoeCudaGemm::kAuto, kMoeCudaStream16MaxK + 128),
            MoeCudaGemm::kWgmmaRs);
  EXPECT_EQ(MoeCudaChooseGemm(1, 6, 384, MoeCudaGemm::kWgmmaRs), MoeCudaGemm::kWgmmaRs);
  // Forced: the tiled GEMM keeps its own rule, the streaming GEMM is 8 at any size.
  EXPECT_EQ(MoeCudaTileRows(1, 6, 384, MoeCudaGemm::kTiled), 16);
  EXPECT_EQ(MoeCudaTileRows(4096, 6, 384, MoeCudaGemm::kTiled), 64);
  EXPECT_EQ(MoeCudaTileRows(4096, 6, 384, MoeCudaGemm::kStream), 8);
  EXPECT_EQ(MoeCudaTileRows(1, 6, 384, MoeCudaGemm::kStream16), 16);
  EXPECT_EQ(MoeCudaTileRows(4096, 6, 384, MoeCudaGemm::kStream16), 16);
  EXPECT_EQ(MoeCudaTileRows(1, 6, 384, MoeCudaGemm::kStream32), 32);
  EXPECT_STREQ(MoeCudaGemmName(MoeCudaGemm::kStream32), "streaming 32-row");
  EXPECT_STREQ(MoeCudaGemmName(MoeCudaGemm::kStreamRing), "streaming ring");
  EXPECT_STREQ(MoeCudaGemmName(static_cast<MoeCudaGemm>(8)), "unknown");
  EXPECT_EQ(MoeCudaTileRows(1, 6, 384, MoeCudaGemm::kStreamRing), 8);
  EXPECT_EQ(MoeCudaTileRows(4096, 6, 384, MoeCudaGemm::kStreamRing), 8);
  EXPECT_TRUE(IsWideStream(MoeCudaChooseGemm(1, 6, 384, MoeCudaGemm::kStream32)));
  for (MoeCudaGemm g : {MoeCudaGemm::kTiled, MoeCudaGemm::kStream, MoeCudaGemm::kWgmma,
                        MoeCudaGemm::kWgmmaRs, MoeCudaGemm::kStream16, MoeCudaGemm::kStream32}) {
    EXPECT_EQ(MoeCudaChooseGemm(700, 6, 384, g), g);  // forced: as given
    EXPECT_STRNE(MoeCudaGemmName(g), "unknown");
  }
}

// The 32-row streaming tiles' activation chunks: whole units, within kMoeStreamActBytes, as few as
// fit; 8- and 16-row tiles take the whole K.
TEST(MoeCudaParamsTest, StreamGemmValidation) {
  MoeCudaWeights w = GoodWeights();
  const int32_t dummy[2] = {0, 0};
  MoeExpertUpParams up;
  up.weights = &w;
  up.slots = 4;
  up.tile_rows = kMoeCudaStreamTileRows;
  up.offsets = up.tiles = up.num_tiles = dummy;
  ExpectInvalid(Validate(up), "xg");  // tile_rows 8 accepted, the next check fires
  MoeExpertDownParams down;
  down.weights = &w;
  down.slots = 4;
  down.tile_rows = kMoeCudaStreamTileRows;
  down.offsets = down.tiles = down.num_tiles = dummy;
  ExpectInvalid(Validate(down), "ag");
  w.dim = kMoeCudaStreamMaxK + 128;  // K of the up projection
  ExpectInvalid(Validate(up), "weights.dim");
  up.tile_rows = 16;
  ExpectInvalid(Validate(up), "xg");
  w.dim = 256;
  w.inter = kMoeCudaStreamMaxK + 128;  // K of the down projection
  ExpectInvalid(Validate(down), "weights.inter");
  down.tile_rows = 12;
  ExpectInvalid(Validate(down), "tile_rows");
  // The 16-row streaming GEMM (`stream` at tile_rows 16): K up to kMoeCudaStream16MaxK; `stream`
  // at other tile rows is refused (8 always streams).
  down.tile_rows = kMoeCudaStream16TileRows;
  down.stream = true;
  ExpectInvalid(Validate(down), "weights.inter");
  w.inter = kMoeCudaStream16MaxK;
  ExpectInvalid(Validate(down), "ag");  // accepted, the next check fires
  down.tile_rows = 64;
  ExpectInvalid(Validate(down), "stream");
  down.tile_rows = kMoeCudaStream32TileRows;  // K up to kMoeCudaStreamMaxK
  ExpectInvalid(Validate(down), "ag");
  down.tile_rows = kMoeCudaStreamTileRows;
  ExpectInvalid(Validate(down), "ag");
  down.stream = false;
  w.inter = kMoeCudaStreamMaxK + 128;
  up.tile_rows = kMoeCudaStream16TileRows;
  up.stream = true;
  w.dim = kMoeCudaStream16MaxK + 128;
  ExpectInvalid(Validate(up), "weights.dim");
  up.stream = false;
  ExpectInvalid(Validate(up), "xg");  // the tiled GEMM takes any K
  w.dim = 256;

  MoeCudaParams p;
  p.weights = &w;
  p.options.top_k = 2;
  p.gemm = MoeCudaGemm::kStream;
  ExpectInvalid(Validate(p), "gemm");
  w.inter = kMoeCudaStream16MaxK + 128;
  p.gemm = MoeCudaGemm::kStream16;
  ExpectInvalid(Validate(p), "gemm");
  w.inter = kMoeCudaStream16MaxK;
  EXPECT_TRUE(Validate(p).ok());  // m = 0
  p.gemm = MoeCudaGemm::kStream32;
  EXPECT_TRUE(Validate(p).ok());
  p.gemm = MoeCudaGemm::kStreamRing;  // as kStream: K <= kMoeCudaStreamMaxK
  w.inter = kMoeCudaStreamMaxK + 128;
  ExpectInvalid(Validate(p), "gemm");
  p.gemm = static_cast<MoeCudaGemm>(8);
  w.inter = 128;
  ExpectInvalid(Validate(p), "gemm");
  p.gemm = MoeCudaGemm::kStreamRing;
  EXPECT_TRUE(Validate(p).ok());  // m = 0
  p.gemm = static_cast<MoeCudaGemm>(-1);
  ExpectInvalid(Validate(p), "gemm");
  p.gemm = MoeCudaGemm::kStream;
  EXPECT_TRUE(Validate(p).ok());  // m = 0
  p.gemm = MoeCudaGemm::kWgmma;
  EXPECT_TRUE(Validate(p).ok());
  p.gemm = MoeCudaGemm::kWgmmaRs;
  EXPECT_TRUE(Validate(p).ok());
}

// The TMA-ring GEMM's stage params: tile_rows 8, any slot count, partials of
// MoeCudaRingPartialBytes (up: 2·I columns, down: D), 16-byte aligned.
TEST(MoeCudaParamsTest, RingGemmValidation) {
  const MoeCudaWeights w = GoodWeights();
  alignas(16) static float partials[4];
  const int32_t dummy[2] = {0, 0};
  MoeExpertUpParams up;
  up.weights = &w;
  up.slots = 4;
  up.tile_rows = kMoeCudaStreamTileRows;
  up.offsets = up.tiles = up.num_tiles = dummy;
  up.ring = true;
  ExpectInvalid(Validate(up), "ring_partials");
  up.ring_partials = partials;
  up.ring_partials_bytes = MoeCudaRingPartialBytes(4, 2 * w.inter) - 1;
  ExpectInvalid(Validate(up), "ring_partials_bytes");
  up.ring_partials_bytes = MoeCudaRingPartialBytes(4, 2 * w.inter);
  ExpectInvalid(Validate(up), "xg");  // the ring accepted, the next check fires
  up.ring_partials = partials + 1;
  ExpectInvalid(Validate(up), "ring_partials");
  up.ring_partials = partials;
  up.tile_rows = 16;
  ExpectInvalid(Validate(up), "ring");
  up.tile_rows = kMoeCudaStreamTileRows;
  up.slots = 4 * MoeCudaRingMaxSlots(w.n_experts);  // any slot count, with its partials
  up.ring_partials_bytes = MoeCudaRingPartialBytes(up.slots, 2 * w.inter) - 1;
  ExpectInvalid(Validate(up), "ring_partials_bytes");
  up.ring_partials_bytes = MoeCudaRingPartialBytes(up.slots, 2 * w.inter);
  ExpectInvalid(Validate(up), "xg");
  MoeExpertDownParams down;
  down.weights = &w;
  down.slots = 4;
  down.tile_rows = kMoeCudaStreamTileRows;
  down.offsets = down.tiles = down.num_tiles = dummy;
  down.ring = true;
  down.ring_partials = partials;
  down.ring_partials_bytes = MoeCudaRingPartialBytes(4, w.dim) - 1;
  ExpectInvalid(Validate(down), "ring_partials_bytes");
  down.ring_partials_bytes = MoeCudaRingPartialBytes(4, w.dim);
  ExpectInvalid(Validate(down), "ag");
  // The cut: kAuto, kStatic or kDynamic; anything else is refused, ring or not.
  for (const int cut : {-1, 3}) {
    up.ring_cut = down.ring_cut = static_cast<MoeCudaRingCut>(cut);
    ExpectInvalid(Validate(up), "ring_cut");
    ExpectInvalid(Validate(down), "ring_cut");
    up.ring = false;
    ExpectInvalid(Validate(up), "ring_cut");
    up.ring = true;
  }
  up.ring_cut = down.ring_cut = MoeCudaRingCut::kDynamic;
  ExpectInvalid(Validate(up), "xg");
  ExpectInvalid(Validate(down), "ag");
  // The workspace holds the partials of min(m·top_k, MoeCudaRingMaxSlots(E)) slots: 2 more slot
  // rows from 1 to 2 tokens at top-2.
  const auto one = MoeCudaWorkspaceBytes(w, 1, 2), two = MoeCudaWorkspaceBytes(w, 2, 2);
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_GE(*one, static_cast<size_t>(MoeCudaRingPartialBytes(2, std::max(2 * w.inter, w.dim))));
  EXPECT_GE(*two - *one,
            static_cast<size_t>(MoeCudaRingPartialBytes(4, std::max(2 * w.inter, w.dim)) -
                                MoeCudaRingPartialBytes(2, std::max(2 * w.inter, w.dim))));
}

TEST(MoeCudaParamsTest, WgmmaGemmTileRowsAccepted) {
  const MoeCudaWeights w = GoodWeights();
  const int32_t dummy[2] = {0, 0};
  MoeExpertUpParams up;
  up.weights = &w;
  up.slots = 4;
  up.tile_rows = kMoeCudaWgmmaTileRows;
  up.offsets = up.tiles = up.num_tiles = dummy;
  ExpectInvalid(Validate(up), "xg");  // tile_rows 128 accepted, the next check fires
  MoeExpertDownParams down;
  down.weights = &w;
  down.slots = 4;
  down.tile_rows = kMoeCudaWgmmaTileRows;
  down.offsets = down.tiles = down.num_tiles = dummy;
  ExpectInvalid(Validate(down), "ag");
  down.tile_rows = 256;
  ExpectInvalid(Validate(down), "tile_rows");
  // The register-sourced wgmma GEMM: tile_rows 128, or 32 / 64 where MoeCudaRsTileRows gives them.
  down.ag = down.ye = reinterpret_cast<uint16_t*>(0x1000);
  down.tile_rows = kMoeCudaWgmmaTileRows;
  down.wgmma_rs = true;
  EXPECT_TRUE(Validate(down).ok());
  down.wgmma_rs_ctas = 3;  // persistent CTAs: 0 = one per SM, or a positive count
  EXPECT_TRUE(Validate(down).ok());
  down.wgmma_rs_ctas = -1;
  ExpectInvalid(Validate(down), "wgmma_rs_ctas");
  down.wgmma_rs_ctas = 0;
  down.tile_rows = 16;
  ExpectInvalid(Validate(down), "wgmma_rs");
  // 32-row tiles where the {16, 32} kernels run (MoeCudaRsTileRows: <= 20 slot rows per expert).
  down.tile_rows = kMoeCudaRsNarrowTileRows;
  EXPECT_TRUE(Validate(down).ok()) << Validate(down);
  down.stream = true;  // one GEMM runs a stage
  ExpectInvalid(Validate(down), "wgmma_rs");
  down.stream = false;
  down.slots = kMoeCudaRsNarrowMaxSlotsPerExpert * w.n_experts + 1;
  ExpectInvalid(Validate(down), "wgmma_rs");
  down.tile_rows = kMoeCudaRsMidTileRows;  // 64-row tiles up to 40 slot rows per expert
  EXPECT_TRUE(Validate(down).ok()) << Validate(down);

  down.slots = kMoeCudaRsMidMaxSlotsPerExpert * w.n_experts + 1;
  ExpectInvalid(Validate(down), "wgmma_rs");
  down.tile_rows = kMoeCudaRsWideTileRows;  // 96-row tiles up to 80 slot rows per expert
  EXPECT_TRUE(Validate(down).ok()) << Validate(down);
  down.slots = kMoeCudaRsWideMaxSlotsPerExpert * w.n_experts + 1;
  ExpectInvalid(Validate(down), "wgmma_rs");
  down.tile_rows = 40;  // no GEMM's height
  down.slots = 4;
  ExpectInvalid(Validate(down), "tile_rows");
  // 96-row tiles only for the register-sourced GEMM (the others' tiles hold <= 64 or 128 rows).
  down.tile_rows = kMoeCudaRsWideTileRows;
  down.wgmma_rs = false;
  ExpectInvalid(Validate(down), "tile_rows");
  // So are 48- and 80-row tiles, which it takes at <= 32 / 64 slot rows per expert.
  for (const int64_t rows : {kMoeCudaRs48TileRows, kMoeCudaRs80TileRows}) {
    down.tile_rows = rows;
    down.wgmma_rs = false;
    ExpectInvalid(Validate(down), ": tile_rows ");  // the field after Invalid's op prefix
    down.wgmma_rs = true;
    down.slots = (rows == kMoeCudaRs48TileRows ? kMoeCudaRs48MaxSlotsPerExpert
                                               : kMoeCudaRs80MaxSlotsPerExpert) *
                 w.n_experts;
    EXPECT_TRUE(Validate(down).ok()) << rows << ": " << Validate(down);
    ++down.slots;
    ExpectInvalid(Validate(down), ": wgmma_rs ");
  }
  down.wgmma_rs = false;
  down.slots = 4;
  down.tile_rows = kMoeCudaStreamTileRows;
  down.stream_row_tiles = 2;
  EXPECT_TRUE(Validate(down).ok());
  down.stream_row_tiles = 3;
  ExpectInvalid(Validate(down), "stream_row_tiles");
  down.stream_row_tiles = -1;
  ExpectInvalid(Validate(down), "stream_row_tiles");
  up.wgmma_rs = true;
  up.tile_rows = 16;
  ExpectInvalid(Validate(up), "wgmma_rs");
  up.tile_rows = kMoeCudaWgmmaTileRows;
  ExpectInvalid(Validate(up), "xg");  // accepted, the next check fires
  MoePermuteParams pp;
  pp.m = 2;
  pp.n_experts = 8;
  pp.top_k = 2;
  pp.dim = 256;
  pp.tile_rows = kMoeCudaWgmmaTileRows;
  ExpectInvalid(Validate(pp), "expert_ids");  // tile_rows accepted
}

// The wgmma GEMM's raw code layout: every row's 4 chunks land on its 4 chunk places, and each
// quarter warp of the decode (threads 8p .. 8p + 7 of 256: row i / 2, block i % 2 of half h,
// chunk 2h + block) reads 8 distinct 16-byte bank groups (128 bytes = all 32 banks).
// The device fill and the host references regenerate the same weights from the hash.
TEST(MoeCudaTestUtilTest, WeightsAreDeterministicAndInRange) {
  LayerSpec s;
  s.kind = WeightKind::kExactArith;
  const auto a = moe_test::GenerateProjection(s, moe_test::kW2, 3);
  const auto b = moe_test::GenerateProjection(s, moe_test::kW2, 3);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
  const auto c = moe_test::GenerateProjection(s, moe_test::kW2, 4);
  EXPECT_NE(a.codes, c.codes);
  EXPECT_EQ(*std::min_element(a.scales.begin(), a.scales.end()), 123);
  EXPECT_EQ(*std::max_element(a.scales.begin(), a.scales.end()), 129);
  std::vector<int> nibbles(16, 0);
  for (uint8_t byte : a.codes) {
    ++nibbles[byte & 0xF];
    ++nibbles[byte >> 4];
  }
  for (int n : nibbles) EXPECT_GT(n, 0);
}

// The GPU tests' exact-arithmetic premise: Σ|x·w| < 2^15 (2^20 units of 2^-5) on the shapes they
// use, and the small integers survive the FP8 QDQ unchanged.
TEST(MoeCudaTestUtilTest, ExactArithmeticPremiseHolds) {
  for (const auto& [dim, inter] :
       {std::pair<int64_t, int64_t>{256, 128}, {640, 384}, {1024, 1280}}) {
    LayerSpec s;
    s.dim = dim;
    s.inter = inter;
    s.kind = WeightKind::kExactArith;
    const auto x = moe_test::SmallIntActivations(4, dim, 16, 5);
    EXPECT_EQ(moe_test::QdqRow(x.data(), dim), std::vector<uint16_t>(x.begin(), x.begin() + dim));
    for (int64_t t = 0; t < 4; ++t) {
      for (int proj : {moe_test::kW1, moe_test::kW3}) {
        EXPECT_LT(moe_test::ExactSumBound(s, proj, t, x.data() + t * dim), 1 << 20);
      }
    }
    const auto a = moe_test::SmallIntActivations(4, inter, 8, 6);
    for (int64_t t = 0; t < 4; ++t) {
      EXPECT_LT(moe_test::ExactSumBound(s, moe_test::kW2, t, a.data() + t * inter), 1 << 20);
    }
  }
}

// The GPU's SwiGLU uses a correctly rounded exp; MoeSwiGluRow uses glibc's expf. They agree on
// every bf16 gate value except where expf is not correctly rounded (one input with this glibc,
// g = 0x1.9cp-4); such a difference is one of the sources the whole-layer tolerance covers.
TEST(MoeCudaTestUtilTest, SwiGluReferenceMatchesCpuOutsideExpRounding) {
  int differ = 0;
  const uint16_t u = formats::FloatToBf16Bits(3.f);
  const float w = 0.75f;
  for (uint32_t g = 0; g < 0x10000; ++g) {
    const uint16_t gb = static_cast<uint16_t>(g);
    if (std::isnan(formats::Bf16BitsToFloat(gb))) continue;
    uint16_t cpu;
    MoeSwiGluRow(&gb, &u, 1, 0.f, &w, &cpu);
    const uint16_t cr = moe_test::SwiGluCr(gb, u, 0.f, &w);
    if (cpu != cr) {
      ++differ;
      const float gv = formats::Bf16BitsToFloat(gb);
      EXPECT_NE(std::exp(-gv), static_cast<float>(std::exp(-static_cast<double>(gv))))
          << "g = " << gv << ": differs without an expf rounding difference";
    }
  }
  EXPECT_LE(differ, 4);
}

TEST(MoeCudaTestUtilTest, CountingSortMatchesMoeCpuOrder) {
  // ids of 4 tokens, top-2 over 4 experts: expert 1 gets tokens 0, 1, 2, 3 (ranks 0, 1, 0, 1).
  const std::vector<int32_t> ids = {1, 0, 3, 1, 1, 2, 2, 1};
  const std::vector<float> wts = {.1f, .2f, .3f, .4f, .5f, .6f, .7f, .8f};
  const auto h = moe_test::CountingSort(ids, wts, 4, 2, 4);
  EXPECT_EQ(h.offsets, (std::vector<int32_t>{0, 1, 5, 7, 8}));
  EXPECT_EQ(h.slot_token, (std::vector<int32_t>{0, 0, 1, 2, 3, 2, 3, 1}));
  EXPECT_EQ(h.slot_weight[1], .1f);
  EXPECT_EQ(h.token_slot[0], 1);
  EXPECT_EQ(moe_test::TileList(h.offsets, 2), (std::vector<int32_t>{0, 0, 1, 1, 1, 3, 2, 5, 3, 7}));
}

}  // namespace
}  // namespace flashserve::kernels
