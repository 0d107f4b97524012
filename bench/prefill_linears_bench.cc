// bench_prefill_linears: the FP8 Linears of one decoder layer at prefill, with the norms that feed
// them, chained on one stream at the released dims — with and without the two passes each Linear
// runs before its GEMM (kernels/gemm/prefill_passes.md):
//
//   attn_norm(x) -> wq_a, wkv;  q_norm(wq_a's output) -> wq_b, indexer wq_b;  wo_b (on a bf16
//   input standing in for wo_a's output);  ffn_norm(x) -> the shared expert (w1|w3, SwiGLU, w2)
//
//   bench_prefill_linears [--iters N] [--warmup N] [--tokens 1024,2048,4096] [--stages 1]
//
// Variants per token count: "default" (every Linear QDQs its x and expands its weight per call),
// "x_qdq" (the norms also write their output QDQ'd — RmsNormParams::out_qdq — and the Linears
// and the shared expert take it with x_qdq), "kept" (every FP8 weight keeps its bf16 expansion,
// Fp8LinearDevice::expanded), "both", and "stacked": both, with the Linears that read the same
// input stacked into one (ConcatLinearRows' layout: wq_a | wkv, wq_b | indexer wq_b; their
// consumers read the wide output in place through strides; kernels/gemm/fused_linears.md). Each
// chain is timed whole (the median of N runs between two events, after the warm-up). Before
// timing, every variant's outputs (q, kv, indexer q, wo_b's, the shared expert's) are compared
// with the default's: byte for byte, except the stacked variant's, whose automatic K splits
// differ from the parts' (Agreement below: the differing values are counted, and must stay within
// rel-RMS 2^-8); a mismatch makes the exit code 1. The roof: the chain's GEMM FLOPs at cuBLAS's
// bf16 rate measured in the same run (the Linears are compute-bound at these token counts; the
// norms and the SwiGLU are left out of it, so ratio = roof / chain time is a lower bound of the
// Linears' own ratio). --stages 1 also times each launch alone (its median over the same
// iterations) and prints the list with its sum, per variant: where the chain's time goes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_fill.h"
#include "bench/decoder_layer_step.h"
#include "common/base/check.h"
#include "common/formats/bf16.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/moe/moe_test_util.h"
#include "kernels/norm_rope/norm_rope.h"

namespace flashserve::bench {
namespace {

using kernels::DeviceBuffer;

struct Options {
  int iters = 20;
  int warmup = 3;
  bool stages = false;  // --stages 1: also each launch's own median, per variant
  std::vector<int64_t> tokens = {1024, 2048, 4096};
};

// A Linear's device weight with its bf16 expansion made once beside it (the "kept" variants).
struct KeptWeight {
  DeviceBuffer codes, scales, expanded;
  kernels::Fp8LinearDevice plain, kept;
  KeptWeight(uint64_t seed, int64_t n, int64_t k) {
    Fp8Weight w(seed, n, k);
    codes = std::move(w.codes);
    scales = std::move(w.scales);
    Finish(n, k);
  }
  // The parts' rows stacked, as ConcatLinearRows lays them out (codes, then the 32-row scale
  // blocks; every part but the last has N % 32 == 0), copied on the device.
  KeptWeight(std::initializer_list<const KeptWeight*> parts) {
    int64_t n = 0;
    size_t code_bytes = 0, scale_bytes = 0;
    for (const KeptWeight* p : parts) {
      CHECK_EQ(p->plain.k, (*parts.begin())->plain.k);
      n += p->plain.n;
      code_bytes += p->codes.bytes();
      scale_bytes += p->scales.bytes();
    }
    codes = DeviceBuffer(code_bytes);
    scales = DeviceBuffer(scale_bytes);
    size_t at_code = 0, at_scale = 0;
    for (const KeptWeight* p : parts) {
      CUDA_CHECK(cudaMemcpy(codes.get<uint8_t>() + at_code, p->codes.get<uint8_t>(),
                            p->codes.bytes(), cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaMemcpy(scales.get<uint8_t>() + at_scale, p->scales.get<uint8_t>(),
                            p->scales.bytes(), cudaMemcpyDeviceToDevice));
      at_code += p->codes.bytes();
      at_scale += p->scales.bytes();
    }
    Finish(n, (*parts.begin())->plain.k);
  }
  const kernels::Fp8LinearDevice& view(bool keep) const { return keep ? kept : plain; }

 private:
  void Finish(int64_t n, int64_t k) {
    plain.n = n;
    plain.k = k;
    plain.codes = codes.get<uint8_t>();
    plain.scales = scales.get<uint8_t>();
    expanded = DeviceBuffer(static_cast<size_t>(2 * n * k));
    CHECK_OK(kernels::LaunchExpandFp8Linear(plain, expanded.get<uint16_t>(), nullptr));
    kept = plain;
    kept.expanded = expanded.get<uint16_t>();
  }
};

DeviceBuffer Bf16(int64_t n) { return DeviceBuffer(static_cast<size_t>(2 * n)); }

class Chain {
 public:
  explicit Chain(int64_t max_m) : max_m_(max_m) {
    uint64_t seed = 500;
    wq_a_ = std::make_unique<KeptWeight>(seed++ * 7, kQLora, kD);
    wkv_ = std::make_unique<KeptWeight>(seed++ * 7, kHeadDim, kD);
    wq_b_ = std::make_unique<KeptWeight>(seed++ * 7, kHeads * kHeadDim, kQLora);
    idx_wq_b_ = std::make_unique<KeptWeight>(seed++ * 7, kIdxHeads * kIdxDim, kQLora);
    wo_b_ = std::make_unique<KeptWeight>(seed++ * 7, kD, kOGroups * kOLora);
    wq_a_wkv_ = std::make_unique<KeptWeight>(
        std::initializer_list<const KeptWeight*>{wq_a_.get(), wkv_.get()});
    wq_b_idx_ = std::make_unique<KeptWeight>(
        std::initializer_list<const KeptWeight*>{wq_b_.get(), idx_wq_b_.get()});
    const auto shared = kernels::moe_test::RandomSharedExpert(kD, kInter, seed++);
    shared_ = kernels::moe_test::UploadSharedExpert(shared, /*fused=*/true);
    shared_kept_ = kernels::moe_test::UploadSharedExpert(shared, /*fused=*/true, true);
    for (DeviceBuffer* b : {&attn_w_, &ffn_w_}) *b = Bf16(kD);
    q_w_ = Bf16(kQLora);
    FillBf16(seed++, kD, 1.0f, attn_w_.get<uint16_t>());
    FillBf16(seed++, kD, 1.0f, ffn_w_.get<uint16_t>());
    FillBf16(seed++, kQLora, 1.0f, q_w_.get<uint16_t>());
    x_ = Bf16(max_m * kD);
    x2_ = Bf16(max_m * kD);
    o_ = Bf16(max_m * kOGroups * kOLora);
    FillBf16(seed++, static_cast<size_t>(max_m * kD), 2.0f, x_.get<uint16_t>());
    FillBf16(seed++, static_cast<size_t>(max_m * kD), 2.0f, x2_.get<uint16_t>());
    FillBf16(seed++, static_cast<size_t>(max_m * kOGroups * kOLora), 2.0f, o_.get<uint16_t>());
    for (DeviceBuffer* b : {&xn_, &xq_, &fx_, &fxq_}) *b = Bf16(max_m * kD);
    for (DeviceBuffer* b : {&qr_, &qn_, &qq_}) *b = Bf16(max_m * kQLora);
    qkv_ = Bf16(max_m * kQkvCols);
    qi_ = Bf16(max_m * kQiCols);
    size_t ws = 0;
    for (const KeptWeight* w : {wq_a_.get(), wkv_.get(), wq_b_.get(), idx_wq_b_.get(), wo_b_.get(),
                                wq_a_wkv_.get(), wq_b_idx_.get()}) {
      ws = std::max(ws, kernels::LinearCudaWorkspaceBytes(w->plain, max_m));
    }
    lin_ws_ = DeviceBuffer(ws);
    auto shared_ws = kernels::MoeSharedExpertWorkspaceBytes(shared_->view, max_m);
    CHECK_OK(shared_ws.status());
    shared_ws_ = DeviceBuffer(*shared_ws);
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  // The outputs of one variant's chain at m tokens.
  struct Outputs {
    DeviceBuffer q, kv, iq, ao, sy;
  };
  Outputs MakeOutputs() const {
    return {Bf16(max_m_ * kHeads * kHeadDim), Bf16(max_m_ * kHeadDim),
            Bf16(max_m_ * kIdxHeads * kIdxDim), Bf16(max_m_ * kD), Bf16(max_m_ * kD)};
  }

  // One launch of the chain (a norm, a Linear, the shared expert), for the per-stage times.
  struct Stage {
    std::string name;
    std::function<void()> launch;
  };

  // The chain's launches in order. stacked: wq_a | wkv and wq_b | indexer wq_b run as one Linear
  // each, into the wide buffers (UnpackStacked copies their columns out to `out`, outside the
  // timed chain).
  std::vector<Stage> Stages(int64_t m, bool x_qdq, bool keep, bool stacked, Outputs& out,
                            cudaStream_t st) {
    std::vector<Stage> stages;
    auto norm = [&](const char* name, const uint16_t* x, int64_t x_stride, const DeviceBuffer& w,
                    int64_t cols, DeviceBuffer& y, DeviceBuffer* yq) {
      kernels::RmsNormParams p;
      p.rows = m;
      p.cols = cols;
      p.x = x;
      p.x_stride = x_stride;
      p.weight_bf16 = w.get<uint16_t>();
      p.eps = 1e-6f;
      p.out = y.get<uint16_t>();
      p.out_stride = cols;
      if (yq != nullptr) {
        p.out_qdq = yq->get<uint16_t>();
        p.out_qdq_stride = cols;
      }
      stages.push_back({name, [p, st] { CHECK_OK(kernels::LaunchRmsNorm(p, st)); }});
    };
    auto linear = [&](const char* name, const KeptWeight& w, const DeviceBuffer& x, bool qdq,
                      DeviceBuffer& y) {
      kernels::LinearCudaParams p;
      p.weight = &w.view(keep);
      p.m = m;
      p.x_bf16 = x.get<uint16_t>();
      p.x_stride = p.weight->k;
      p.x_qdq = qdq;
      p.y_bf16 = y.get<uint16_t>();
      p.y_stride = p.weight->n;  // a stacked Linear's output is its wide buffer
      p.workspace = lin_ws_.get();
      p.workspace_bytes = lin_ws_.bytes();
      stages.push_back({name, [p, st] { CHECK_OK(kernels::LaunchLinearFp8(p, st)); }});
    };
    norm("attn_norm", x_.get<uint16_t>(), kD, attn_w_, kD, xn_, x_qdq ? &xq_ : nullptr);
    const DeviceBuffer& attn_in = x_qdq ? xq_ : xn_;
    if (stacked) {
      linear("wq_a|wkv", *wq_a_wkv_, attn_in, x_qdq, qkv_);
      norm("q_norm", qkv_.get<uint16_t>(), kQkvCols, q_w_, kQLora, qn_, x_qdq ? &qq_ : nullptr);
    } else {
      linear("wq_a", *wq_a_, attn_in, x_qdq, qr_);
      linear("wkv", *wkv_, attn_in, x_qdq, out.kv);
      norm("q_norm", qr_.get<uint16_t>(), kQLora, q_w_, kQLora, qn_, x_qdq ? &qq_ : nullptr);
    }
    const DeviceBuffer& q_in = x_qdq ? qq_ : qn_;
    if (stacked) {
      linear("wq_b|idx_wq_b", *wq_b_idx_, q_in, x_qdq, qi_);
    } else {
      linear("wq_b", *wq_b_, q_in, x_qdq, out.q);
      linear("idx_wq_b", *idx_wq_b_, q_in, x_qdq, out.iq);
    }
    linear("wo_b", *wo_b_, o_, false, out.ao);
    norm("ffn_norm", x2_.get<uint16_t>(), kD, ffn_w_, kD, fx_, x_qdq ? &fxq_ : nullptr);
    kernels::MoeSharedExpertParams sp;
    sp.weights = keep ? &shared_kept_->view : &shared_->view;
    sp.m = m;
    sp.x = (x_qdq ? fxq_ : fx_).get<uint16_t>();
    sp.x_stride = kD;
    sp.x_qdq = x_qdq;
    sp.y = out.sy.get<uint16_t>();
    sp.y_stride = kD;
    sp.workspace = shared_ws_.get();
    sp.workspace_bytes = shared_ws_.bytes();
    stages.push_back(
        {"shared expert", [sp, st] { CHECK_OK(kernels::LaunchMoeSharedExpert(sp, st)); }});
    return stages;
  }

  // A stacked chain's kv, q and indexer q, copied out of the wide buffers into `out`.
  void UnpackStacked(int64_t m, Outputs& out, cudaStream_t st) const {
    auto cols = [&](const DeviceBuffer& wide, int64_t wide_cols, int64_t at, int64_t n,
                    DeviceBuffer& to) {
      CUDA_CHECK(cudaMemcpy2DAsync(to.get<uint16_t>(), 2 * n, wide.get<uint16_t>() + at,
                                   2 * wide_cols, 2 * n, m, cudaMemcpyDeviceToDevice, st));
    };
    cols(qkv_, kQkvCols, kQLora, kHeadDim, out.kv);
    cols(qi_, kQiCols, 0, kHeads * kHeadDim, out.q);
    cols(qi_, kQiCols, kHeads * kHeadDim, kIdxHeads * kIdxDim, out.iq);
  }

  // The GEMM FLOPs of the chain at m tokens.
  static double Flops(int64_t m) {
    const double per_token =
        double{kQLora} * kD + double{kHeadDim} * kD + double{kHeads} * kHeadDim * kQLora +
        double{kIdxHeads} * kIdxDim * kQLora + double{kD} * kOGroups * kOLora + 3.0 * kInter * kD;
    return 2.0 * m * per_token;
  }

 private:
  int64_t max_m_;
  // wq_b | indexer wq_b's output columns (wq_a | wkv's: kQkvCols, decoder_layer_step.h).
  static constexpr int64_t kQiCols = kHeads * kHeadDim + kIdxHeads * kIdxDim;
  std::unique_ptr<KeptWeight> wq_a_, wkv_, wq_b_, idx_wq_b_, wo_b_, wq_a_wkv_, wq_b_idx_;
  std::unique_ptr<kernels::moe_test::DeviceSharedExpert> shared_, shared_kept_;
  DeviceBuffer attn_w_, ffn_w_, q_w_, x_, x2_, o_, xn_, xq_, fx_, fxq_, qr_, qn_, qq_, qkv_, qi_;
  DeviceBuffer lin_ws_, shared_ws_;
};

// How a variant's bf16 output [m, cols] compares with the default's. Byte for byte, except for
// the stacked variant: a stacked Linear's automatic K splits differ from its parts' (wkv alone
// splits K, the stack may not), which moves some of its outputs by a bf16 ulp, and downstream of
// it (q_norm -> wq_b) the FP8 QDQ of the next Linear's input turns such an ulp into a whole E4M3
// step (2^-3) now and then. So the stacked outputs must agree within rel-RMS 2^-8 over the
// output and 2^-3·(|v| + the row's RMS) per value: a wrong or misplaced column is ~1 and fails.
struct Agreement {
  int64_t differing = 0;  // values whose bits differ
  double rel_rms = 0;     // sqrt(Σ(a - b)² / Σb²)
  double worst = 0;       // max |a - b| / (|b| + the row's RMS of b)
  bool Close() const { return rel_rms <= 0x1p-8 && worst <= 0x1p-3; }
};
Agreement Compare(const DeviceBuffer& a, const DeviceBuffer& b, int64_t m, int64_t cols) {
  const size_t n = static_cast<size_t>(m * cols);
  std::vector<uint16_t> ha(n), hb(n);
  a.CopyToHost(ha.data(), 2 * n);
  b.CopyToHost(hb.data(), 2 * n);
  Agreement g;
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < m; ++r) {
    const uint16_t* ra = ha.data() + r * cols;
    const uint16_t* rb = hb.data() + r * cols;
    double row2 = 0;
    for (int64_t j = 0; j < cols; ++j) row2 += std::pow(formats::Bf16BitsToFloat(rb[j]), 2);
    ref2 += row2;
    const double rms = std::sqrt(row2 / static_cast<double>(cols));
    for (int64_t j = 0; j < cols; ++j) {
      if (ra[j] == rb[j]) continue;
      ++g.differing;
      const double x = formats::Bf16BitsToFloat(ra[j]), y = formats::Bf16BitsToFloat(rb[j]);
      const double d = std::fabs(x - y);
      err2 += d * d;
      const double scaled = d / (std::fabs(y) + rms);
      g.worst = std::isnan(scaled) ? INFINITY : std::max(g.worst, scaled);
    }
  }
  g.rel_rms = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0);
  return g;
}

// Positive integers of a comma list; empty on anything else.
std::vector<int64_t> PositiveList(const std::string& s) {
  std::vector<int64_t> v;
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    char* end = nullptr;
    const std::string item = s.substr(at, comma - at);
    const long long x = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x < 1) return {};
    v.push_back(x);
    at = comma + 1;
  }
  return v;
}

int Main(int argc, char** argv) {
  Options o;
  std::string command = argv[0];
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    const std::vector<int64_t> v =
        i + 1 < argc ? PositiveList(argv[i + 1]) : std::vector<int64_t>{};
    command += " " + flag + (i + 1 < argc ? std::string(" ") + argv[i + 1] : "");
    if (v.empty() || (flag != "--tokens" && v.size() != 1)) {
      std::fprintf(stderr,
                   "bench_prefill_linears: %s needs %s\nusage: %s [--iters N] [--warmup N] "
                   "[--tokens 1024,2048,4096] [--stages 1]\n",
                   flag.c_str(),
                   flag == "--tokens" ? "a list of positive counts" : "a positive count", argv[0]);
      return 2;
    }
    if (flag == "--iters") {
      o.iters = static_cast<int>(v[0]);
    } else if (flag == "--warmup") {
      o.warmup = static_cast<int>(v[0]);
    } else if (flag == "--tokens") {
      o.tokens = v;
    } else if (flag == "--stages" && v[0] == 1) {
      o.stages = true;
    } else {
      std::fprintf(stderr, "bench_prefill_linears: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (!kernels::CudaDeviceAvailable()) {
    std::printf("bench_prefill_linears: no CUDA device\n");
    return 0;
  }
  int64_t max_m = 1;
  for (int64_t m : o.tokens) max_m = std::max(max_m, m);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::string source;
  const double tflops = kernels::MeasureCublasBf16Tflops(&source);
  std::printf("device: %s, %d SMs; median of %d chains after %d warm-up; roof: %s %.0f TFLOP/s\n",
              prop.name, prop.multiProcessorCount, o.iters, o.warmup, source.c_str(), tflops);
  Chain chain(max_m);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  struct Variant {
    const char* name;
    bool x_qdq, keep, stacked;
  };
  const Variant variants[] = {{"default", false, false, false},
                              {"x_qdq", true, false, false},
                              {"kept", false, true, false},
                              {"both", true, true, false},
                              {"stacked", true, true, true}};
  int failures = 0;
  std::printf("%6s %-8s %10s %9s %8s %7s\n", "tokens", "variant", "median_us", "roof_us", "ratio",
              "vs_def");
  for (int64_t m : o.tokens) {
    Chain::Outputs want = chain.MakeOutputs();
    auto run_all = [](const std::vector<Chain::Stage>& stages) {
      for (const Chain::Stage& s : stages) s.launch();
    };
    run_all(chain.Stages(m, false, false, false, want, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    const double roof_us = tflops > 0 ? Chain::Flops(m) / (tflops * 1e6) : 0;
    double base_us = 0;
    for (const Variant& v : variants) {
      Chain::Outputs got = chain.MakeOutputs();
      const std::vector<Chain::Stage> stages = chain.Stages(m, v.x_qdq, v.keep, v.stacked, got, st);
      run_all(stages);
      if (v.stacked) chain.UnpackStacked(m, got, st);
      CUDA_CHECK(cudaStreamSynchronize(st));
      const struct {
        const char* what;
        const DeviceBuffer *a, *b;
        int64_t cols;
      } checks[] = {{"q", &got.q, &want.q, kHeads * kHeadDim},
                    {"kv", &got.kv, &want.kv, kHeadDim},
                    {"indexer q", &got.iq, &want.iq, kIdxHeads * kIdxDim},
                    {"wo_b", &got.ao, &want.ao, kD},
                    {"shared expert", &got.sy, &want.sy, kD}};
      for (const auto& c : checks) {
        const Agreement g = Compare(*c.a, *c.b, m, c.cols);
        if (g.differing > 0 && v.stacked) {
          std::printf(
              "# %s at %ld tokens, variant %s: %ld of %ld values differ from the "
              "default's (other K splits), rel-RMS %.2e, worst %.2e of |v| + row RMS\n",
              c.what, static_cast<long>(m), v.name, static_cast<long>(g.differing),
              static_cast<long>(m * c.cols), g.rel_rms, g.worst);
        }
        if (v.stacked ? !g.Close() : g.differing > 0) {
          std::fprintf(stderr, "MISMATCH: %s at %ld tokens, variant %s\n", c.what,
                       static_cast<long>(m), v.name);
          ++failures;
        }
      }
      const double us = kernels::MedianEventMicros(
          o.warmup, o.iters, [&] { run_all(stages); }, st);
      if (base_us == 0) base_us = us;
      std::printf("%6ld %-8s %10.1f %9.1f %8.2f %7.2f\n", static_cast<long>(m), v.name, us, roof_us,
                  roof_us > 0 ? roof_us / us : 0.0, base_us / us);
      if (o.stages) {
        // Each launch alone (its own median; x and weights warm in L2 as in the chain).
        double sum = 0;
        std::string line;
        for (const Chain::Stage& stage : stages) {
          const double t = kernels::MedianEventMicros(o.warmup, o.iters, stage.launch, st);
          sum += t;
          char item[96];
          std::snprintf(item, sizeof(item), "%s %s %.1f", line.empty() ? "" : ",",
                        stage.name.c_str(), t);
          line += item;
        }
        std::printf("#   stages (µs):%s; sum %.1f\n", line.c_str(), sum);
      }
    }
  }
  CUDA_CHECK(cudaStreamDestroy(st));
  std::printf("command: %s\n", command.c_str());
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace flashserve::bench

int main(int argc, char** argv) { return flashserve::bench::Main(argc, argv); }
