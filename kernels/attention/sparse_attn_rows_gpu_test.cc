// The row form (attention.h SparseAttnKvRows) on the GPU: both row kernels (wgmma, the opt-in
// wgmma-ws) and the decode-once variant (kv_rows.decoded, README.md "Decode once") bit for bit
// against the wgmma kernel on the decoded bf16 pool, and within the tensor-core tolerance of
// SparseAttnCpu on the same rows; the decode-once rule's choice, under CUDA-graph capture too; the
// launcher's row-form errors. Outputs and scratch start poisoned. Split from
// sparse_attn_gpu_test.cc.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/base/check.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_gpu_test_util.h"
#include "kernels/attention/attention_test_util.h"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/attention/sparse_attn_gpu_checks.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_test_util.h"

namespace flashserve::kernels {
namespace {

using attention_internal::SparseAttnCudaPath;
using attention_internal::SparseAttnCudaPathFor;
using attention_internal::SparseAttnCudaPathName;
using testing::AttnCase;
using testing::DecodeCase;
using testing::ExpectClose;
using testing::kPoison;
using testing::LayoutParams;
using testing::Outputs;
using testing::PathOverride;
using testing::Pool;
using testing::RandomCase;
using testing::ToDevice;

struct RowOutputs {
  std::vector<uint16_t> bf16;     // the wgmma kernel on the decoded bf16 pool
  std::vector<uint16_t> rows;     // the wgmma kernel on the serving rows
  std::vector<uint16_t> ws_rows;  // the wgmma-ws kernel on the serving rows (producer decodes)
  // The decode-once variant (kv_rows.decoded, forced on; the scratch poisoned first) on the
  // wgmma and wgmma-ws bodies (heads a multiple of 64; otherwise it runs the row kernels).
  std::vector<uint16_t> once;
  std::vector<uint16_t> once_ws;
  // The wgmma row kernel with its split states merged in clusters (SparseAttnCombineForm::
  // kCluster, where the list splits into 2–16) and through the combine kernel (kPerThread).
  std::vector<uint16_t> rows_cluster;
  std::vector<uint16_t> rows_combine;
  bool cluster_taken = false;  // SparseAttnMergesInCluster under kCluster
  std::vector<uint16_t> cpu;   // SparseAttnCpu on the serving rows
};

// A row-form case's device copies (q, the decoded bf16 pool, indices, sink, both row pools, the
// workspace) and its params over them with packed q / out: the row form, or (rows = false) the
// bf16 form over the decoded pool.
struct RowFormDevice {
  RowFormDevice(const AttnCase& c, const testing::KvRowPools& pools)
      : c(c),
        pools(pools),
        dq(ToDevice(c.q)),
        dkv(ToDevice(c.kv)),
        didx(ToDevice(c.indices)),
        dsink(ToDevice(c.sink)),
        dwin(ToDevice(pools.window)),
        dcmp(ToDevice(pools.compressed)),
        dws(SparseAttnCudaWorkspaceBytes(c.heads, c.head_dim)) {}

  SparseAttnParams Params(uint16_t* out, bool rows = true) const {
    SparseAttnParams p = LayoutParams(c, {});
    p.q = dq.get<uint16_t>();
    p.kv = dkv.get<uint16_t>();
    p.indices = didx.get<int32_t>();
    p.attn_sink = dsink.get<float>();
    p.out = out;
    p.workspace = dws.get();
    p.workspace_bytes = dws.bytes();
    if (rows) testing::SetKvRows(pools, dwin.get<uint8_t>(), dcmp.get<uint8_t>(), &p);
    return p;
  }

  const AttnCase& c;
  const testing::KvRowPools& pools;
  DeviceBuffer dq, dkv, didx, dsink, dwin, dcmp, dws;
};

// c holds the decoded pool of `pools` (testing::EncodeKvRows). Packed q / out; poisoned outputs.
RowOutputs RunRowForms(const AttnCase& c, const testing::KvRowPools& pools) {
  RowOutputs o;
  SparseAttnParams hp = LayoutParams(c, {});
  const size_t out_elems = c.q.size();
  std::vector<uint16_t> cpu_out(out_elems, kPoison);
  std::vector<uint8_t> cpu_ws(SparseAttnWorkspaceBytes(c.head_dim, Pool()));
  hp.q = c.q.data();
  hp.indices = c.indices.data();
  hp.attn_sink = c.sink.data();
  hp.out = cpu_out.data();
  hp.workspace = cpu_ws.data();
  hp.workspace_bytes = cpu_ws.size();
  testing::SetKvRows(pools, pools.window.data(), pools.compressed.data(), &hp);
  CHECK_OK(SparseAttnCpu(hp, Pool()));
  o.cpu = cpu_out;

  const RowFormDevice dev(c, pools);
  const size_t decoded_bytes =
      SparseAttnDecodedBytes(pools.n_window, pools.n_compressed, c.head_dim);
  const std::vector<uint16_t> poison(decoded_bytes / 2, kPoison);
  DeviceBuffer ddecoded = ToDevice(poison);
  using attention_internal::SparseAttnCombineForm;
  auto run = [&](bool rows, SparseAttnCudaPath path, bool once = false,
                 SparseAttnCombineForm form = SparseAttnCombineForm::kAuto) {
    DeviceBuffer dout = ToDevice(std::vector<uint16_t>(out_elems, kPoison));
    SparseAttnParams dp = dev.Params(dout.get<uint16_t>(), rows);
    if (once) {
      ddecoded.CopyFromHost(poison.data(), decoded_bytes);  // nothing left from an earlier run
      dp.kv_rows.decoded = ddecoded.get<uint16_t>();
      dp.kv_rows.decoded_bytes = decoded_bytes;
    }
    {
      PathOverride force(path);
      testing::CombineFormOverride force_form(form);
      if (form == SparseAttnCombineForm::kCluster) {
        o.cluster_taken = attention_internal::SparseAttnMergesInCluster(dp);
      }
      testing::DecodeOnceOverride force_once(once ? attention_internal::SparseAttnDecodeOnce::kOn
                                                  : attention_internal::SparseAttnDecodeOnce::kOff);
      EXPECT_EQ(attention_internal::SparseAttnDecodesOnce(dp), once && c.heads % 64 == 0);
      EXPECT_EQ(SparseAttnCudaPathFor(dp), path);
      const absl::Status st = LaunchSparseAttn(dp, nullptr);
      CHECK(st.ok()) << st.message();
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> out(out_elems);
    dout.CopyToHost(out.data(), out_elems * sizeof(uint16_t));
    return out;
  };
  o.bf16 = run(false, SparseAttnCudaPath::kWgmma);
  o.rows = run(true, SparseAttnCudaPath::kWgmma);
  o.ws_rows = run(true, SparseAttnCudaPath::kWgmmaWs);
  o.once = run(true, SparseAttnCudaPath::kWgmma, /*once=*/true);
  o.once_ws = run(true, SparseAttnCudaPath::kWgmmaWs, /*once=*/true);
  o.rows_cluster = run(true, SparseAttnCudaPath::kWgmma, false, SparseAttnCombineForm::kCluster);
  o.rows_combine = run(true, SparseAttnCudaPath::kWgmma, false, SparseAttnCombineForm::kPerThread);
  return o;
}

// Both row-form kernels (wgmma, wgmma-ws) against the bf16 form on the decoded pool (bit for bit:
// wgmma-ws computes wgmma's operations in the same order; the first mismatches are printed with
// their token / head / dim), and against SparseAttnCpu on the same rows within the tensor-core
// tolerance.
void ExpectRowForm(AttnCase c, int64_t n_window, int64_t pad, const char* label) {
  const testing::KvRowPools pools = testing::EncodeKvRows(&c, n_window, pad);
  const RowOutputs o = RunRowForms(c, pools);
  auto check = [&](const char* name, const std::vector<uint16_t>& rows) {
    int64_t diffs = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] == o.bf16[i]) continue;
      if (diffs++ < 5) {
        const int64_t th = static_cast<int64_t>(i) / c.head_dim;
        std::printf("  %s: %s != bf16 at token %ld head %ld dim %ld: %04x vs %04x\n", label, name,
                    long(th / c.heads), long(th % c.heads), long(i % c.head_dim), rows[i],
                    o.bf16[i]);
      }
    }
    std::printf("%-40s %s vs decoded-bf16 wgmma: %ld of %zu elements differ\n", label, name,
                static_cast<long>(diffs), rows.size());
    EXPECT_EQ(diffs, 0) << label << " " << name;
    ExpectClose(c, Outputs{rows, o.cpu}, label);
  };
  check("wgmma rows", o.rows);
  check("wgmma-ws rows", o.ws_rows);
  check("decode-once wgmma", o.once);
  check("decode-once wgmma-ws", o.once_ws);
  check("wgmma rows, cluster merge", o.rows_cluster);
  check("wgmma rows, combine kernel", o.rows_combine);
  // The cluster merge is taken wherever the row kernel's list splits into 2–16.
  const int64_t splits = attention_internal::SparseAttnCudaCutFor(
                             c.tokens, c.heads, c.width, attention_internal::kSparseAttnWgmmaHeads)
                             .splits;
  EXPECT_EQ(o.cluster_taken, splits >= 2 && splits <= 16) << label << ": " << splits << " splits";
}

// Released dims: 64 heads × 512, window 128 + 512 compressed entries per token (10 blocks: the
// two tiles alternate five times per unsplit list), -1 entries in the window (leading 70 in
// every third token, i.e. a whole first block of -1 there) and ~10 % among the compressed; 1, 8
// and 64 tokens split their lists (1 or 2 blocks per split: no next block to decode ahead), 256
// do not.
TEST(SparseAttnGpuTest, RowFormEqualsDecodedPoolAtReleasedDims) {
  FS_SKIP_WITHOUT_GPU();
  char label[96];
  for (int64_t tokens : {1, 8, 64, 256}) {
    std::snprintf(label, sizeof(label), "row form 64x512 w640 tokens %ld", long(tokens));
    ExpectRowForm(DecodeCase(tokens, 64, 512, 128, 512, 4096, 0.1, 1000 + tokens), 128, 0, label);
  }
}

// Long lists (40 blocks, one token and 32 tokens), padded row strides (544 / 304 bytes), a partial
// last block, window-only and compressed-only pools, heads that leave a group partly empty or
// take two groups, and large / small sinks.
TEST(SparseAttnGpuTest, RowFormShapes) {
  FS_SKIP_WITHOUT_GPU();
  ExpectRowForm(DecodeCase(1, 64, 512, 128, 2432, 8192, 0.1, 31), 128, 0, "row form w2560 t1");
  ExpectRowForm(DecodeCase(32, 64, 512, 128, 2432, 8192, 0.1, 32), 128, 0, "row form w2560 t32");
  ExpectRowForm(DecodeCase(5, 64, 512, 128, 512, 1000, 0.05, 33), 128, 16, "row form pad 16");
  ExpectRowForm(RandomCase(5, 64, 512, 300, 150, 0.3, 34), 120, 0, "row form w150 mixed");
  ExpectRowForm(RandomCase(4, 64, 512, 128, 128, 0.1, 35), 128, 0, "row form window only");
  ExpectRowForm(RandomCase(4, 64, 512, 500, 300, 0.1, 36), 0, 0, "row form compressed only");
  ExpectRowForm(RandomCase(3, 40, 512, 300, 200, 0.2, 37), 100, 0, "row form heads 40");
  ExpectRowForm(RandomCase(3, 128, 512, 300, 200, 0.2, 38), 100, 0, "row form heads 128");
  AttnCase sinks = DecodeCase(4, 64, 512, 128, 512, 2000, 0.1, 39);
  for (size_t h = 0; h < sinks.sink.size(); ++h) sinks.sink[h] = h % 2 == 0 ? 30.0f : -60.0f;
  ExpectRowForm(sinks, 128, 0, "row form sinks 30 / -60");
  // Every entry -1: zeros (no valid entry anywhere).
  AttnCase none = DecodeCase(3, 64, 512, 128, 128, 500, 0.0, 40);
  for (auto& i : none.indices) i = -1;
  ExpectRowForm(none, 128, 0, "row form all -1");
}

// The decode-once variant under the default rule (attention.h SparseAttnDecodeOncePays): 64 tokens
// over a shared 128-row window and 1,000 compressed rows (40,960 list entries, ~36 per row) decode
// once and run the bf16 pool's default body (wgmma-ws), bit for bit equal to the row kernel; the
// same again captured into a CUDA graph and replayed twice; 63 tokens (below the rule's minimum)
// and 64 tokens over a pool too large for the rule run the row kernel, and leave the scratch
// unwritten.
TEST(SparseAttnGpuTest, RowFormDecodesOnceWhereItPays) {
  FS_SKIP_WITHOUT_GPU();
  auto run = [](int64_t tokens, int64_t n_compressed, bool scratch, bool graph, bool* once,
                bool* scratch_written) {
    AttnCase c = DecodeCase(tokens, 64, 512, 128, 512, n_compressed, 0.1, 2000 + tokens);
    const testing::KvRowPools pools = testing::EncodeKvRows(&c, 128, 0);
    const RowFormDevice dev(c, pools);
    DeviceBuffer dout = ToDevice(std::vector<uint16_t>(c.q.size(), kPoison));
    const size_t decoded_bytes = SparseAttnDecodedBytes(128, n_compressed, 512);
    const std::vector<uint16_t> poison(decoded_bytes / 2, kPoison);
    DeviceBuffer ddecoded = ToDevice(poison);
    SparseAttnParams p = dev.Params(dout.get<uint16_t>());
    if (scratch) {
      p.kv_rows.decoded = ddecoded.get<uint16_t>();
      p.kv_rows.decoded_bytes = decoded_bytes;
    }
    *once = attention_internal::SparseAttnDecodesOnce(p);
    if (*once) {
      EXPECT_EQ(SparseAttnCudaPathFor(p), SparseAttnCudaPath::kWgmmaWs);
    }
    if (graph) {
      cudaStream_t stream = nullptr;
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      cudaGraph_t g = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      CHECK_OK(LaunchSparseAttn(p, stream));
      CUDA_CHECK(cudaStreamEndCapture(stream, &g));
      cudaGraphExec_t exec = nullptr;
      CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
      for (int i = 0; i < 2; ++i) CUDA_CHECK(cudaGraphLaunch(exec, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      CUDA_CHECK(cudaGraphExecDestroy(exec));
      CUDA_CHECK(cudaGraphDestroy(g));
      CUDA_CHECK(cudaStreamDestroy(stream));
    } else {
      CHECK_OK(LaunchSparseAttn(p, nullptr));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> out(c.q.size()), decoded(poison.size());
    dout.CopyToHost(out.data(), out.size() * 2);
    ddecoded.CopyToHost(decoded.data(), decoded.size() * 2);
    *scratch_written = decoded != poison;
    return out;
  };
  bool once = false, written = false;
  const std::vector<uint16_t> rows = run(64, 1000, false, false, &once, &written);
  EXPECT_FALSE(once);
  for (bool graph : {false, true}) {
    const std::vector<uint16_t> got = run(64, 1000, true, graph, &once, &written);
    const int64_t diffs = testing::CountBitDiffs(got, rows);
    std::printf("decode once, 64 tokens, 1,128 rows%s: %ld of %zu differ from the row kernel\n",
                graph ? " (graph, 2 replays)" : "", static_cast<long>(diffs), got.size());
    EXPECT_TRUE(once);
    EXPECT_TRUE(written);
    EXPECT_EQ(diffs, 0);
  }
  run(63, 1000, true, false, &once, &written);
  EXPECT_FALSE(once);
  EXPECT_FALSE(written);
  run(64, 8000, true, false, &once, &written);  // 40,960 entries < 8 × 8,128 rows
  EXPECT_FALSE(once);
  EXPECT_FALSE(written);
  // Never decodes once, forced or not, where the row kernel's bits would not follow or quant's
  // GPU decoder could not take a pool in one launch (host-side checks only: nothing is read).
  AttnCase c = DecodeCase(64, 64, 512, 128, 512, 1000, 0.1, 2100);
  const testing::KvRowPools pools = testing::EncodeKvRows(&c, 128, 0);
  const RowFormDevice dev(c, pools);
  DeviceBuffer dout(c.q.size() * 2), ddecoded(SparseAttnDecodedBytes(128, 1000, 512));
  SparseAttnParams p = dev.Params(dout.get<uint16_t>());
  p.kv_rows.decoded = ddecoded.get<uint16_t>();
  p.kv_rows.decoded_bytes = ddecoded.bytes();
  testing::DecodeOnceOverride force(attention_internal::SparseAttnDecodeOnce::kOn);
  EXPECT_TRUE(attention_internal::SparseAttnDecodesOnce(p));
  SparseAttnParams bad = p;
  bad.heads = 40;  // the decoded pool would take mma.sync
  EXPECT_FALSE(attention_internal::SparseAttnDecodesOnce(bad));
  bad = p;
  bad.q_stride += 4;  // the row form does not fit (q strides multiples of 8)
  EXPECT_FALSE(attention_internal::SparseAttnDecodesOnce(bad));
  bad = p;
  bad.kv_rows.n_compressed = (int64_t{1} << 31) / 64;  // 2^31 / 64 rows of 64 units: too many
  EXPECT_FALSE(attention_internal::SparseAttnDecodesOnce(bad));
  bad.kv_rows.n_compressed -= 1;
  EXPECT_TRUE(attention_internal::SparseAttnDecodesOnce(bad));
  // Path overrides other than wgmma / wgmma-ws are ignored (the row kernel's bits).
  for (SparseAttnCudaPath path : {SparseAttnCudaPath::kMmaSync, SparseAttnCudaPath::kScalar,
                                  SparseAttnCudaPath::kWgmmaSplitK}) {
    PathOverride path_force(path);
    EXPECT_EQ(SparseAttnCudaPathFor(p), SparseAttnCudaPath::kWgmmaWs)
        << SparseAttnCudaPathName(path);
  }
  PathOverride wgmma(SparseAttnCudaPath::kWgmma);
  EXPECT_EQ(SparseAttnCudaPathFor(p), SparseAttnCudaPath::kWgmma);
}

TEST(SparseAttnGpuTest, RowFormLauncherErrors) {
  FS_SKIP_WITHOUT_GPU();
  AttnCase c = RandomCase(2, 64, 128, 40, 30, 0.0, 41);
  const testing::KvRowPools pools = testing::EncodeKvRows(&c, 20, 0);
  const RowFormDevice dev(c, pools);
  DeviceBuffer dout(c.q.size() * 2);
  SparseAttnParams p = dev.Params(dout.get<uint16_t>());
  // head_dim 128: valid params, but the CUDA row form runs at head_dim 512 only.
  absl::Status st = LaunchSparseAttn(p, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("kv_rows"), std::string::npos) << st.message();
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashserve::kernels
