// The output's inverse RoPE fused into LaunchSparseAttn (SparseAttnParams::out_rope; README.md
// "Output RoPE"): bit for bit equal to LaunchSparseAttn without it followed by norm_rope's
// LaunchRope(inverse = true) on the output, on every body that writes the output — the wgmma
// split combine (both forms), the unsplit WgmmaKernel and WgmmaWsKernel epilogues, the split-K
// variant, the row form, a partial head group — and on the unfused fallbacks (mma.sync, a table
// wider than the fused one). Only the last rd dims move, and they do. Outputs start poisoned.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_test_util.h"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve::kernels {
namespace {

using attention_internal::SetSparseAttnCudaPathOverride;
using attention_internal::SparseAttnCudaPath;
using attention_internal::SparseAttnCudaPathFor;
using attention_internal::SparseAttnCudaPathName;
using testing::AttnCase;

constexpr uint16_t kPoison = 0xFFC1;

template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  DeviceBuffer buf(std::max<size_t>(host.size() * sizeof(T), 16));
  if (!host.empty()) buf.CopyFromHost(host.data(), host.size() * sizeof(T));
  return buf;
}

RopeTable MakeTable(int64_t rd) {
  RopeSpec spec;
  spec.rope_dims = rd;
  spec.theta = 160000.0;
  spec.original_seq_len = 65536;
  spec.factor = 16.0;
  return RopeTable::Create(spec, 0).value();
}

// A decode-like list per token: window rows [0, 128) then random compressed rows, ~10 % -1.
AttnCase Decode(int64_t tokens, int64_t heads, uint32_t seed) {
  AttnCase c = testing::RandomCase(tokens, heads, 512, 128 + 4096, 640, 0.1, seed);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < 128; ++e) c.indices[t * 640 + e] = static_cast<int32_t>(e);
  }
  return c;
}

struct Outputs {
  std::vector<uint16_t> fused;     // out_rope set
  std::vector<uint16_t> separate;  // no out_rope, then LaunchRope(inverse)
  std::vector<uint16_t> plain;     // no out_rope
  SparseAttnCudaPath path = SparseAttnCudaPath::kAuto;
};

// Runs the three forms of `c` on the device under `path` (kAuto: the default); the row form
// when `row_window` >= 0 (rows [0, row_window) as window rows, the rest compressed).
Outputs RunForms(AttnCase c, const RopeTable& table, SparseAttnCudaPath path,
                 int64_t row_window = -1) {
  testing::KvRowPools pools;
  if (row_window >= 0) pools = testing::EncodeKvRows(&c, row_window);
  std::vector<int64_t> positions(static_cast<size_t>(c.tokens));
  for (int64_t t = 0; t < c.tokens; ++t) {
    positions[t] = t == 2 ? 0 : (t % 2 == 1 ? 65535 - 17 * t : 1000003 + t);
  }
  DeviceBuffer dq = ToDevice(c.q), dkv = ToDevice(c.kv), didx = ToDevice(c.indices),
               dsink = ToDevice(c.sink), dpos = ToDevice(positions), dwin = ToDevice(pools.window),
               dcmp = ToDevice(pools.compressed);
  DeviceBuffer dws(SparseAttnCudaWorkspaceBytes(c.heads, c.head_dim));
  const size_t n = c.q.size();
  Outputs o;
  SetSparseAttnCudaPathOverride(path);
  auto run = [&](bool rope, bool separate) {
    DeviceBuffer dout = ToDevice(std::vector<uint16_t>(n, kPoison));
    SparseAttnParams p;
    p.tokens = c.tokens;
    p.heads = c.heads;
    p.head_dim = c.head_dim;
    p.q = dq.get<uint16_t>();
    p.q_stride = c.heads * c.head_dim;
    p.q_head_stride = c.head_dim;
    p.kv = dkv.get<uint16_t>();
    p.n_kv = c.n_kv;
    p.kv_stride = c.head_dim;
    p.indices = didx.get<int32_t>();
    p.width = c.width;
    p.indices_stride = c.width;
    p.attn_sink = dsink.get<float>();
    p.softmax_scale = c.scale;
    p.out = dout.get<uint16_t>();
    p.out_stride = p.q_stride;
    p.out_head_stride = c.head_dim;
    p.workspace = dws.get();
    p.workspace_bytes = dws.bytes();
    if (row_window >= 0) testing::SetKvRows(pools, dwin.get<uint8_t>(), dcmp.get<uint8_t>(), &p);
    if (rope) {
      p.out_rope = &table;
      p.out_rope_positions = dpos.get<int64_t>();
    }
    o.path = SparseAttnCudaPathFor(p);
    CHECK_OK(LaunchSparseAttn(p, nullptr));
    if (separate) {
      RopeParams r;
      r.table = &table;
      r.tokens = c.tokens;
      r.heads = c.heads;
      r.head_dim = c.head_dim;
      r.positions = dpos.get<int64_t>();
      r.x = p.out;
      r.x_stride = p.out_stride;
      r.x_head_stride = c.head_dim;
      r.out = p.out;
      r.out_stride = p.out_stride;
      r.out_head_stride = c.head_dim;
      r.inverse = true;
      CHECK_OK(LaunchRope(r, nullptr));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> out(n);
    dout.CopyToHost(out.data(), n * sizeof(uint16_t));
    return out;
  };
  o.plain = run(false, false);
  o.separate = run(false, true);
  o.fused = run(true, false);
  SetSparseAttnCudaPathOverride(SparseAttnCudaPath::kAuto);
  return o;
}

void Expect(const AttnCase& c, const Outputs& o, int64_t rd, const char* label) {
  const int64_t diffs = testing::CountBitDiffs(o.fused, o.separate);
  int64_t moved_rope = 0, moved_nope = 0;
  for (size_t i = 0; i < o.fused.size(); ++i) {
    const bool rope_dim = static_cast<int64_t>(i % c.head_dim) >= c.head_dim - rd;
    if (o.fused[i] != o.plain[i]) ++(rope_dim ? moved_rope : moved_nope);
  }
  std::printf("%-44s path %-12s fused vs separate: %ld of %zu differ; rope dims moved %ld\n", label,
              SparseAttnCudaPathName(o.path), static_cast<long>(diffs), o.fused.size(),
              static_cast<long>(moved_rope));
  EXPECT_EQ(diffs, 0) << label;
  EXPECT_EQ(moved_nope, 0) << label;
  // Token 2 sits at position 0 (no rotation); every other (token, head) moves most rope dims.
  const int64_t rotated_tokens = c.tokens > 2 ? c.tokens - 1 : c.tokens;
  EXPECT_GT(moved_rope, rotated_tokens * c.heads * rd / 2) << label;
}

TEST(SparseAttnOutRopeGpuTest, FusedEqualsSeparateOnEveryDefaultBody) {
  FS_SKIP_WITHOUT_GPU();
  const RopeTable table = MakeTable(64);
  char label[96];
  // 1, 8: wgmma split + the shared-weight combine; 16: the per-thread combine; 64: wgmma-ws
  // split; 256: wgmma-ws unsplit epilogue.
  for (int64_t tokens : {1, 8, 16, 64, 256}) {
    const AttnCase c = Decode(tokens, 64, 900 + static_cast<uint32_t>(tokens));
    std::snprintf(label, sizeof(label), "64x512 w640 tokens %ld", static_cast<long>(tokens));
    Expect(c, RunForms(c, table, SparseAttnCudaPath::kAuto), 64, label);
  }
}

TEST(SparseAttnOutRopeGpuTest, FusedEqualsSeparateOnForcedBodies) {
  FS_SKIP_WITHOUT_GPU();
  const RopeTable table = MakeTable(64);
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
      {8, 64, SparseAttnCudaPath::kMmaSync, "mma.sync (unfused fallback), 8 tokens"},
  };
  for (const Case& k : cases) {
    const AttnCase c = Decode(k.tokens, k.heads, 950 + static_cast<uint32_t>(k.tokens));
    const Outputs o = RunForms(c, table, k.path);
    EXPECT_EQ(o.path, k.path) << k.label;
    Expect(c, o, 64, k.label);
  }
}

TEST(SparseAttnOutRopeGpuTest, FusedEqualsSeparateOnTheRowFormAndWideTables) {
  FS_SKIP_WITHOUT_GPU();
  const RopeTable table = MakeTable(64);
  for (int64_t tokens : {1, 256}) {
    const AttnCase c = Decode(tokens, 64, 990 + static_cast<uint32_t>(tokens));
    Expect(c, RunForms(c, table, SparseAttnCudaPath::kAuto, 128), 64,
           tokens == 1 ? "row form, 1 token" : "row form, 256 tokens");
  }
  // rd 128 is wider than the fused table: the launcher runs the RoPE kernel after the attention.
  const RopeTable wide = MakeTable(128);
  const AttnCase c = Decode(2, 64, 999);
  Expect(c, RunForms(c, wide, SparseAttnCudaPath::kAuto), 128,
         "rd 128 (unfused fallback), 2 tokens");
}

}  // namespace
}  // namespace flashserve::kernels
