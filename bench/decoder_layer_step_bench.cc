// bench_decoder_layer_step: one whole DeepSeek-V4.1-Flash decoder layer step on the GPU at the
// released dims, composed of the kernels/ launchers, against its roofline. Its flags, their
// defaults and the measurements behind each are in decoder_layer_step_flags.cc (the usage text
// at its top; bench/README.md lists them too); the step itself is built in decoder_layer_step.cc.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench/decoder_layer_extras.h"
#include "bench/decoder_layer_step.h"
#include "kernels/attention/bench/mma_peak.h"
#include "kernels/attention/cuda/sparse_attn_path.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/gpu_bench.h"
#include "kernels/common/kernel_trace.h"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::bench {
namespace {

struct Roofs {
  double copy_gbps = 0;
  double tc_tflops = 0;
  std::string tc_source;
  double Roof(double bytes, double flops) const {
    return std::max(bytes / copy_gbps / 1e3, flops / tc_tflops / 1e6);  // µs
  }
};

// The queued graph replay (MedianQueuedEventMicros) of one step: `stages` in order, stage `skip`
// (if any) reduced to its joins.
double QueuedGraphMicros(const std::vector<Stage>& stages, size_t skip, const Options& o,
                         cudaStream_t st) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (size_t i = 0; i < stages.size(); ++i) {
    if (i != skip) {
      stages[i].launch();
    } else if (stages[i].joins) {
      stages[i].joins();
    }
  }
  CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph,
                                  o.priorities ? cudaGraphInstantiateFlagUseNodePriority : 0));
  const double us = kernels::MedianQueuedEventMicros(
      o.warmup, o.iters, [&] { CUDA_CHECK(cudaGraphLaunch(exec, st)); }, st);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return us;
}

// --ablate: each main-stream stage's share of the critical path, as the graph time of the step
// without it (its joins kept) subtracted from the whole step's; forked stages stay.
void PrintAblation(const std::vector<Stage>& stages, const Options& o, cudaStream_t st) {
  const double whole = QueuedGraphMicros(stages, stages.size(), o, st);
  std::printf("  critical-path share (graph of the step without the stage; whole %.1f µs):\n",
              whole);
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].settle) continue;  // forked
    const double us = QueuedGraphMicros(stages, i, o, st);
    std::printf("  %-44s %8.1f µs\n", stages[i].name.c_str(), whole - us);
  }
}

void PrintStages(const std::vector<Stage>& stages, const Options& o, const Roofs& r,
                 cudaStream_t st) {
  std::printf("  %-44s %10s %10s %10s %9s %7s\n", "stage", "µs", "MB", "GFLOP", "roof µs", "ratio");
  for (const Stage& s : stages) {
    const double us = kernels::MedianEventMicros(
        o.warmup, o.iters,
        [&] {
          s.launch();
          if (s.settle) s.settle();
        },
        st);
    const double roof = r.Roof(s.bytes, s.flops);
    std::printf("  %-44s %10.1f %10.2f %10.3f %9.1f %7.2f\n", s.name.c_str(), us, s.bytes / 1e6,
                s.flops / 1e9, roof, roof / us);
  }
}

// Runs a group's stages twice; counts non-finite bf16 outputs and whether every output repeats.
template <typename Bf16Fn, typename BytesFn>
bool CheckGroup(const char* what, int64_t b, const std::vector<Stage>& stages, cudaStream_t st,
                Bf16Fn bf16, BytesFn bytes) {
  std::vector<uint16_t> v[2];
  std::vector<uint8_t> raw[2];
  for (int rep = 0; rep < 2; ++rep) {
    for (const Stage& s : stages) s.launch();
    CUDA_CHECK(cudaStreamSynchronize(st));
    v[rep] = bf16();
    raw[rep] = bytes();
  }
  int64_t nonfinite = 0;
  for (uint16_t x : v[0]) nonfinite += (x & 0x7F80) == 0x7F80;
  const bool same = v[0] == v[1] && raw[0] == raw[1];
  if (nonfinite != 0 || !same) {
    std::printf("CHECK FAILED: %s at %ld tokens: %ld non-finite outputs, repeat %s\n", what,
                static_cast<long>(b), static_cast<long>(nonfinite), same ? "identical" : "DIFFERS");
    return false;
  }
  return true;
}

void PrintGroup(const char* title, int64_t b, const std::vector<Stage>& stages, const Options& o,
                const Roofs& r, cudaStream_t st) {
  double bytes = 0, flops = 0;
  for (const Stage& s : stages) {
    bytes += s.bytes;
    flops += s.flops;
  }
  const double us = kernels::MedianEventMicros(
      o.warmup, o.iters,
      [&] {
        for (const Stage& s : stages) s.launch();
      },
      st);
  const double roof = r.Roof(bytes, flops);
  std::printf(
      "\n%s, %ld tokens: %.1f µs, %zu stages, %.1f MB, %.3f GFLOP, roof %.1f µs, ratio %.2f\n",
      title, static_cast<long>(b), us, stages.size(), bytes / 1e6, flops / 1e9, roof, roof / us);
  if (o.stages) PrintStages(stages, o, r, st);
}

// The optional groups of decoder_layer_extras.h for the --extra-tokens batch sizes.
int RunExtras(const Options& o, const Roofs& roofs, cudaStream_t st) {
  int64_t max_b = 0;
  for (int64_t b : o.extra_tokens) max_b = std::max(max_b, b);
  for (int64_t ratio : o.compress_ratios) {
    if (ratio != 1 && ratio != 2) {
      std::printf("--compress-ratios: %ld is not a ratio of the model (1 or 2)\n",
                  static_cast<long>(ratio));
      return 1;
    }
  }
  LayerExtras extras(o, max_b, st);
  int status = 0;
  for (int64_t ratio : o.compress_ratios) {
    for (int64_t b : o.extra_tokens) {
      std::vector<Stage> stages = extras.CompressorStages(b, ratio);
      if (!CheckGroup(
              "compressor", b, stages, st, [&] { return extras.CompressorBf16(b); },
              [&] { return extras.CompressorBytes(b); })) {
        status = 1;
      }
      // Every row keeps between 1 (the pinned newest block) and 2048 blocks of 8 positions.
      for (int64_t t = 0; ratio == 1 && t < b; ++t) {
        const int64_t n = extras.CandidateCount(b, t);
        if (n < 1 || n > kCandidateTopkBlocks * kCandidateBlock) {
          std::printf("CHECK FAILED: candidate row %ld marks %ld positions\n", static_cast<long>(t),
                      static_cast<long>(n));
          status = 1;
        }
      }
      PrintGroup(ratio == 1
                     ? "Compressing layer's compressor (added to the step), layer 20, ratio 1"
                     : "Compressing layer's compressor (added to the step), layers 2/8/14, "
                       "ratio 2, a step that emits",
                 b, stages, o, roofs, st);
    }
  }
  for (int64_t b : o.extra_tokens) {
    std::vector<Stage> stages = extras.EngramStages(b);
    if (!CheckGroup(
            "engram", b, stages, st, [&] { return extras.EngramOutput(b); },
            [] { return std::vector<uint8_t>(); })) {
      status = 1;
    }
    PrintGroup("Engram layer's memory (added to the step), layers 1 and 14", b, stages, o, roofs,
               st);
  }
  return status;
}

int Run(const Options& o) {
  if (!kernels::CudaDeviceAvailable()) {
    std::printf("bench_decoder_layer_step: no CUDA device\n");
    return 0;
  }
  {
    using kernels::attention_internal::SparseAttnCombineForm;
    const std::string& f = o.attn_combine;
    kernels::attention_internal::SetSparseAttnCombineFormOverride(
        f == "cluster"      ? SparseAttnCombineForm::kCluster
        : f == "shared"     ? SparseAttnCombineForm::kShared
        : f == "per-thread" ? SparseAttnCombineForm::kPerThread
                            : SparseAttnCombineForm::kAuto);
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  Roofs roofs;
  roofs.copy_gbps = kernels::MeasureD2dCopyGbps(size_t{1} << 30, 10);
  const kernels::attn_bench::Bf16TensorRates rates = kernels::attn_bench::MeasureBf16TensorRates();
  roofs.tc_source = rates.cublas_source;
  roofs.tc_tflops = rates.dense;
  std::printf("device %s; d2d copy %.0f GB/s; mma.sync bf16 %.0f TFLOP/s; %s %.0f TFLOP/s\n",
              prop.name, roofs.copy_gbps, rates.mma, roofs.tc_source.c_str(), rates.cublas);
  std::printf(
      "decoder layer step, context %ld, window %ld + top-%ld rows (%s), D %ld, 64 x 512 heads\n",
      static_cast<long>(o.context), static_cast<long>(kWindow), static_cast<long>(kTopk),
      o.kv_rows ? "FP8 / FP4 serving rows" : "bf16 pool", static_cast<long>(kD));
  int64_t max_b = 0;
  for (int64_t b : o.tokens) max_b = std::max(max_b, b);
  for (int64_t b : o.reindex_tokens) max_b = std::max(max_b, b);
  if (o.trace) {  // on before any graph is captured
    const absl::Status s = kernels::EnableKernelTrace();
    std::printf("kernel trace (CUPTI, every kernel of this run recorded): %s\n",
                s.ok() ? "on" : s.ToString().c_str());
  }
  LayerStep step(o, max_b);
  cudaStream_t st = step.stream();
  int status = 0;

  const bool prefetch_ab = o.l2_prefetch_list.size() > 1 || o.l2_prefetch_list[0] != 0;
  const bool loop = o.overlap && o.fuse_boundary && o.layer_loop;
  for (int64_t b : o.tokens) {
    for (int64_t prefetch_mb : o.l2_prefetch_list) {
      step.SetL2PrefetchMb(prefetch_mb);
      std::vector<Stage> stages = step.ReuseStages(b, o.overlap);
      if (loop) step.PrepareLoopInput(b);  // the input the loop form's step reads
      auto run_step = [&] {
        for (const Stage& s : stages) s.launch();
      };
      if (o.overlap) {
        // The overlapped schedule must give the one-stream schedule's bits (hc_pre is the fused
        // collapse's exact order; the mixes are the same launch without the collapse; the forked
        // branches compute what they computed in order).
        for (const Stage& s : step.ReuseStages(b, false)) s.launch();
        CUDA_CHECK(cudaStreamSynchronize(st));
        const std::vector<uint16_t> z_fused = step.Output(b);
        const std::vector<uint32_t> pre_fused = step.FfnPre(b);
        const std::vector<uint16_t> next_fused = step.NextInput(b);
        const std::vector<uint16_t> q_fused = step.QNormed(b);
        step.PoisonBranchOutputs(b);
        run_step();
        CUDA_CHECK(cudaStreamSynchronize(st));
        const bool same = step.Output(b) == z_fused && step.FfnPre(b) == pre_fused &&
                          step.QNormed(b) == q_fused && (!loop || step.NextInput(b) == next_fused);
        std::printf("%ld tokens: overlapped branches vs one stream: %s\n", static_cast<long>(b),
                    same ? "bit-identical" : "DIFFER");
        if (!same) {
          std::printf("CHECK FAILED at %ld tokens: the overlapped schedule differs\n",
                      static_cast<long>(b));
          status = 1;
        }
      }
      // Check: finite and deterministic.
      run_step();
      CUDA_CHECK(cudaStreamSynchronize(st));
      if (!step.StackedQkvAgrees(b)) status = 1;
      {  // the row form computes the bf16 form's bits on the same KV
        const bool agree = step.AttentionFormsAgree(b);
        std::printf("%ld tokens: attention on the serving rows vs the decoded bf16 pool: %s\n",
                    static_cast<long>(b), agree ? "bit-identical" : "DIFFER");
        if (!agree) status = 1;
        run_step();  // the step's own state again
        CUDA_CHECK(cudaStreamSynchronize(st));
      }
      const std::vector<uint16_t> z1 = step.Output(b);
      step.CopyExpertIds(true);  // for TouchedExperts below; the capture and timing run without
      run_step();
      CUDA_CHECK(cudaStreamSynchronize(st));
      step.CopyExpertIds(false);
      const std::vector<uint16_t> z2 = step.Output(b);
      int64_t nonfinite = 0;
      for (uint16_t v : z1) nonfinite += (v & 0x7F80) == 0x7F80;
      const bool same = std::memcmp(z1.data(), z2.data(), z1.size() * 2) == 0;
      if (nonfinite != 0 || !same) {
        std::printf("CHECK FAILED at %ld tokens: %ld non-finite outputs, repeat %s\n",
                    static_cast<long>(b), static_cast<long>(nonfinite),
                    same ? "identical" : "DIFFERS");
        status = 1;
      }
      const int64_t experts = step.TouchedExperts(b);
      for (Stage& s : stages) {
        if (s.name.rfind("MoE", 0) == 0) {
          const double expert_bytes = 3.0 * kInter * (kD / 2 + kD / 32);
          const double shared_bytes = 3.0 * kInter * kD + 3.0 * kInter * kD / 1024;
          s.bytes = experts * expert_bytes + shared_bytes + b * (kD * 2 * 2 + kExperts * 4.0);
          // The FFN hc_post's bytes where the combine applies it (--moe-hc-post 1): the same
          // roof as its own stage's.
          if (s.name.find("hc_post") != std::string::npos)
            s.bytes += b * kD * 2.0 * (1 + 2 * kStreams);
        }
      }
      double bytes = 0, flops = 0;
      for (const Stage& s : stages) {
        bytes += s.bytes;
        flops += s.flops;
      }
      const double us = kernels::MedianEventMicros(o.warmup, o.iters, run_step, st);
      // CUDA graph of one step.
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      run_step();
      CUDA_CHECK(cudaStreamEndCapture(st, &graph));
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph,
                                      o.priorities ? cudaGraphInstantiateFlagUseNodePriority : 0));
      const double graph_us = kernels::MedianEventMicros(
          o.warmup, o.iters, [&] { CUDA_CHECK(cudaGraphLaunch(exec, st)); }, st);
      // The same replays queued behind a held stream: the device time alone, and the host's
      // enqueue time per graph launch (if that is above the device time, graph_us measures it).
      double host_launch_us = 0;
      const double queued_us = kernels::MedianQueuedEventMicros(
          o.warmup, o.iters, [&] { CUDA_CHECK(cudaGraphLaunch(exec, st)); }, st, &host_launch_us);
      size_t graph_nodes = 0;
      CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &graph_nodes));
      absl::StatusOr<std::vector<kernels::KernelRecord>> trace;
      if (o.trace) {  // one more replay, traced (the replays above warmed it)
        trace = kernels::TraceKernels([&] { CUDA_CHECK(cudaGraphLaunch(exec, st)); });
      }
      CUDA_CHECK(cudaGraphExecDestroy(exec));
      CUDA_CHECK(cudaGraphDestroy(graph));
      const double roof = roofs.Roof(bytes, flops);
      const std::string prefetch =
          prefetch_ab ? ", L2 prefetch " + std::to_string(prefetch_mb) + " MB" : "";
      std::printf(
          "\nReuse layer, %ld tokens%s: step %.1f µs (graph %.1f µs), %zu stages, %.1f MB, %.2f "
          "GFLOP, %.1f TFLOP/s, experts touched %ld, roof %.1f µs, ratio %.2f (graph %.2f)\n",
          static_cast<long>(b), prefetch.c_str(), us, graph_us, stages.size(), bytes / 1e6,
          flops / 1e9, flops / us / 1e6, static_cast<long>(experts), roof, roof / us,
          roof / graph_us);
      std::printf(
          "  graph of %zu nodes: replays queued behind a held stream %.1f µs (ratio %.2f); host "
          "enqueue %.1f µs per graph launch\n",
          graph_nodes, queued_us, roof / queued_us, host_launch_us);
      if (o.trace) {
        if (trace.ok()) {
          std::printf("  kernel trace of one graph replay (CUPTI):\n");
          kernels::PrintKernelTrace(*trace, "    ");
        } else {
          std::printf("  kernel trace: %s\n", trace.status().ToString().c_str());
        }
      }
      if (o.stages) PrintStages(stages, o, roofs, st);
      if (o.ablate) PrintAblation(stages, o, st);
    }
  }

  for (int64_t b : o.reindex_tokens) {
    std::vector<Stage> stages = step.IndexerStages(b);
    auto run = [&] {
      for (const Stage& s : stages) s.launch();
    };
    run();
    CUDA_CHECK(cudaStreamSynchronize(st));
    // Every top-k entry is a window-offset position in [W, W + L) or −1 (none expected here).
    const std::vector<int32_t> topk = step.TopkOutput(b);
    int64_t bad = 0;
    for (int32_t v : topk) bad += v < kWindow || v >= kWindow + o.context;
    if (bad != 0) {
      std::printf("CHECK FAILED: %ld top-k entries out of range\n", static_cast<long>(bad));
      status = 1;
    }
    // The batched stages against the per-sequence launches, bit for bit.
    const std::vector<uint16_t> scores = step.ScoresOutput(b);
    step.LaunchIndexerPerSequence(b);
    CUDA_CHECK(cudaStreamSynchronize(st));
    const std::vector<uint16_t> scores_seq = step.ScoresOutput(b);
    const std::vector<int32_t> topk_seq = step.TopkOutput(b);
    int64_t score_diff = 0, topk_diff = 0;
    for (size_t i = 0; i < scores.size(); ++i) score_diff += scores[i] != scores_seq[i];
    for (size_t i = 0; i < topk.size(); ++i) topk_diff += topk[i] != topk_seq[i];
    std::printf(
        "Indexer %ld tokens: batched vs per-sequence launches: %ld score, %ld top-k "
        "mismatches\n",
        static_cast<long>(b), static_cast<long>(score_diff), static_cast<long>(topk_diff));
    if (score_diff != 0 || topk_diff != 0) {
      std::printf("CHECK FAILED: the batched indexer differs from the per-sequence launches\n");
      status = 1;
    }
    double bytes = 0, flops = 0;
    for (const Stage& s : stages) {
      bytes += s.bytes;
      flops += s.flops;
    }
    const double us = kernels::MedianEventMicros(o.warmup, o.iters, run, st);
    const double roof = roofs.Roof(bytes, flops);
    std::printf(
        "\nReindex layer's indexer (added to the Reuse step), %ld tokens, %ld keys each: %.1f µs, "
        "%.1f MB, roof %.1f µs, ratio %.2f\n",
        static_cast<long>(b), static_cast<long>(o.context), us, bytes / 1e6, roof, roof / us);
    if (o.stages) PrintStages(stages, o, roofs, st);
  }
  if (!o.extra_tokens.empty()) status |= RunExtras(o, roofs, st);
  return status;
}

}  // namespace
}  // namespace flashserve::bench

int main(int argc, char** argv) {
  return flashserve::bench::Run(flashserve::bench::ParseDecoderLayerStepOptions(argc, argv));
}
