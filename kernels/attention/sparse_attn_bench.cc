// bench_sparse_attn: decode sparse attention per layer on the GPU against its roofline.
//
//   bench_sparse_attn [--iters N] [--warmup N] [--compressed ROWS]
//                     [--path both|all|ws|auto|wgmma|wgmma-ws|wgmma-splitk|mma.sync|rows|once|
//                             tproto|probe]
//                     [--tokens N[,N..]] [--rope 0|1] [--windows shared|distinct]
//                     [--combine auto|cluster|shared|per-thread[,..]] [--no-roofs] [--no-graph]
//                     [--ncu]
//
// Released dims: 64 heads × 512, lists of 128 window + 512 selected entries (640), bf16 KV pool of
// 128 window rows (shared by every token of the batch; --windows distinct: 128 per token, as in
// serving, where the tokens of a decode batch are different sequences) + ROWS compressed rows
// (default 65536; each token selects 512 distinct rows at random). For 1, 8, 64 and 256 tokens it
// prints: the median time of N launches between two CUDA events (after the warm-up), bytes (unique
// KV rows read × 1024 B + q + out + indices), FLOPs (4 · heads · 512 · entries per token), TFLOP/s,
// and the roofline time max(bytes / copy bandwidth, FLOPs / tensor-core rate) and ratio = roofline
// / measured. Both roofs are measured in the same run: the copy is cudaMemcpyAsync device-to-device
// of the KV pool (counted as read + write), the tensor-core rate is cublasGemmEx bf16 in, fp32
// compute, 8192³ (cuBLAS loaded with dlopen: the toolkit has no static cuBLAS) or, when no
// libcublas can be loaded, the mma.sync peak of bench/mma_peak.cu (printed as such). Before timing,
// the first tokens are compared with SparseAttnCpu (the GPU test's tolerance); a mismatch makes the
// exit code 1. --path picks the CUDA body (the launcher's override, cuda/sparse_attn_path.h):
// `both` (default) runs every batch on the mma.sync path and then on the wgmma path, one row each,
// then on the row-format input with the wgmma and the wgmma-ws kernels (rows `wgmma-rows`,
// `wgmma-ws-rows`); `all` adds the opt-in wgmma-splitk and wgmma-ws kernels; `ws` is the A/B of the
// warp-specialised kernel (wgmma, then wgmma-ws; same inputs); `rows` runs the row form only (both
// kernels); `tproto` runs wgmma-ws, the transposed-products prototype (cuda/transposed_proto.h;
// wgmma_ws.md "Session 69"; bf16 pool, no RoPE), its SS variant (`tproto-ss`) and the row form's
// default kernel, in that order; `probe` runs wgmma-ws, the consumer-side decode probe in both
// placements and the half-cost decode (cuda/ws_probe.h; wgmma_ws.md "Session 70"; rows `probe-1`,
// `probe-2`, `probe-3`, only from 128 tokens: no split combine) and the row form's default kernel;
// `once` runs the row form's default kernel, the row form's decode-once variant forced
// (attention.h SparseAttnKvRows::decoded; row `once-<the decoded pool's body>`: LaunchDecodeRows
// over every window and compressed row, then the bf16 pool's default body, timed together; its
// MB_read counts every row read and written by the decode and the unique rows read back as bf16,
// its mem_us and ratio the row form's bytes: the same attention over the same rows)
// and the bf16 pool's default body; it prints the decode pass alone and the token counts where
// the default rule would decode once (SparseAttnDecodeOncePays).
// --tokens replaces the batch sizes (default 1,8,64,256). --combine runs each path once per listed
// split-combine form (session 85: the row kernel's cluster merge, `+cl` in the row's name where
// taken, against the combine kernel's `shared` / `per-thread` forms; default auto).
//
// Row form (attention.h SparseAttnKvRows): the same pool encoded in the serving formats (window
// rows as 528-byte FP8 rows, compressed rows as 288-byte FP4 rows, quant EncodeRowsCpu); the wgmma
// kernels gather the raw rows and decode them in shared memory (wgmma-ws: its producer warpgroup).
// Its bytes count the row bytes actually gathered (unique window rows × 528 + unique compressed
// rows × 288 + q + out + indices); its correctness check runs SparseAttnCpu on the same rows. The
// bf16 rows of the other paths hold the decoded values of those rows, so every path computes the
// same attention.
//
// Two times per row: median_us, each launch between two events on the legacy stream (it includes
// whatever part of the host's launch path the GPU waits for, when the GPU outruns the host at
// small batches), and graph_us, the mean per launch of kGraphLaunches launches captured in one
// CUDA graph and replayed (median over replays): GPU time only, what a decode step run as a graph
// sees. TFLOP/s and the ratio use median_us, as in the first version of this bench. --no-roofs
// skips the roof kernels (ratio printed as 0), --no-graph the graph column (0);
// --ncu = --no-roofs --no-graph --iters 1 --warmup 0, so that a profiler sees only the attention
// kernels: the correctness launch, then one timed launch per row, e.g.
//   ncu -k regex:WgmmaKernel --set full bench_sparse_attn --ncu --path wgmma --tokens 256
//   ncu -k regex:WgmmaWsKernel --set full bench_sparse_attn --ncu --path wgmma-ws --tokens 256
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/bench/mma_peak.h"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/attention/cuda/transposed_proto.h"
#include "kernels/attention/cuda/ws_probe.h"
#include "kernels/attention/sparse_attn_internal.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using attention_internal::SparseAttnCudaPath;

constexpr int64_t kHeads = 64;
constexpr int64_t kDim = 512;
constexpr int64_t kWindow = 128;
constexpr int64_t kSelected = 512;
constexpr int64_t kWidth = kWindow + kSelected;

// Launches per captured graph (graph_us).
constexpr int kGraphLaunches = 20;

// One bench configuration: a CUDA path over the bf16 pool, or the row form (rows = true), or the
// transposed-products prototype over the bf16 pool (tproto; cuda/transposed_proto.h).
struct Run {
  SparseAttnCudaPath path;
  bool rows;
  bool tproto = false;
  bool tproto_ss = false;  // with tproto: the SS variant
  int probe = 0;           // the consumer-side decode probe's placement (cuda/ws_probe.h), 1..3
  bool once = false;       // with rows: the decode-once variant forced (kv_rows.decoded)
};

struct Options {
  int iters = 50;
  int warmup = 10;
  int64_t compressed = 65536;
  std::vector<Run> paths = {{SparseAttnCudaPath::kMmaSync, false},
                            {SparseAttnCudaPath::kWgmma, false},
                            {SparseAttnCudaPath::kWgmma, true}};
  std::vector<int64_t> tokens = {1, 8, 64, 256};
  // --windows distinct: every token has its own 128 window rows (as in serving, where each
  // token of a decode batch is another sequence); default shared: every token reads rows 0..127.
  bool distinct_windows = false;
  bool roofs = true;
  bool graph = true;
  // --combine auto,cluster,shared,per-thread: each path runs once per listed split-combine form
  // (the launcher's override, cuda/sparse_attn_path.h SparseAttnCombineForm); rows where the row
  // kernel merges in clusters are named "+cl".
  std::vector<attention_internal::SparseAttnCombineForm> combine = {
      attention_internal::SparseAttnCombineForm::kAuto};
  // --rope 1: q's RoPE and the output's inverse RoPE inside the attention (SparseAttnParams::rope;
  // the text table, rd 64, positions 65535 − t; rows named "+rope"; no mma.sync rows), checked
  // against SparseAttnCpu with the same RoPE, with the cos/sin table built once before the timing
  // (rope_cos_sin, LaunchRopeCosSin: a decode step builds it once for all its layers; its own time
  // is printed); a run with --rope 0 (default) gives their cost inside the kernels.
  bool rope = false;
};

// Mean GPU time per launch, µs: kGraphLaunches calls of `launch(stream)` captured into one graph
// on a fresh stream, replayed `warmup` times untimed and `iters` times between events (median).
double GraphMicrosPerLaunch(int warmup, int iters,
                            const std::function<void(cudaStream_t)>& launch) {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kGraphLaunches; ++i) launch(stream);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double us = MedianEventMicros(
      warmup, iters, [&] { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, stream);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
  return us / kGraphLaunches;
}

std::vector<uint16_t> RandomBf16(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (uint16_t& x : v) x = formats::FloatToBf16Bits(dist(rng));
  return v;
}

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host) {
  DeviceBuffer d(std::max<size_t>(host.size() * sizeof(T), 16));
  d.CopyFromHost(host.data(), host.size() * sizeof(T));
  return d;
}

class Bench {
 public:
  explicit Bench(Options o)
      : o_(o),
        n_window_(kWindow *
                  (o.distinct_windows ? *std::max_element(o.tokens.begin(), o.tokens.end()) : 1)),
        n_kv_(n_window_ + o.compressed) {
    kv_ = RandomBf16(n_kv_ * kDim, 1);
    EncodeRows();
    sink_.resize(kHeads);
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-1.0f, 3.0f);
    for (float& s : sink_) s = u(rng);
    dkv_ = Upload(kv_);
    dwindow_ = Upload(window_);
    dcompressed_ = Upload(compressed_);
    dsink_ = Upload(sink_);
    dws_ = DeviceBuffer(SparseAttnCudaWorkspaceBytes(kHeads, kDim));
  }

  void Roofs() {
    if (!o_.roofs) return;
    copy_gbps_ = MeasureD2dCopyGbps(kv_.size() * 2, o_.iters);
    const attn_bench::Bf16TensorRates rates = attn_bench::MeasureBf16TensorRates();
    mma_tflops_ = rates.mma;
    cublas_tflops_ = rates.cublas;
    cublas_source_ = rates.cublas_source;
    tc_tflops_ = rates.dense;
  }

  // One row: `tokens` decode queries on `path` (the launcher's override while it runs), over the
  // bf16 pool or (rows) the serving rows.
  void Decode(int64_t tokens, SparseAttnCudaPath path, bool rows, bool tproto, bool tproto_ss,
              int probe, bool once) {
    // The probe runs one list range per (token, group) only (no split combine).
    if (probe != 0 && tokens * kHeads / 64 < kSparseAttnCudaSplitCtas) return;
    // rope_q exists on the wgmma family only (attention.h): --rope skips the mma.sync rows.
    if (o_.rope && path == SparseAttnCudaPath::kMmaSync) return;
    attention_internal::SetSparseAttnCudaPathOverride(path);
    // Lists: the window rows 0..127 (every token; --windows distinct: 128t .. 128t + 127), then
    // 512 distinct random compressed rows.
    std::mt19937_64 rng(100 + tokens);
    std::uniform_int_distribution<int64_t> pick(n_window_, n_kv_ - 1);
    std::vector<int32_t> idx(static_cast<size_t>(tokens * kWidth));
    std::unordered_set<int64_t> unique;  // compressed rows
    for (int64_t t = 0; t < tokens; ++t) {
      std::unordered_set<int64_t> mine;
      const int64_t w0 = o_.distinct_windows ? t * kWindow : 0;
      for (int64_t e = 0; e < kWindow; ++e) idx[t * kWidth + e] = static_cast<int32_t>(w0 + e);
      for (int64_t e = kWindow; e < kWidth; ++e) {
        int64_t r = pick(rng);
        while (!mine.insert(r).second) r = pick(rng);
        idx[t * kWidth + e] = static_cast<int32_t>(r);
        unique.insert(r);
      }
    }
    const int64_t window_rows = o_.distinct_windows ? tokens * kWindow : kWindow;  // read
    const int64_t unique_rows = window_rows + static_cast<int64_t>(unique.size());
    const std::vector<uint16_t> q = RandomBf16(tokens * kHeads * kDim, 10 + tokens);
    DeviceBuffer dq = Upload(q), didx = Upload(idx), dout(q.size() * 2);
    SparseAttnParams p;
    p.tokens = tokens;
    p.heads = kHeads;
    p.head_dim = kDim;
    p.q = dq.get<uint16_t>();
    p.q_stride = kHeads * kDim;
    p.q_head_stride = kDim;
    p.kv = dkv_.get<uint16_t>();
    p.n_kv = n_kv_;
    p.kv_stride = kDim;
    p.indices = didx.get<int32_t>();
    p.width = kWidth;
    p.indices_stride = kWidth;
    p.attn_sink = dsink_.get<float>();
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kDim));
    p.out = dout.get<uint16_t>();
    p.out_stride = kHeads * kDim;
    p.out_head_stride = kDim;
    p.workspace = dws_.get();
    p.workspace_bytes = dws_.bytes();
    if (rows) SetRows(dwindow_.get<uint8_t>(), dcompressed_.get<uint8_t>(), &p);
    // The decode-once variant: the scratch, forced on (the rule's choice is printed at the end).
    const size_t decoded_bytes = SparseAttnDecodedBytes(n_window_, o_.compressed, kDim);
    if (rows && SparseAttnDecodeOncePays(tokens, kWidth, n_kv_)) rule_once_.insert(tokens);
    if (once) {
      p.kv_rows.decoded = DecodeScratch().get<uint16_t>();
      p.kv_rows.decoded_bytes = decoded_bytes;
      attention_internal::SetSparseAttnDecodeOnceOverride(
          attention_internal::SparseAttnDecodeOnce::kOn);
    }
    std::vector<int64_t> positions(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) positions[t] = 65535 - t;
    DeviceBuffer dpos = Upload(positions);
    DeviceBuffer dcos_sin;
    if (o_.rope) {
      p.rope = &rope_;
      p.rope_positions = dpos.get<int64_t>();
      p.rope_q = p.rope_out = true;
      dcos_sin = DeviceBuffer(static_cast<size_t>(tokens * rope_.rope_dims()) * sizeof(float));
      RopeCosSinParams cs;
      cs.table = &rope_;
      cs.tokens = tokens;
      cs.positions = p.rope_positions;
      cs.out = dcos_sin.get<float>();
      CHECK_OK(LaunchRopeCosSin(cs, nullptr));
      p.rope_cos_sin = cs.out;
      if (table_us_.count(tokens) == 0) {
        table_us_[tokens] = MedianEventMicros(o_.warmup, o_.iters,
                                              [&] { CHECK_OK(LaunchRopeCosSin(cs, nullptr)); });
      }
    }
    const SparseAttnCudaPath taken = attention_internal::SparseAttnCudaPathFor(p);
    const bool cluster = attention_internal::SparseAttnMergesInCluster(p);
    const auto launch = [&](cudaStream_t s) {
      CHECK_OK(probe != 0 ? attention_internal::LaunchSparseAttnWsProbe(p, s, probe)
               : tproto   ? attention_internal::LaunchSparseAttnTransposedProto(p, s, tproto_ss)
                          : LaunchSparseAttn(p, s));
    };
    launch(nullptr);
    Verify(p, q, idx, positions, dout);

    const double us = MedianEventMicros(o_.warmup, o_.iters, [&] { launch(nullptr); });
    const double graph_us =
        o_.graph ? GraphMicrosPerLaunch(std::min(o_.warmup, 3), o_.iters, launch) : 0.0;
    // The row form's bytes: the unique rows gathered in their serving formats.
    const double serving_bytes =
        window_rows * double(window_stride_) + double(unique.size()) * double(compressed_stride_);
    // Decode once moves more (MB_read): every row read in its serving format and written as
    // bf16, then the unique rows read back as bf16; its roof stays the row form's (the same
    // attention over the same rows), so that its ratio is comparable with the row kernel's.
    const double row_bytes = once ? n_window_ * double(window_stride_) +
                                        o_.compressed * double(compressed_stride_) +
                                        double(decoded_bytes) + unique_rows * kDim * 2.0
                             : rows ? serving_bytes
                                    : unique_rows * kDim * 2.0;
    const double other_bytes = 2.0 * (2.0 * tokens * kHeads * kDim) + 4.0 * tokens * kWidth;
    const double bytes = row_bytes + other_bytes;
    const double roof_bytes = once ? serving_bytes + other_bytes : bytes;
    const double flops = 4.0 * kHeads * kDim * kWidth * tokens;
    const double mem_us = o_.roofs ? roof_bytes / copy_gbps_ / 1e3 : 0.0;
    const double tc_us = o_.roofs ? flops / tc_tflops_ / 1e6 : 0.0;
    const std::string name =
        probe != 0 ? "probe-" + std::to_string(probe)
        : tproto   ? std::string(tproto_ss ? "tproto-ss" : "tproto")
        : once     ? std::string("once-") + attention_internal::SparseAttnCudaPathName(taken) +
                     (o_.rope ? "+rope" : "")
               : std::string(
                     rows ? (taken == SparseAttnCudaPath::kWgmmaWs ? "wgmma-ws-rows" : "wgmma-rows")
                          : attention_internal::SparseAttnCudaPathName(taken)) +
                     (cluster ? "+cl" : "") + (o_.rope ? "+rope" : "");
    names_.push_back(name);
    rows_.push_back({names_.back().c_str(), tokens, us, graph_us, bytes / 1e6, unique_rows,
                     flops / us / 1e6, mem_us, tc_us, std::max(mem_us, tc_us) / us});
    attention_internal::SetSparseAttnCudaPathOverride(SparseAttnCudaPath::kAuto);
    attention_internal::SetSparseAttnDecodeOnceOverride(
        attention_internal::SparseAttnDecodeOnce::kAuto);
  }

  // The decode-once pass alone (quant LaunchDecodeRows over every window and compressed row, as
  // the launcher runs it), median µs; once per run.
  void TimeDecodeAlone() {
    if (decode_us_ > 0) return;
    uint16_t* out = DecodeScratch().get<uint16_t>();
    quant::DecodeRowsParams w{quant::KvRowKind::kSwaKv, n_window_, kDim, dwindow_.get<uint8_t>(),
                              window_stride_,           out,       kDim};
    quant::DecodeRowsParams c{
        quant::KvRowKind::kMainKv, o_.compressed,          kDim, dcompressed_.get<uint8_t>(),
        compressed_stride_,        out + n_window_ * kDim, kDim};
    decode_us_ = MedianEventMicros(o_.warmup, o_.iters, [&] {
      CHECK_OK(quant::LaunchDecodeRows(w, nullptr));
      CHECK_OK(quant::LaunchDecodeRows(c, nullptr));
    });
  }

  int Print(const std::string& command) const {
    if (o_.roofs) {
      std::printf(
          "roofs: copy (d2d, read+write) %.0f GB/s; mma.sync peak (own kernel) %.0f "
          "TFLOP/s",
          copy_gbps_, mma_tflops_);
      if (cublas_tflops_ > 0) {
        std::printf("; %s %.0f TFLOP/s\n", cublas_source_.c_str(), cublas_tflops_);
      } else {
        std::printf("; cuBLAS not loadable here, the mma.sync rate is the tensor-core roof\n");
      }
    } else {
      std::printf("roofs: skipped (--no-roofs); mem_us, tc_us and ratio are 0\n");
    }
    std::printf("\n%-13s %7s %10s %9s %9s %11s %8s %10s %10s %7s\n", "path", "tokens", "median_us",
                "graph_us", "MB_read", "unique_rows", "TFLOP/s", "mem_us", "tc_us", "ratio");
    for (const Row& r : rows_) {
      std::printf("%-13s %7ld %10.2f %9.2f %9.2f %11ld %8.1f %10.2f %10.2f %7.2f\n", r.path,
                  long(r.tokens), r.us, r.graph_us, r.mb, long(r.unique_rows), r.tflops, r.mem_us,
                  r.tc_us, r.ratio);
    }
    std::printf(
        "(TFLOP/s and ratio = max(mem_us, tc_us) / median_us, as before graph_us existed; "
        "graph_us: GPU time per launch in a CUDA graph%s; tensor-core roof %.0f TFLOP/s)\n",
        o_.graph ? "" : ", 0 with --no-graph", tc_tflops_);
    for (const auto& [tokens, us] : table_us_) {
      std::printf(
          "rope cos/sin table (LaunchRopeCosSin, built once per step): %ld tokens %.2f us\n",
          long(tokens), us);
    }
    if (decode_us_ > 0) {
      const double mb =
          (n_window_ * double(window_stride_) + o_.compressed * double(compressed_stride_) +
           double(SparseAttnDecodedBytes(n_window_, o_.compressed, kDim))) /
          1e6;
      std::printf(
          "decode once, the pass alone (LaunchDecodeRows: %ld window + %ld compressed rows, %.1f "
          "MB read + written): %.2f us, %.0f GB/s\n",
          long(n_window_), long(o_.compressed), mb, decode_us_, mb / decode_us_ * 1e3);
    }
    if (!rule_once_.empty()) {
      std::printf("the default rule (SparseAttnDecodeOncePays) decodes once at tokens:");
      for (int64_t t : rule_once_) std::printf(" %ld", long(t));
      std::printf("\n");
    }
    std::printf("\ncorrectness (first tokens vs SparseAttnCpu): %s\n",
                failures_ == 0 ? "OK" : "MISMATCH");
    std::printf("command: %s\n", command.c_str());
    return failures_ == 0 ? 0 : 1;
  }

 private:
  struct Row {
    const char* path;  // the path taken (SparseAttnCudaPathName)
    int64_t tokens;
    double us, graph_us, mb;
    int64_t unique_rows;
    double tflops, mem_us, tc_us, ratio;
  };

  // The first two tokens against SparseAttnCpu: |gpu − cpu| <= 2^-8·(|cpu| + Σ p|v|/den) + 1e-6,
  // with the mass bounded here by max |v| (= the bound's worst case, since Σ p / den <= 1).
  void Verify(const SparseAttnParams& gp, const std::vector<uint16_t>& q,
              const std::vector<int32_t>& idx, const std::vector<int64_t>& positions,
              const DeviceBuffer& dout) {
    const int64_t n = std::min<int64_t>(gp.tokens, 2);
    std::vector<uint16_t> got(static_cast<size_t>(n * kHeads * kDim));
    CUDA_CHECK(cudaDeviceSynchronize());
    dout.CopyToHost(got.data(), got.size() * 2);
    std::vector<uint16_t> want(got.size());
    std::vector<uint8_t> ws(SparseAttnWorkspaceBytes(kDim, nullptr));
    SparseAttnParams p = gp;
    p.tokens = n;
    p.q = q.data();
    p.kv = kv_.data();
    if (attention_internal::UsesKvRows(gp)) SetRows(window_.data(), compressed_.data(), &p);
    p.indices = idx.data();
    p.attn_sink = sink_.data();
    if (p.rope != nullptr) p.rope_positions = positions.data();
    p.out = want.data();
    p.workspace = ws.data();
    p.workspace_bytes = ws.size();
    CHECK_OK(SparseAttnCpu(p, nullptr));
    float vmax = 0;
    for (uint16_t v : kv_) vmax = std::max(vmax, std::fabs(formats::Bf16BitsToFloat(v)));
    for (size_t i = 0; i < got.size(); ++i) {
      const float g = formats::Bf16BitsToFloat(got[i]), w = formats::Bf16BitsToFloat(want[i]);
      if (!(std::fabs(g - w) <= std::ldexp(std::fabs(w) + vmax, -8) + 1e-6)) {
        std::fprintf(stderr, "MISMATCH: %s, tokens %ld element %zu: gpu %g cpu %g\n",
                     attention_internal::SparseAttnCudaPathName(
                         attention_internal::SparseAttnCudaPathFor(gp)),
                     long(gp.tokens), i, g, w);
        ++failures_;
        return;
      }
    }
  }

  // Encodes kv_ rows [0, n_window_) as window rows and the rest as compressed rows, then replaces
  // kv_ by their exact decode, so that the bf16 pool and the rows hold the same values.
  void EncodeRows() {
    window_stride_ = quant::KvRowBytes(quant::KvRowKind::kSwaKv, kDim);
    compressed_stride_ = quant::KvRowBytes(quant::KvRowKind::kMainKv, kDim);
    window_.resize(static_cast<size_t>(n_window_ * window_stride_));
    compressed_.resize(static_cast<size_t>(o_.compressed * compressed_stride_));
    struct Part {
      quant::KvRowKind kind;
      int64_t first, rows, stride;
      uint8_t* bytes;
    };
    for (const Part& part :
         {Part{quant::KvRowKind::kSwaKv, 0, n_window_, window_stride_, window_.data()},
          Part{quant::KvRowKind::kMainKv, n_window_, o_.compressed, compressed_stride_,
               compressed_.data()}}) {
      quant::EncodeRowsParams ep;
      ep.kind = part.kind;
      ep.rows = part.rows;
      ep.channels = kDim;
      ep.x = kv_.data() + part.first * kDim;
      ep.x_stride = kDim;
      ep.rows_out = part.bytes;
      ep.row_stride = part.stride;
      CHECK_OK(quant::EncodeRowsCpu(ep));
      quant::DecodeRowsParams dp;
      dp.kind = part.kind;
      dp.rows = part.rows;
      dp.channels = kDim;
      dp.rows_in = part.bytes;
      dp.row_stride = part.stride;
      dp.out = kv_.data() + part.first * kDim;
      dp.out_stride = kDim;
      CHECK_OK(quant::DecodeRowsCpu(dp));
    }
  }

  // Switches p to the row form over the pools at `window` / `compressed` (host or device).
  void SetRows(const uint8_t* window, const uint8_t* compressed, SparseAttnParams* p) const {
    p->kv = nullptr;
    p->n_kv = 0;
    p->kv_rows.window = window;
    p->kv_rows.n_window = n_window_;
    p->kv_rows.window_stride = window_stride_;
    p->kv_rows.compressed = compressed;
    p->kv_rows.n_compressed = o_.compressed;
    p->kv_rows.compressed_stride = compressed_stride_;
  }

  Options o_;
  int64_t n_window_;  // window rows in the pool: 128, or 128 per token of the largest batch
  int64_t n_kv_;
  std::vector<uint16_t> kv_;  // the decoded values of the rows below
  std::vector<uint8_t> window_, compressed_;
  int64_t window_stride_ = 0, compressed_stride_ = 0;
  DeviceBuffer dwindow_, dcompressed_;
  std::vector<float> sink_;
  DeviceBuffer dkv_, dsink_, dws_;
  double copy_gbps_ = 0, mma_tflops_ = 0, cublas_tflops_ = 0, tc_tflops_ = 0;
  std::string cublas_source_;
  static RopeTable TextRope() {
    RopeSpec spec;
    spec.rope_dims = 64;
    spec.theta = 160000.0;
    spec.original_seq_len = 65536;
    spec.factor = 16.0;
    return RopeTable::Create(spec, 0).value();
  }

  std::vector<Row> rows_;
  std::deque<std::string> names_;  // Row::path points into these (a deque never moves them)
  RopeTable rope_ = TextRope();
  std::map<int64_t, double> table_us_;  // LaunchRopeCosSin's median per token count (--rope 1)
  DeviceBuffer& DecodeScratch() {
    if (ddecoded_.bytes() == 0) {
      ddecoded_ = DeviceBuffer(SparseAttnDecodedBytes(n_window_, o_.compressed, kDim));
    }
    return ddecoded_;
  }
  DeviceBuffer ddecoded_;        // the decode-once scratch (allocated on first use)
  double decode_us_ = 0;         // TimeDecodeAlone's median
  std::set<int64_t> rule_once_;  // token counts where the default rule decodes once
  int failures_ = 0;
};

int Main(int argc, char** argv) {
  Options o;
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) {
    command += std::string(" ") + argv[i];
    const std::string a = argv[i];
    if ((a == "--iters" || a == "--warmup" || a == "--compressed") && i + 1 < argc) {
      const long v = std::atol(argv[++i]);
      command += std::string(" ") + argv[i];
      if (v <= 0 || (a == "--compressed" && (v < kSelected || v > (int64_t{1} << 30)))) {
        std::fprintf(stderr, "%s needs a positive count (--compressed: 512 .. 2^30)\n", a.c_str());
        return 2;
      }
      if (a == "--compressed") {
        o.compressed = v;
      } else {
        (a == "--iters" ? o.iters : o.warmup) = static_cast<int>(v);
      }
    } else if (a == "--path" && i + 1 < argc) {
      const std::string v = argv[++i];
      command += " " + v;
      if (v == "both") {
        o.paths = {{SparseAttnCudaPath::kMmaSync, false},
                   {SparseAttnCudaPath::kWgmma, false},
                   {SparseAttnCudaPath::kWgmma, true},
                   {SparseAttnCudaPath::kWgmmaWs, true}};
      } else if (v == "all") {
        o.paths = {{SparseAttnCudaPath::kMmaSync, false},     {SparseAttnCudaPath::kWgmma, false},
                   {SparseAttnCudaPath::kWgmmaSplitK, false}, {SparseAttnCudaPath::kWgmmaWs, false},
                   {SparseAttnCudaPath::kWgmma, true},        {SparseAttnCudaPath::kWgmmaWs, true}};
      } else if (v == "ws") {
        o.paths = {{SparseAttnCudaPath::kWgmma, false}, {SparseAttnCudaPath::kWgmmaWs, false}};
      } else if (v == "rows") {
        o.paths = {{SparseAttnCudaPath::kWgmma, true}, {SparseAttnCudaPath::kWgmmaWs, true}};
      } else if (v == "tproto") {
        o.paths = {{SparseAttnCudaPath::kWgmmaWs, false},
                   {SparseAttnCudaPath::kWgmmaWs, false, true},
                   {SparseAttnCudaPath::kWgmmaWs, false, true, true},
                   {SparseAttnCudaPath::kWgmma, true}};
      } else if (v == "once") {
        o.paths = {{SparseAttnCudaPath::kWgmma, true},
                   {SparseAttnCudaPath::kAuto, true, false, false, 0, true},
                   {SparseAttnCudaPath::kAuto, false}};
      } else if (v == "probe") {
        o.paths = {{SparseAttnCudaPath::kWgmmaWs, false},
                   {SparseAttnCudaPath::kWgmmaWs, false, false, false, 1},
                   {SparseAttnCudaPath::kWgmmaWs, false, false, false, 2},
                   {SparseAttnCudaPath::kWgmmaWs, false, false, false, 3},
                   {SparseAttnCudaPath::kWgmma, true}};
      } else if (v == "auto" || v == "wgmma" || v == "wgmma-ws" || v == "wgmma-splitk" ||
                 v == "mma.sync") {
        o.paths = {{v == "auto"           ? SparseAttnCudaPath::kAuto
                    : v == "wgmma"        ? SparseAttnCudaPath::kWgmma
                    : v == "wgmma-ws"     ? SparseAttnCudaPath::kWgmmaWs
                    : v == "wgmma-splitk" ? SparseAttnCudaPath::kWgmmaSplitK
                                          : SparseAttnCudaPath::kMmaSync,
                    false}};
      } else {
        std::fprintf(stderr,
                     "--path takes both, all, ws, auto, wgmma, wgmma-ws, wgmma-splitk, mma.sync, "
                     "rows, once, tproto or probe\n");
        return 2;
      }
    } else if (a == "--tokens" && i + 1 < argc) {
      const std::string v = argv[++i];
      command += " " + v;
      o.tokens.clear();
      for (size_t pos = 0; pos <= v.size();) {
        const size_t comma = std::min(v.find(',', pos), v.size());
        const long n = std::atol(v.substr(pos, comma - pos).c_str());
        if (n <= 0 || n > 65536) {
          std::fprintf(stderr, "--tokens takes a comma-separated list of counts in 1..65536\n");
          return 2;
        }
        o.tokens.push_back(n);
        pos = comma + 1;
      }
    } else if (a == "--rope" && i + 1 < argc) {
      command += std::string(" ") + argv[++i];
      o.rope = std::atoi(argv[i]) != 0;
    } else if (a == "--windows" && i + 1 < argc) {
      const std::string v = argv[++i];
      command += " " + v;
      if (v != "shared" && v != "distinct") {
        std::fprintf(stderr, "--windows takes shared or distinct\n");
        return 2;
      }
      o.distinct_windows = v == "distinct";
    } else if (a == "--combine" && i + 1 < argc) {
      const std::string v = argv[++i];
      command += " " + v;
      using attention_internal::SparseAttnCombineForm;
      o.combine.clear();
      for (size_t pos = 0; pos <= v.size();) {
        const size_t comma = std::min(v.find(',', pos), v.size());
        const std::string f = v.substr(pos, comma - pos);
        if (f != "auto" && f != "cluster" && f != "shared" && f != "per-thread") {
          std::fprintf(stderr,
                       "--combine takes a comma-separated list of auto, cluster, shared, "
                       "per-thread\n");
          return 2;
        }
        o.combine.push_back(f == "auto"      ? SparseAttnCombineForm::kAuto
                            : f == "cluster" ? SparseAttnCombineForm::kCluster
                            : f == "shared"  ? SparseAttnCombineForm::kShared
                                             : SparseAttnCombineForm::kPerThread);
        pos = comma + 1;
      }
    } else if (a == "--no-roofs") {
      o.roofs = false;
    } else if (a == "--no-graph") {
      o.graph = false;
    } else if (a == "--ncu") {
      o.roofs = o.graph = false;
      o.iters = 1;
      o.warmup = 0;
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--iters N] [--warmup N] [--compressed ROWS] "
          "[--path both|all|ws|auto|wgmma|wgmma-ws|wgmma-splitk|mma.sync|rows|once|tproto|probe] "
          "[--tokens N[,N..]] [--rope 0|1] [--windows shared|distinct] "
          "[--combine auto|cluster|shared|per-thread[,..]] "
          "[--no-roofs] [--no-graph] [--ncu]\n",
          argv[0]);
      return 2;
    }
  }
  if (!CudaDeviceAvailable()) {
    std::fprintf(stderr, "bench_sparse_attn: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "device: %s, %d SMs, L2 %d MB; median of %d launches after %d warm-up; 64 heads x 512, "
      "128 window (%s) + 512 selected of %ld compressed rows\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, o.iters, o.warmup,
      o.distinct_windows ? "per token" : "shared", long(o.compressed));
  Bench bench(o);
  bench.Roofs();
  for (const Run& run : o.paths) {
    if (run.once) bench.TimeDecodeAlone();
    for (const auto form : o.combine) {
      attention_internal::SetSparseAttnCombineFormOverride(form);
      for (int64_t tokens : o.tokens)
        bench.Decode(tokens, run.path, run.rows, run.tproto, run.tproto_ss, run.probe, run.once);
    }
    attention_internal::SetSparseAttnCombineFormOverride(
        attention_internal::SparseAttnCombineForm::kAuto);
  }
  return bench.Print(command);
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
