// The RoPE inside LaunchSparseAttn (SparseAttnParams::rope; README.md "RoPE inside the
// attention"): with rope_q and rope_out the output is bit for bit that of norm_rope's
// LaunchRope on a copy of q, the attention, and LaunchRope(inverse) on its output, on every body
// that applies it — the wgmma split combine (both forms), the unsplit WgmmaKernel and
// WgmmaWsKernel epilogues, wgmma-ws split, the split-K variant, the row form, a partial head
// group; rope_out alone moves only the last rd dims (and on mma.sync and with a table wider than
// the kernel's it runs LaunchRope after the attention); rope_q where the wgmma family cannot
// take it, or without the caller's cos/sin table (rope_cos_sin), is an error; rope_out without
// the table runs after the attention. Outputs start poisoned.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_gpu_test_util.h"
#include "kernels/attention/attention_test_util.h"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve::kernels {
namespace {

using attention_internal::SparseAttnCudaPath;
using attention_internal::SparseAttnCudaPathFor;
using attention_internal::SparseAttnCudaPathName;
using testing::AttnCase;
using testing::PathOverride;
using testing::ToDevice;

constexpr uint16_t kPoison = 0xFFC1;

// A decode-like list per token: window rows [0, 128) then random compressed rows, ~10 % -1.
AttnCase Decode(int64_t tokens, int64_t heads, uint32_t seed) {
  AttnCase c = testing::RandomCase(tokens, heads, 512, 128 + 4096, 640, 0.1, seed);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < 128; ++e) c.indices[t * 640 + e] = static_cast<int32_t>(e);
  }
  return c;
}

// One case on the device under a path override, with its buffers; Run launches one form.
class DeviceCase {
 public:
  DeviceCase(AttnCase c, const RopeTable& table, int64_t row_window)
      : c_(std::move(c)), table_(table), row_window_(row_window) {
    if (row_window_ >= 0) pools_ = testing::EncodeKvRows(&c_, row_window_);
    positions_.resize(static_cast<size_t>(c_.tokens));
    for (int64_t t = 0; t < c_.tokens; ++t) {
      positions_[t] = t == 2 ? 0 : (t % 2 == 1 ? 65535 - 17 * t : 1000003 + t);
    }
    dq_ = ToDevice(c_.q);
    dkv_ = ToDevice(c_.kv);
    didx_ = ToDevice(c_.indices);
    dsink_ = ToDevice(c_.sink);
    dpos_ = ToDevice(positions_);
    dwin_ = ToDevice(pools_.window);
    dcmp_ = ToDevice(pools_.compressed);
    dws_ = DeviceBuffer(SparseAttnCudaWorkspaceBytes(c_.heads, c_.head_dim));
  }

  const AttnCase& c() const { return c_; }
  // Whether the last Run's attention took the row kernel's cluster merge.
  bool last_cluster() const { return last_cluster_; }

  // The row form with the decode-once scratch (attention.h SparseAttnKvRows::decoded; the default
  // rule decides whether it is used).
  void GiveDecodeScratch() {
    ddecoded_ =
        DeviceBuffer(SparseAttnDecodedBytes(pools_.n_window, pools_.n_compressed, c_.head_dim));
  }

  // separate: LaunchRope on a copy of q before and / or on the output after an attention without
  // rope; otherwise the flags go to the attention, with (cos_sin) the positions' cos/sin table
  // built by LaunchRopeCosSin (SparseAttnParams::rope_cos_sin) or without it (rope_q: an error;
  // rope_out: LaunchRope after the attention). Returns the status of the attention launch.
  absl::Status Run(bool rope_q, bool rope_out, bool separate, std::vector<uint16_t>* out,
                   SparseAttnCudaPath* path, bool cos_sin = true) {
    const size_t n = c_.q.size();
    DeviceBuffer dout = ToDevice(std::vector<uint16_t>(n, kPoison));
    DeviceBuffer dq_rot = ToDevice(c_.q);
    DeviceBuffer dcos_sin(static_cast<size_t>(c_.tokens * table_.rope_dims()) * sizeof(float));
    SparseAttnParams p;
    p.tokens = c_.tokens;
    p.heads = c_.heads;
    p.head_dim = c_.head_dim;
    p.q = dq_.get<uint16_t>();
    p.q_stride = c_.heads * c_.head_dim;
    p.q_head_stride = c_.head_dim;
    p.kv = dkv_.get<uint16_t>();
    p.n_kv = c_.n_kv;
    p.kv_stride = c_.head_dim;
    p.indices = didx_.get<int32_t>();
    p.width = c_.width;
    p.indices_stride = c_.width;
    p.attn_sink = dsink_.get<float>();
    p.softmax_scale = c_.scale;
    p.out = dout.get<uint16_t>();
    p.out_stride = p.q_stride;
    p.out_head_stride = c_.head_dim;
    p.workspace = dws_.get();
    p.workspace_bytes = dws_.bytes();
    if (row_window_ >= 0) {
      testing::SetKvRows(pools_, dwin_.get<uint8_t>(), dcmp_.get<uint8_t>(), &p);
      p.kv_rows.decoded = ddecoded_.get<uint16_t>();  // null unless GiveDecodeScratch
      p.kv_rows.decoded_bytes = ddecoded_.bytes();
      if (p.kv_rows.decoded != nullptr) {  // poisoned (NaN): nothing left from an earlier run
        CUDA_CHECK(cudaMemset(ddecoded_.get(), 0xFF, ddecoded_.bytes()));
      }
    }
    if (separate && rope_q) {
      CHECK_OK(LaunchRope(RopeOf(dq_rot.get<uint16_t>(), false), nullptr));
      p.q = dq_rot.get<uint16_t>();
    }
    if (!separate && (rope_q || rope_out)) {
      p.rope = &table_;
      p.rope_positions = dpos_.get<int64_t>();
      p.rope_q = rope_q;
      p.rope_out = rope_out;
      if (cos_sin) {
        RopeCosSinParams cs;
        cs.table = &table_;
        cs.tokens = c_.tokens;
        cs.positions = p.rope_positions;
        cs.out = dcos_sin.get<float>();
        CHECK_OK(LaunchRopeCosSin(cs, nullptr));
        p.rope_cos_sin = cs.out;
      }
    }
    *path = SparseAttnCudaPathFor(p);
    last_cluster_ = attention_internal::SparseAttnMergesInCluster(p);
    const absl::Status st = LaunchSparseAttn(p, nullptr);
    if (!st.ok()) return st;
    if (separate && rope_out) CHECK_OK(LaunchRope(RopeOf(p.out, true), nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    out->resize(n);
    dout.CopyToHost(out->data(), n * sizeof(uint16_t));
    return absl::OkStatus();
  }

 private:
  RopeParams RopeOf(uint16_t* x, bool inverse) const {
    RopeParams r;
    r.table = &table_;
    r.tokens = c_.tokens;
    r.heads = c_.heads;
    r.head_dim = c_.head_dim;
    r.positions = dpos_.get<int64_t>();
    r.x = x;
    r.x_stride = c_.heads * c_.head_dim;
    r.x_head_stride = c_.head_dim;
    r.out = x;
    r.out_stride = r.x_stride;
    r.out_head_stride = c_.head_dim;
    r.inverse = inverse;
    return r;
  }

  AttnCase c_;
  const RopeTable& table_;
  int64_t row_window_;
  testing::KvRowPools pools_;
  std::vector<int64_t> positions_;
  DeviceBuffer dq_, dkv_, didx_, dsink_, dpos_, dwin_, dcmp_, dws_, ddecoded_;
  bool last_cluster_ = false;
};

// Fused against separate for the given flags; `rd` for the rope_out-only dims check.
void ExpectFused(DeviceCase& dc, bool rope_q, bool rope_out, int64_t rd, const char* label,
                 SparseAttnCudaPath want = SparseAttnCudaPath::kAuto) {
  std::vector<uint16_t> fused, no_table, separate, plain;
  SparseAttnCudaPath path, unused;
  ASSERT_TRUE(dc.Run(rope_q, rope_out, false, &fused, &path).ok()) << label;
  // Without the cos/sin table: rope_q is an error naming rope_cos_sin; rope_out alone runs after
  // the attention (the same bits).
  const absl::Status no_table_st = dc.Run(rope_q, rope_out, false, &no_table, &unused, false);
  if (rope_q) {
    EXPECT_EQ(no_table_st.code(), absl::StatusCode::kInvalidArgument) << label;
    EXPECT_NE(no_table_st.message().find("rope_cos_sin"), std::string::npos) << label;
    no_table.clear();
  } else {
    ASSERT_TRUE(no_table_st.ok()) << label;
  }
  ASSERT_TRUE(dc.Run(rope_q, rope_out, true, &separate, &unused).ok()) << label;
  ASSERT_TRUE(dc.Run(false, false, false, &plain, &unused).ok()) << label;
  if (want != SparseAttnCudaPath::kAuto) {
    EXPECT_EQ(path, want) << label;
  }
  const AttnCase& c = dc.c();
  int64_t moved_rope = 0, moved_nope = 0;
  for (size_t i = 0; i < fused.size(); ++i) {
    const bool rope_dim = static_cast<int64_t>(i % c.head_dim) >= c.head_dim - rd;
    if (fused[i] != plain[i]) ++(rope_dim ? moved_rope : moved_nope);
  }
  const int64_t diffs = testing::CountBitDiffs(fused, separate);
  std::printf(
      "%-46s q %d out %d path %-12s fused vs separate: %ld of %zu differ; moved %ld + %ld\n", label,
      rope_q, rope_out, SparseAttnCudaPathName(path), static_cast<long>(diffs), fused.size(),
      static_cast<long>(moved_rope), static_cast<long>(moved_nope));
  EXPECT_EQ(diffs, 0) << label;
  if (!rope_q) {
    EXPECT_EQ(testing::CountBitDiffs(no_table, separate), 0) << label << " (no cos/sin table)";
  }
  // Token 2 sits at position 0 (no rotation); the others move.
  const int64_t rotated_tokens = c.tokens > 2 ? c.tokens - 1 : c.tokens;
  if (!rope_q) {
    EXPECT_EQ(moved_nope, 0) << label;  // the output's RoPE touches the last rd dims only
    EXPECT_GT(moved_rope, rotated_tokens * c.heads * rd / 2) << label;
  } else {
    EXPECT_GT(moved_nope, rotated_tokens * c.heads * (c.head_dim - rd) / 4) << label;
  }
}

TEST(SparseAttnRopeGpuTest, FusedEqualsSeparateOnEveryDefaultBody) {
  FS_SKIP_WITHOUT_GPU();
  const RopeTable table = testing::TextRopeTable(64);
  char label[96];
  // 1, 8: wgmma split + the shared-weight combine; 16: the per-thread combine; 64: wgmma-ws
  // split; 256: wgmma-ws unsplit epilogue.
  for (int64_t tokens : {1, 8, 16, 64, 256}) {
    DeviceCase dc(Decode(tokens, 64, 900 + static_cast<uint32_t>(tokens)), table, -1);
    std::snprintf(label, sizeof(label), "64x512 w640 tokens %ld", static_cast<long>(tokens));
    ExpectFused(dc, true, true, 64, label);
    if (tokens == 1 || tokens == 256) {
      ExpectFused(dc, true, false, 64, label);
      ExpectFused(dc, false, true, 64, label);
    }
  }
}

TEST(SparseAttnRopeGpuTest, FusedEqualsSeparateOnForcedBodies) {
  FS_SKIP_WITHOUT_GPU();
  const RopeTable table = testing::TextRopeTable(64);
  struct Case {
    int64_t tokens, heads;
    SparseAttnCudaPath path;
    const char* label;
  };
  const Case cases[] = {
      {256, 64, SparseAttnCudaPath::kWgmma, "wgmma unsplit epilogue, 256 tokens"},
      {3, 80, SparseAttnCudaPath::kWgmma, "wgmma, 80 heads (a partial group)"},
      {1, 64, SparseAttnCudaPath::kWgmmaSplitK, "wgmma-splitk split, 1 token"},
      {256, 64, SparseAttnCudaPath::kWgmmaSplitK, "wgmma-splitk unsplit, 256 tokens"},
      {8, 64, SparseAttnCudaPath::kWgmmaWs, "wgmma-ws split (forced), 8 tokens"},
  };
  for (const Case& k : cases) {
    PathOverride force(k.path);
    DeviceCase dc(Decode(k.tokens, k.heads, 950 + static_cast<uint32_t>(k.tokens)), table, -1);
    ExpectFused(dc, true, true, 64, k.label, k.path);
  }
}

// Many units per persistent CTA: the default bf16 body, wgmma-ws, takes one CTA per SM, so 512 /
// 1,024 tokens run ~4 / ~8 units a CTA (the tests above stop at 256 tokens: at most 2). Bit for
// bit, with and without the fused RoPE: wgmma-ws against wgmma on the decoded pool, and the row
// form's default body (wgmma) against the bf16 form's default — the check bench_decoder_layer_step
// makes before timing, which printed DIFFER at 1,024 and 4,096 tokens in session 67 (kit s88).
// The cause (session 68): wgmma-ws's producer rotated Q after cp.async.wait_group 0, which does
// not wait for copies that were never committed (Q's are tracked by the block's mbarrier), so
// some rotations read Q before it landed; this test failed at 1,024 tokens with the RoPE (29,049
// values, kit s90) and passes with cp.async.wait_all (kit s91, 5 repeats). The row form with the
// decode-once scratch (the rule decodes once here: 327,680+ entries over 4,224 rows) runs the
// decoded pool's wgmma-ws, bit for bit the row kernel's output.
TEST(SparseAttnRopeGpuTest, ManyUnitsPerCtaBodiesAndFormsAgree) {
  FS_SKIP_WITHOUT_GPU();
  const RopeTable table = testing::TextRopeTable(64);
  for (int64_t tokens : {512, 1024}) {
    AttnCase decoded = Decode(tokens, 64, 1200 + static_cast<uint32_t>(tokens));
    const AttnCase raw = decoded;
    testing::EncodeKvRows(&decoded, 128);  // decoded.kv: the rows' exact decode
    DeviceCase pool(decoded, table, -1), rows(raw, table, 128), once(raw, table, 128);
    once.GiveDecodeScratch();  // 512+ tokens over 4,224 rows: the rule decodes once
    for (bool rope : {false, true}) {
      std::vector<uint16_t> ws, wgmma, row, row_once;
      SparseAttnCudaPath path;
      ASSERT_TRUE(pool.Run(rope, rope, false, &ws, &path).ok());
      EXPECT_EQ(path, SparseAttnCudaPath::kWgmmaWs);
      {
        PathOverride force(SparseAttnCudaPath::kWgmma);
        ASSERT_TRUE(pool.Run(rope, rope, false, &wgmma, &path).ok());
        EXPECT_EQ(path, SparseAttnCudaPath::kWgmma);
      }
      ASSERT_TRUE(rows.Run(rope, rope, false, &row, &path).ok());
      EXPECT_EQ(path, SparseAttnCudaPath::kWgmma);
      ASSERT_TRUE(once.Run(rope, rope, false, &row_once, &path).ok());
      EXPECT_EQ(path, SparseAttnCudaPath::kWgmmaWs);  // the decoded pool's default body
      const int64_t ws_diffs = testing::CountBitDiffs(ws, wgmma);
      const int64_t form_diffs = testing::CountBitDiffs(row, ws);
      const int64_t once_diffs = testing::CountBitDiffs(row_once, row);
      std::printf(
          "%ld tokens, rope %d: wgmma-ws vs wgmma %ld, row form vs bf16 form %ld, decode once "
          "vs row form %ld of %zu differ\n",
          static_cast<long>(tokens), rope, static_cast<long>(ws_diffs),
          static_cast<long>(form_diffs), static_cast<long>(once_diffs), ws.size());
      EXPECT_EQ(ws_diffs, 0) << tokens << " tokens, rope " << rope;
      EXPECT_EQ(form_diffs, 0) << tokens << " tokens, rope " << rope;
      EXPECT_EQ(once_diffs, 0) << tokens << " tokens, rope " << rope;
      if (rope) {  // the output's RoPE after the attention (no cos/sin table), both forms
        ASSERT_TRUE(rows.Run(false, true, false, &row, &path, false).ok());
        ASSERT_TRUE(once.Run(false, true, false, &row_once, &path, false).ok());
        EXPECT_EQ(testing::CountBitDiffs(row_once, row), 0) << tokens << " tokens, rope_out after";
      }
    }
  }
}

// Width 0 (no list entries): every output is ±0 on each wgmma body of the bf16 form forced and
// on both row kernels, with and without the fused RoPE, four runs each. Session 68: WgmmaKernel
// and WgmmaRowsKernel stage their output in the Q tile, and for a unit without blocks nothing
// waited for that unit's Q copies before the +0 stores (a race the helper's audit found); such a
// unit now loads no Q.
TEST(SparseAttnRopeGpuTest, WidthZeroIsZeroOnEveryWgmmaBody) {
  FS_SKIP_WITHOUT_GPU();
  const RopeTable table = testing::TextRopeTable(64);
  const AttnCase c = testing::RandomCase(4, 64, 512, 256, 0, 1.0, 1300);
  DeviceCase pool(c, table, -1), rows(c, table, 128);
  struct Body {
    DeviceCase* dc;
    SparseAttnCudaPath force;
    const char* label;
  };
  const Body bodies[] = {{&pool, SparseAttnCudaPath::kWgmma, "bf16 form, wgmma"},
                         {&pool, SparseAttnCudaPath::kWgmmaSplitK, "bf16 form, wgmma-splitk"},
                         {&pool, SparseAttnCudaPath::kWgmmaWs, "bf16 form, wgmma-ws"},
                         {&rows, SparseAttnCudaPath::kAuto, "row form, default"},
                         {&rows, SparseAttnCudaPath::kWgmmaWs, "row form, wgmma-ws"}};
  for (const Body& b : bodies) {
    PathOverride force(b.force);
    for (bool rope : {false, true}) {
      for (int rep = 0; rep < 4; ++rep) {
        std::vector<uint16_t> out;
        SparseAttnCudaPath path;
        ASSERT_TRUE(b.dc->Run(rope, rope, false, &out, &path).ok()) << b.label;
        // ±0: the output's inverse RoPE may give -0 from +0 (0·cos − 0·sin with cos < 0).
        const int64_t nonzero =
            std::count_if(out.begin(), out.end(), [](uint16_t v) { return (v & 0x7FFF) != 0; });
        ASSERT_EQ(nonzero, 0) << b.label << ", rope " << rope << ", run " << rep << " (path "
                              << SparseAttnCudaPathName(path) << ")";
      }
    }
  }
}

// The row kernel's cluster merge (sparse_attn_wgmma_cluster.cuh) with the fused RoPE: fused equals
// separate (q's RoPE before, the output's inverse after) under the cluster merge and under the
// combine kernel, and the two forms give the same bits — 1, 3 and 8 tokens (10 splits, one
// cluster per token) and 2 tokens of 80 heads (two head groups, the second partly empty).
TEST(SparseAttnRopeGpuTest, RowFormClusterMergeWithRope) {
  FS_SKIP_WITHOUT_GPU();
  using attention_internal::SparseAttnCombineForm;
  const RopeTable table = testing::TextRopeTable(64);
  const std::pair<int64_t, int64_t> cases[] = {{1, 64}, {3, 64}, {8, 64}, {2, 80}};
  for (const auto& [tokens, heads] : cases) {
    DeviceCase dc(Decode(tokens, heads, 1400 + static_cast<uint32_t>(tokens * heads)), table, 128);
    std::vector<uint16_t> out[2];
    const SparseAttnCombineForm forms[2] = {SparseAttnCombineForm::kCluster,
                                            SparseAttnCombineForm::kShared};
    for (int f = 0; f < 2; ++f) {
      testing::CombineFormOverride form(forms[f]);
      char label[96];
      std::snprintf(label, sizeof(label), "row form %ld x %ld heads, %s", static_cast<long>(tokens),
                    static_cast<long>(heads), f == 0 ? "cluster merge" : "combine kernel");
      ExpectFused(dc, true, true, 64, label, SparseAttnCudaPath::kWgmma);
      SparseAttnCudaPath path;
      ASSERT_TRUE(dc.Run(true, true, false, &out[f], &path).ok()) << label;
      EXPECT_EQ(dc.last_cluster(), f == 0) << label;
    }
    EXPECT_EQ(testing::CountBitDiffs(out[0], out[1]), 0) << tokens << " x " << heads;
  }
}

TEST(SparseAttnRopeGpuTest, RowFormFallbacksAndErrors) {
  FS_SKIP_WITHOUT_GPU();
  const RopeTable table = testing::TextRopeTable(64);
  // The default body (wgmma) at 1 and 256 tokens, then the opt-in wgmma-ws row kernel (its
  // producer decodes the rows) at 8 (split) and 256 (unsplit epilogue).
  for (int64_t tokens : {1, 256}) {
    DeviceCase dc(Decode(tokens, 64, 990 + static_cast<uint32_t>(tokens)), table, 128);
    ExpectFused(dc, true, true, 64, tokens == 1 ? "row form, 1 token" : "row form, 256 tokens",
                SparseAttnCudaPath::kWgmma);
  }
  for (int64_t tokens : {8, 256}) {
    PathOverride force(SparseAttnCudaPath::kWgmmaWs);
    DeviceCase dc(Decode(tokens, 64, 991 + static_cast<uint32_t>(tokens)), table, 128);
    ExpectFused(dc, true, true, 64,
                tokens == 8 ? "row form wgmma-ws (forced), 8 tokens"
                            : "row form wgmma-ws (forced), 256 tokens",
                SparseAttnCudaPath::kWgmmaWs);
  }
  std::vector<uint16_t> out;
  SparseAttnCudaPath path;
  {
    // 80 heads: without rope_q the default is mma.sync; with it, wgmma (a partial last group).
    DeviceCase dc(Decode(3, 80, 996), table, -1);
    ASSERT_TRUE(dc.Run(false, false, false, &out, &path).ok());
    EXPECT_EQ(path, SparseAttnCudaPath::kMmaSync);
    ASSERT_TRUE(dc.Run(true, true, false, &out, &path).ok());
    EXPECT_EQ(path, SparseAttnCudaPath::kWgmma);
  }
  {
    // mma.sync: rope_out runs LaunchRope after the attention; rope_q is an error.
    PathOverride force(SparseAttnCudaPath::kMmaSync);
    DeviceCase dc(Decode(8, 64, 997), table, -1);
    ExpectFused(dc, false, true, 64, "mma.sync (rope_out after), 8 tokens",
                SparseAttnCudaPath::kMmaSync);
    const absl::Status st = dc.Run(true, false, false, &out, &path);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("rope_q"), std::string::npos) << st.message();
  }
  // rd 128 is wider than the kernel's table: rope_out runs LaunchRope after; rope_q is an error.
  const RopeTable wide = testing::TextRopeTable(128);
  DeviceCase dc(Decode(2, 64, 999), wide, -1);
  ExpectFused(dc, false, true, 128, "rd 128 (rope_out after), 2 tokens");
  EXPECT_EQ(dc.Run(true, true, false, &out, &path).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flashserve::kernels
