// bench_prefill_linears: the FP8 Linears of one decoder layer at prefill, with the norms that feed
// them, chained on one stream at the released dims — with and without the two passes each Linear
// runs before its GEMM (kernels/gemm/prefill_passes.md):
//
//   attn_norm(x) -> wq_a, wkv;  q_norm(wq_a's output) -> wq_b, indexer wq_b;  wo_b (on a bf16
//   input standing in for wo_a's output);  ffn_norm(x) -> the shared expert (w1|w3, SwiGLU, w2)
//
//   bench_prefill_linears [--iters N] [--warmup N] [--tokens 1024,2048,4096]
//
// Variants per token count: "default" (every Linear QDQs its x and expands its weight per call),
// "x_qdq" (the norms also write their output QDQ'd — RmsNormParams::out_qdq — and the Linears
// and the shared expert take it with x_qdq), "kept" (every FP8 weight keeps its bf16 expansion,
// Fp8LinearDevice::expanded), "both". Each chain is timed whole (the median of N runs between two
// events, after the warm-up). Before timing, every variant's outputs (q, kv, indexer q, wo_b's,
// the shared expert's) are compared with the default's, byte for byte; a difference makes the exit
// code 1. The roof: the chain's GEMM FLOPs at cuBLAS's bf16 rate measured in the same run (the
// Linears are compute-bound at these token counts; the norms and the SwiGLU are left out of it,
// so ratio = roof / chain time is a lower bound of the Linears' own ratio).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_fill.h"
#include "bench/decoder_layer_step.h"
#include "common/base/check.h"
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
  std::vector<int64_t> tokens = {1024, 2048, 4096};
};

// A Linear's device weight with its bf16 expansion made once beside it (the "kept" variants).
struct KeptWeight {
  std::unique_ptr<Fp8Weight> w;
  DeviceBuffer expanded;
  kernels::Fp8LinearDevice kept;
  KeptWeight(uint64_t seed, int64_t n, int64_t k) : w(std::make_unique<Fp8Weight>(seed, n, k)) {
    expanded = DeviceBuffer(static_cast<size_t>(2 * n * k));
    CHECK_OK(kernels::LaunchExpandFp8Linear(w->view, expanded.get<uint16_t>(), nullptr));
    kept = w->view;
    kept.expanded = expanded.get<uint16_t>();
  }
  const kernels::Fp8LinearDevice& view(bool keep) const { return keep ? kept : w->view; }
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
    size_t ws = 0;
    for (const KeptWeight* w :
         {wq_a_.get(), wkv_.get(), wq_b_.get(), idx_wq_b_.get(), wo_b_.get()}) {
      ws = std::max(ws, kernels::LinearCudaWorkspaceBytes(w->w->view, max_m));
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

  void Run(int64_t m, bool x_qdq, bool keep, Outputs& out, cudaStream_t st) {
    auto norm = [&](const DeviceBuffer& x, const DeviceBuffer& w, int64_t cols, DeviceBuffer& y,
                    DeviceBuffer* yq) {
      kernels::RmsNormParams p;
      p.rows = m;
      p.cols = cols;
      p.x = x.get<uint16_t>();
      p.x_stride = cols;
      p.weight_bf16 = w.get<uint16_t>();
      p.eps = 1e-6f;
      p.out = y.get<uint16_t>();
      p.out_stride = cols;
      if (yq != nullptr) {
        p.out_qdq = yq->get<uint16_t>();
        p.out_qdq_stride = cols;
      }
      CHECK_OK(kernels::LaunchRmsNorm(p, st));
    };
    auto linear = [&](const KeptWeight& w, const DeviceBuffer& x, bool qdq, DeviceBuffer& y) {
      kernels::LinearCudaParams p;
      p.weight = &w.view(keep);
      p.m = m;
      p.x_bf16 = x.get<uint16_t>();
      p.x_stride = p.weight->k;
      p.x_qdq = qdq;
      p.y_bf16 = y.get<uint16_t>();
      p.y_stride = p.weight->n;
      p.workspace = lin_ws_.get();
      p.workspace_bytes = lin_ws_.bytes();
      CHECK_OK(kernels::LaunchLinearFp8(p, st));
    };
    norm(x_, attn_w_, kD, xn_, x_qdq ? &xq_ : nullptr);
    const DeviceBuffer& attn_in = x_qdq ? xq_ : xn_;
    linear(*wq_a_, attn_in, x_qdq, qr_);
    linear(*wkv_, attn_in, x_qdq, out.kv);
    norm(qr_, q_w_, kQLora, qn_, x_qdq ? &qq_ : nullptr);
    const DeviceBuffer& q_in = x_qdq ? qq_ : qn_;
    linear(*wq_b_, q_in, x_qdq, out.q);
    linear(*idx_wq_b_, q_in, x_qdq, out.iq);
    linear(*wo_b_, o_, false, out.ao);
    norm(x2_, ffn_w_, kD, fx_, x_qdq ? &fxq_ : nullptr);
    kernels::MoeSharedExpertParams s;
    s.weights = keep ? &shared_kept_->view : &shared_->view;
    s.m = m;
    s.x = (x_qdq ? fxq_ : fx_).get<uint16_t>();
    s.x_stride = kD;
    s.x_qdq = x_qdq;
    s.y = out.sy.get<uint16_t>();
    s.y_stride = kD;
    s.workspace = shared_ws_.get();
    s.workspace_bytes = shared_ws_.bytes();
    CHECK_OK(kernels::LaunchMoeSharedExpert(s, st));
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
  std::unique_ptr<KeptWeight> wq_a_, wkv_, wq_b_, idx_wq_b_, wo_b_;
  std::unique_ptr<kernels::moe_test::DeviceSharedExpert> shared_, shared_kept_;
  DeviceBuffer attn_w_, ffn_w_, q_w_, x_, x2_, o_, xn_, xq_, fx_, fxq_, qr_, qn_, qq_;
  DeviceBuffer lin_ws_, shared_ws_;
};

bool SameBytes(const DeviceBuffer& a, const DeviceBuffer& b, size_t bytes) {
  std::vector<uint8_t> ha(bytes), hb(bytes);
  a.CopyToHost(ha.data(), bytes);
  b.CopyToHost(hb.data(), bytes);
  return ha == hb;
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
                   "[--tokens 1024,2048,4096]\n",
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
    bool x_qdq, keep;
  };
  const Variant variants[] = {{"default", false, false},
                              {"x_qdq", true, false},
                              {"kept", false, true},
                              {"both", true, true}};
  int failures = 0;
  std::printf("%6s %-8s %10s %9s %8s %7s\n", "tokens", "variant", "median_us", "roof_us", "ratio",
              "vs_def");
  for (int64_t m : o.tokens) {
    Chain::Outputs want = chain.MakeOutputs();
    chain.Run(m, false, false, want, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    const double roof_us = tflops > 0 ? Chain::Flops(m) / (tflops * 1e6) : 0;
    double base_us = 0;
    for (const Variant& v : variants) {
      Chain::Outputs got = chain.MakeOutputs();
      chain.Run(m, v.x_qdq, v.keep, got, st);
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
        if (!SameBytes(*c.a, *c.b, static_cast<size_t>(2 * m * c.cols))) {
          std::fprintf(stderr, "MISMATCH: %s at %ld tokens, variant %s\n", c.what,
                       static_cast<long>(m), v.name);
          ++failures;
        }
      }
      const double us = kernels::MedianEventMicros(
          o.warmup, o.iters, [&] { chain.Run(m, v.x_qdq, v.keep, got, st); }, st);
      if (base_us == 0) base_us = us;
      std::printf("%6ld %-8s %10.1f %9.1f %8.2f %7.2f\n", static_cast<long>(m), v.name, us, roof_us,
                  roof_us > 0 ? roof_us / us : 0.0, base_us / us);
    }
  }
  CUDA_CHECK(cudaStreamDestroy(st));
  std::printf("command: %s\n", command.c_str());
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace flashserve::bench

int main(int argc, char** argv) { return flashserve::bench::Main(argc, argv); }
