// MoeCuda (the whole routed layer, plus the shared expert: either its output computed on the host
// the way MoeCpu computes it, or run by MoeCuda itself on the GPU from DeviceFp8Linears uploaded
// from the same PreparedLinears MoeCpu uses) against MoeCpu in exact mode, on seeded random FP4
// experts with realistic scales (2^-9 .. 2^-5) and on the v41-tiny fixture's layer-0 weights with
// the golden layer-0 stream.
//
// Tolerances (README.md "CUDA"): the GPU sums each GEMM in another fp32 order than LinearCpu, so
// a g / u / expert output can round to the neighbouring bf16 (rare: the fp32 difference is ~1e-7
// relative against a bf16 step of 4e-3), which can move an FP8 code of a by one step and an
// expert output by ~2^-3·|a_i·w_i|; exp / log1p are correctly rounded on the GPU. The GPU shared
// expert's GEMMs (kernels/gemm) likewise differ from LinearCpu in fp32 order only. So, per case:
//   routes:  expert ids identical (no near ties by construction), weights within 4 fp32 ulp;
//   outputs: rel-RMS(y_gpu − y_cpu) <= 2^-8 (one bf16 step), max |y_gpu − y_cpu| <= 2^-5 ·
//            max |y_cpu|, and >= 95 % of the outputs within one bf16 ulp of the CPU's.
// Any indexing, layout or scale bug moves whole rows by O(|y|), far outside these bounds.
// Every case runs with each expert GEMM forced (MoeCudaParams::gemm; kAuto picks one of them);
// with the TMA ring also with MoeCudaParams::ring_fused_combine off, whose y must be the same
// bytes; with the register-sourced GEMM on 128-row tiles first, then on the tiles by slot rows
// per expert (the default) and on 32-, 48-, 64-, 80- and 96-row tiles (rs_tile_rows), whose y
// must be the same bytes; with every other GEMM also with the
// register-sourced GEMM for the down projection (MoeCudaParams::down_gemm).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/formats/bf16.h"
#include "common/safetensors/safetensors.h"
#include "gtest/gtest.h"
#include "kernels/common/gpu_test_util.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

using formats::Bf16BitsToFloat;
using formats::FloatToBf16Bits;
using moe_test::Poisoned;

struct GpuRun {
  std::vector<uint16_t> y;  // dense [m, D]
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// The names of the kernels `graph` launches (its kernel nodes, in node order).
std::vector<std::string> KernelNames(cudaGraph_t graph) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  std::vector<std::string> names;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams kp{};
    CUDA_CHECK(cudaGraphKernelNodeGetParams(node, &kp));
    const char* name = nullptr;
    CUDA_CHECK(cudaFuncGetName(&name, kp.func));
    names.emplace_back(name != nullptr ? name : "?");
  }
  return names;
}

// MoeCuda on host inputs; y written with a padded stride (checked untouched).
// `shared`: the GPU shared expert (then shared_y must be empty). `kernels`: when set, the call is
// captured in a CUDA graph, the names of its kernels stored there, and the graph launched.
GpuRun RunMoeCuda(const MoeCudaWeights& w, const MoeOptions& o, const std::vector<float>& logits,
                  const std::vector<uint16_t>& x, const std::vector<uint8_t>& image,
                  const std::vector<uint16_t>& shared_y, int64_t m,
                  const MoeSharedExpertWeights* shared = nullptr,
                  MoeCudaGemm gemm = MoeCudaGemm::kAuto, bool ring_fused_combine = true,
                  MoeCudaRingCut ring_cut = MoeCudaRingCut::kAuto,
                  MoeCudaGemm down_gemm = MoeCudaGemm::kAuto, int64_t rs_tile_rows = 0,
                  int64_t rs_min_slots_per_expert = 0,
                  std::vector<std::string>* kernels = nullptr) {
  const int64_t d = w.dim, y_stride = d + 8, k = o.top_k;
  DeviceBuffer d_logits = ToDevice(logits), d_x = ToDevice(x), d_image = ToDevice(image),
               d_shared = ToDevice(shared_y);
  DeviceBuffer y = Poisoned<uint16_t>(m * y_stride), ids = Poisoned<int32_t>(m * k),
               wts = Poisoned<float>(m * k);
  auto bytes = MoeCudaWorkspaceBytes(w, m, k, shared);
  CHECK_OK(bytes.status());
  DeviceBuffer ws(*bytes);
  MoeCudaParams p;
  p.weights = &w;
  p.options = o;
  p.m = m;
  p.logits = d_logits.get<float>();
  p.x = d_x.get<uint16_t>();
  p.x_stride = d;
  p.is_image = image.empty() ? nullptr : d_image.get<uint8_t>();
  p.shared = shared;
  p.shared_y = shared_y.empty() ? nullptr : d_shared.get<uint16_t>();
  p.shared_y_stride = d;
  p.y = y.get<uint16_t>();
  p.y_stride = y_stride;
  p.expert_ids = ids.get<int32_t>();
  p.expert_weights = wts.get<float>();
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  p.gemm = gemm;
  p.ring_fused_combine = ring_fused_combine;
  p.ring_cut = ring_cut;
  p.down_gemm = down_gemm;
  p.rs_tile_rows = rs_tile_rows;
  p.rs_min_slots_per_expert = rs_min_slots_per_expert;
  if (kernels == nullptr) {
    CHECK_OK(MoeCuda(p, nullptr));
  } else {
    CUDA_CHECK(cudaDeviceSynchronize());  // the uploads and poisons above (legacy stream)
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(MoeCuda(p, stream));
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    *kernels = KernelNames(graph);
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
  GpuRun r{std::vector<uint16_t>(m * d), ToHost<int32_t>(ids, m * k), ToHost<float>(wts, m * k)};
  const auto padded = ToHost<uint16_t>(y, m * y_stride);
  for (int64_t t = 0; t < m; ++t) {
    std::copy_n(padded.begin() + t * y_stride, d, r.y.begin() + t * d);
    for (int64_t c = d; c < y_stride; ++c) EXPECT_EQ(padded[t * y_stride + c], 0xA5A5) << t;
  }
  return r;
}

// The tolerance checks of the file comment, over the rows of tokens in `rows` (all when empty).
void ExpectClose(const char* name, const GpuRun& gpu, const moe_test::CpuRun& cpu, int64_t dim,
                 int64_t k, const std::vector<bool>& rows) {
  std::vector<uint16_t> got, want;
  double worst_w = 0;
  int64_t bad_ids = 0, tokens = 0;
  for (size_t t = 0; t * dim < cpu.y.size(); ++t) {
    if (!rows.empty() && !rows[t]) continue;
    ++tokens;
    got.insert(got.end(), gpu.y.begin() + t * dim, gpu.y.begin() + (t + 1) * dim);
    want.insert(want.end(), cpu.y.begin() + t * dim, cpu.y.begin() + (t + 1) * dim);
    for (int64_t j = 0; j < k; ++j) {
      bad_ids += gpu.ids[t * k + j] != cpu.ids[t * k + j];
      worst_w =
          std::max(worst_w, moe_test::F32Ulps(gpu.weights[t * k + j], cpu.weights[t * k + j]));
    }
  }
  EXPECT_EQ(bad_ids, 0);
  EXPECT_LE(worst_w, 4.0);
  const moe_test::Diff d = moe_test::Compare(got, want);
  std::printf(
      "%s: %ld tokens, ids identical: %s, weights within %.0f ulp; y: rel-RMS %.2e, max abs %.3g "
      "(max |y| %.3g), %.4f %% within 1 ulp, %.4f %% bit-identical\n",
      name, static_cast<long>(tokens), bad_ids == 0 ? "yes" : "NO", worst_w, d.rel_rms, d.max_abs,
      d.max_ref, 100.0 * d.within_ulp / std::max<int64_t>(d.n, 1),
      100.0 * d.identical / std::max<int64_t>(d.n, 1));
  EXPECT_LE(d.rel_rms, 0x1.0p-8);
  EXPECT_LE(d.max_abs, 0x1.0p-5 * d.max_ref);
  EXPECT_GE(d.within_ulp, 0.95 * d.n);
}

std::string GemmTag(MoeCudaGemm gemm) { return std::string(" [") + MoeCudaGemmName(gemm) + "]"; }

struct LayerCase {
  const char* name;
  int64_t n_experts, dim, inter, top_k, m;
  int64_t shared_inter;  // 0: no shared expert
  bool image;            // every third token flagged image (bias_vl)
  int bias_mode;         // 0: random ±0.2; 1: expert 3 always first; 2: experts 0..3 never chosen;
                  // 3: only experts 0..15 chosen (many slot rows per expert at few host experts)
  float route_scale, swiglu_limit, gate_temp;
  bool norm;
  // With shared_inter > 0: 0 = its output computed on the host and passed as shared_y; 1 = run
  // by MoeCuda (w1, w3 separate); 2 = run by MoeCuda with w1 / w3 fused into w13.
  int gpu_shared = 0;
};

void RunCase(const LayerCase& c) {
  SCOPED_TRACE(c.name);
  const uint64_t seed = static_cast<uint64_t>(c.n_experts * 1000 + c.m);
  moe_test::LayerSpec spec{c.n_experts, c.dim, c.inter, seed, moe_test::WeightKind::kRealistic};
  MoeOptions o;
  o.top_k = c.top_k;
  o.route_scale = c.route_scale;
  o.swiglu_limit = c.swiglu_limit;
  o.gate_temp = c.gate_temp;
  o.norm_topk_prob = c.norm;
  auto bias = moe_test::RandomBias(c.n_experts, 0.2f, seed + 1);
  if (c.bias_mode == 1) bias[3] = 50.f;
  if (c.bias_mode == 2) std::fill_n(bias.begin(), 4, -50.f);
  if (c.bias_mode == 3) std::fill(bias.begin() + 16, bias.end(), -50.f);
  const auto bias_vl = moe_test::RandomBias(c.n_experts, 0.2f, seed + 2);
  std::vector<uint8_t> image;
  if (c.image) {
    image.assign(c.m, 0);
    for (int64_t t = 0; t < c.m; t += 3) image[t] = 1;
  }
  const auto gate = moe_test::RandomGate(c.n_experts, c.dim, seed + 3);
  std::vector<uint16_t> x;
  const auto logits = moe_test::ClearRoutingActivations(*gate, bias.data(), bias_vl.data(),
                                                        c.image ? image.data() : nullptr, o, c.m,
                                                        c.dim, seed + 4, &x);
  // Routing on the host first: only the experts it reaches are built for the CPU.
  std::vector<int32_t> ids(c.m * c.top_k);
  std::vector<float> wts(c.m * c.top_k);
  MoeRouteParams rp{o,
                    c.m,
                    c.n_experts,
                    logits.data(),
                    bias.data(),
                    bias_vl.data(),
                    c.image ? image.data() : nullptr,
                    ids.data(),
                    wts.data()};
  ASSERT_TRUE(MoeRouteCpu(rp, nullptr).ok());
  std::vector<bool> used(c.n_experts, false);
  for (int32_t id : ids) used[id] = true;
  const auto cpu_experts = moe_test::BuildCpuExperts(spec, used);
  moe_test::SharedExpert shared;
  std::vector<uint16_t> shared_y;
  std::unique_ptr<moe_test::DeviceSharedExpert> dev_shared;
  if (c.shared_inter > 0) {
    shared = moe_test::RandomSharedExpert(c.dim, c.shared_inter, seed + 5);
    if (c.gpu_shared == 0) {
      shared_y = moe_test::SharedExpertOutput(shared, x, c.m, c.dim, c.swiglu_limit);
    } else {
      dev_shared = moe_test::UploadSharedExpert(shared, c.gpu_shared == 2);
    }
  }
  const MoeWeights w{c.n_experts,
                     gate.get(),
                     bias.data(),
                     bias_vl.data(),
                     cpu_experts->w(moe_test::kW1),
                     cpu_experts->w(moe_test::kW3),
                     cpu_experts->w(moe_test::kW2),
                     shared.w1.get(),
                     shared.w3.get(),
                     shared.w2.get()};
  const auto cpu = moe_test::RunMoeCpu(w, o, x, c.m, c.image ? image.data() : nullptr);
  ASSERT_EQ(cpu.ids, ids);

  const auto dev = moe_test::GenerateDeviceExperts(spec, bias, bias_vl);
  for (MoeCudaGemm gemm :
       {MoeCudaGemm::kTiled, MoeCudaGemm::kStream, MoeCudaGemm::kStream16, MoeCudaGemm::kStream32,
        MoeCudaGemm::kWgmma, MoeCudaGemm::kWgmmaRs, MoeCudaGemm::kStreamRing}) {
    const std::string name = std::string(c.name) + GemmTag(gemm);
    SCOPED_TRACE(name);
    // The RS GEMM on 128-row tiles first (rs_tile_rows 128), the others' tile rows their own.
    const int64_t rs_rows = gemm == MoeCudaGemm::kWgmmaRs ? kMoeCudaWgmmaTileRows : 0;
    const GpuRun gpu = RunMoeCuda(dev->view, o, logits, x, image, shared_y, c.m,
                                  dev_shared != nullptr ? &dev_shared->view : nullptr, gemm, true,
                                  MoeCudaRingCut::kAuto, MoeCudaGemm::kAuto, rs_rows);
    ExpectClose(name.c_str(), gpu, cpu, c.dim, c.top_k, {});
    if (gemm == MoeCudaGemm::kWgmmaRs) {
      // The tiles by the slot rows per expert (0, the default) and 32- / 48- / 64- / 80- / 96-row
      // tiles (rs_tile_rows; where MoeCudaRsTileRows gives them, else the same launch): the same
      // bytes as the 128-row tiles (a row's tile does not change its numerics).
      for (const int64_t rows :
           {int64_t{0}, kMoeCudaRsNarrowTileRows, kMoeCudaRs48TileRows, kMoeCudaRsMidTileRows,
            kMoeCudaRs80TileRows, kMoeCudaRsWideTileRows}) {
        const GpuRun r = RunMoeCuda(dev->view, o, logits, x, image, shared_y, c.m,
                                    dev_shared != nullptr ? &dev_shared->view : nullptr, gemm, true,
                                    MoeCudaRingCut::kAuto, MoeCudaGemm::kAuto, rows);
        EXPECT_EQ(gpu.y, r.y) << name << ": " << rows << "-row tiles vs 128-row tiles";
        EXPECT_EQ(gpu.ids, r.ids);
      }
    } else {
      // The register-sourced GEMM for the down projection after this up GEMM (down_gemm: the
      // tile list regrouped into 128-row tiles, ag reordered; nothing changes where the TMA ring
      // runs).
      const std::string rs_name = name + " + down RS";
      const GpuRun rs_down = RunMoeCuda(dev->view, o, logits, x, image, shared_y, c.m,
                                        dev_shared != nullptr ? &dev_shared->view : nullptr, gemm,
                                        true, MoeCudaRingCut::kAuto, MoeCudaGemm::kWgmmaRs);
      ExpectClose(rs_name.c_str(), rs_down, cpu, c.dim, c.top_k, {});
    }
    if (gemm == MoeCudaGemm::kStreamRing) {
      // The combine summing the down ring's partials (the default) against the down epilogue +
      // the combine: the same bytes.
      const GpuRun sep =
          RunMoeCuda(dev->view, o, logits, x, image, shared_y, c.m,
                     dev_shared != nullptr ? &dev_shared->view : nullptr, gemm, false);
      EXPECT_EQ(gpu.y, sep.y) << name << ": fused ring combine vs the down epilogue";
      EXPECT_EQ(gpu.ids, sep.ids);
      // Each cut forced (kAuto takes the dynamic one from 1 slot per expert): close to the CPU,
      // and the fused combine the same bytes as the down epilogue + combine after it.
      for (const MoeCudaRingCut cut : {MoeCudaRingCut::kStatic, MoeCudaRingCut::kDynamic}) {
        const std::string cut_name = name + " cut " + std::to_string(static_cast<int>(cut));
        std::vector<uint16_t> fused_y;
        for (const bool fused : {true, false}) {
          const GpuRun run =
              RunMoeCuda(dev->view, o, logits, x, image, shared_y, c.m,
                         dev_shared != nullptr ? &dev_shared->view : nullptr, gemm, fused, cut);
          ExpectClose(cut_name.c_str(), run, cpu, c.dim, c.top_k, {});
          if (!fused) {
            EXPECT_EQ(run.y, fused_y) << cut_name << ": fused vs the down epilogue";
          }
          fused_y = run.y;
        }
      }
    }
  }
}

TEST(MoeGpuLayerTest, SmallShapesMatchMoeCpu) {
  FS_SKIP_WITHOUT_GPU();
  const LayerCase cases[] = {
      {"E8 k2 m1 (6 experts empty) + shared", 8, 256, 128, 2, 1, 128, false, 0, 1.5f, 10.f, 1.f,
       true},
      {"E8 k2 m7 image", 8, 256, 128, 2, 7, 0, true, 0, 1.5f, 10.f, 1.f, true},
      {"E8 k2 m64 (32-row tiles)", 8, 256, 128, 2, 64, 128, false, 0, 1.5f, 10.f, 1.f, true},
      {"E8 k2 m300 (64-row tiles) + shared", 8, 256, 128, 2, 300, 256, false, 0, 1.5f, 10.f, 1.f,
       true},
      {"E16 k4 m33 D384 I256, no clamp, temp 2, no norm, image", 16, 384, 256, 4, 33, 0, true, 0,
       1.f, 0.f, 2.f, false},
      {"E8 k1 m50 all tokens to expert 3", 8, 256, 128, 1, 50, 0, false, 1, 1.5f, 10.f, 1.f, true},
      {"E8 k2 m40 expert 3 in every token + shared", 8, 256, 128, 2, 40, 128, false, 1, 1.5f, 10.f,
       1.f, true},
      {"E8 k2 m64 experts 0-3 never chosen", 8, 256, 128, 2, 64, 0, false, 2, 1.5f, 10.f, 1.f,
       true},
  };
  for (const LayerCase& c : cases) RunCase(c);
}

// MoeCuda running the shared expert itself (MoeCudaParams::shared), both weight forms.
TEST(MoeGpuLayerTest, SmallShapesWithGpuSharedExpertMatchMoeCpu) {
  FS_SKIP_WITHOUT_GPU();
  const LayerCase cases[] = {
      {"E8 k2 m1 + GPU shared", 8, 256, 128, 2, 1, 128, false, 0, 1.5f, 10.f, 1.f, true, 1},
      {"E8 k2 m1 + GPU shared w13", 8, 256, 128, 2, 1, 128, false, 0, 1.5f, 10.f, 1.f, true, 2},
      {"E8 k2 m7 image + GPU shared Is 256", 8, 256, 128, 2, 7, 256, true, 0, 1.5f, 10.f, 1.f, true,
       1},
      {"E8 k2 m64 + GPU shared w13", 8, 256, 128, 2, 64, 128, false, 0, 1.5f, 10.f, 1.f, true, 2},
      {"E8 k2 m300 + GPU shared Is 384", 8, 256, 128, 2, 300, 384, false, 0, 1.5f, 10.f, 1.f, true,
       1},
      {"E16 k4 m33 D384 I256, no clamp, temp 2, no norm, image + GPU shared w13", 16, 384, 256, 4,
       33, 256, true, 0, 1.f, 0.f, 2.f, false, 2},
  };
  for (const LayerCase& c : cases) RunCase(c);
}

TEST(MoeGpuLayerTest, ReleasedDimsWithGpuSharedExpertMatchMoeCpu) {
  FS_SKIP_WITHOUT_GPU();
  const LayerCase cases[] = {
      {"E384 k6 D5120 I2304 m1 + GPU shared w13", 384, 5120, 2304, 6, 1, 2304, false, 0, 1.5f, 10.f,
       1.f, true, 2},
      {"E384 k6 D5120 I2304 m4 image + GPU shared", 384, 5120, 2304, 6, 4, 2304, true, 0, 1.5f,
       10.f, 1.f, true, 1},
      {"E384 k6 D5120 I2304 m4 + GPU shared w13", 384, 5120, 2304, 6, 4, 2304, false, 0, 1.5f, 10.f,
       1.f, true, 2},
  };
  for (const LayerCase& c : cases) RunCase(c);
}

TEST(MoeGpuLayerTest, ReleasedDimsMatchMoeCpu) {
  FS_SKIP_WITHOUT_GPU();
  const LayerCase cases[] = {
      {"E384 k6 D5120 I2304 m1 + shared", 384, 5120, 2304, 6, 1, 2304, false, 0, 1.5f, 10.f, 1.f,
       true},
      {"E384 k6 D5120 I2304 m4 image", 384, 5120, 2304, 6, 4, 0, true, 0, 1.5f, 10.f, 1.f, true},
  };
  for (const LayerCase& c : cases) RunCase(c);
}

// The prefill shape: 512 tokens over experts 0..15 (bias), ~192 slot rows each, so the wgmma
// GEMM's 128-row tiles end mid-expert and its second warpgroup is busy; MoeCpu builds 16 experts
// (3,072 expert-row GEMVs of 5120 x 2304 on the host: the slowest case of the file).
TEST(MoeGpuLayerTest, ReleasedDimsPrefillMatchesMoeCpu) {
  FS_SKIP_WITHOUT_GPU();
  const LayerCase cases[] = {
      {"E384 k6 D5120 I2304 m512 experts 0-15", 384, 5120, 2304, 6, 512, 0, false, 3, 1.5f, 10.f,
       1.f, true},
  };
  for (const LayerCase& c : cases) RunCase(c);
}

// kAuto's RS threshold: the device's (MoeCudaRsMinSlotsPerExpert, from its DRAM bandwidth per
// SM-cycle, recomputed here from the same attributes) or as asked (rs_min_slots_per_expert); at 5
// slot rows per expert kAuto then runs the RS GEMM (threshold 4) or the streaming GEMM
// MoeCudaChooseGemm names (threshold 8). Which one ran is read from the kernels of the captured
// call (the RS GEMM's kernels are MoeExpertWgmmaRsKernel's; the two GEMMs can give the same bytes
// here), and its bytes must be those of that GEMM forced.
TEST(MoeGpuLayerTest, RsThresholdFollowsTheDevice) {
  FS_SKIP_WITHOUT_GPU();
  int device = 0, mem_khz = 0, bus_bits = 0, sms = 0, sm_khz = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device));
  const double per_sm_cycle =
      (2.0 * mem_khz * bus_bits / 8.0) / (static_cast<double>(sm_khz) * sms);
  const int64_t device_min = MoeCudaRsMinSlotsPerExpert(0);
  std::printf(
      "device DRAM %.0f GB/s, %d SMs at %.0f MHz: %.1f B per SM-cycle -> kAuto's RS GEMM "
      "from %ld slot rows per expert\n",
      2.0 * mem_khz * bus_bits / 8.0 / 1e6, sms, sm_khz / 1e3, per_sm_cycle,
      static_cast<long>(device_min));
  EXPECT_EQ(device_min, MoeCudaRsMinSlotsPerExpertFor(per_sm_cycle));
  EXPECT_EQ(MoeCudaRsMinSlotsPerExpert(0), device_min);  // cached
  EXPECT_EQ(MoeCudaRsMinSlotsPerExpert(5), 5);

  constexpr int64_t kE = 16, kD = 256, kI = 128, kK = 2, kM = 40;  // 5 slot rows per expert
  const moe_test::LayerSpec spec{kE, kD, kI, 61, moe_test::WeightKind::kRealistic};
  const auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
  MoeOptions o;
  o.top_k = kK;
  const auto gate = moe_test::RandomGate(kE, kD, 62);
  std::vector<uint16_t> x;
  const auto logits =
      moe_test::ClearRoutingActivations(*gate, nullptr, nullptr, nullptr, o, kM, kD, 63, &x);
  const auto run = [&](MoeCudaGemm gemm, int64_t rs_min, std::vector<std::string>* kernels) {
    return RunMoeCuda(dev->view, o, logits, x, {}, {}, kM, nullptr, gemm, true,
                      MoeCudaRingCut::kAuto, MoeCudaGemm::kAuto, 0, rs_min, kernels);
  };
  const auto rs_launches = [](const std::vector<std::string>& kernels) {
    return std::count_if(kernels.begin(), kernels.end(), [](const std::string& name) {
      return name.find("MoeExpertWgmmaRsKernel") != std::string::npos;
    });
  };
  for (const int64_t rs_min : {int64_t{0}, int64_t{4}, int64_t{8}}) {
    const int64_t threshold = rs_min == 0 ? device_min : rs_min;
    const MoeCudaGemm chosen =
        MoeCudaChooseGemm(kM, kK, kE, MoeCudaGemm::kAuto, std::max(kD, kI), threshold);
    EXPECT_EQ(chosen == MoeCudaGemm::kWgmmaRs, threshold <= 5) << rs_min;
    std::vector<std::string> kernels;
    const GpuRun automatic = run(MoeCudaGemm::kAuto, rs_min, &kernels);
    std::string names;
    for (const std::string& k : kernels) names.append(" ").append(k, 0, 48);
    // The up and the down GEMM: two RS launches, or none.
    EXPECT_EQ(rs_launches(kernels), chosen == MoeCudaGemm::kWgmmaRs ? 2 : 0)
        << "threshold " << threshold << ", kernels:" << names;
    const GpuRun forced = run(chosen, 0, nullptr);
    EXPECT_EQ(automatic.y, forced.y)
        << "threshold " << threshold << ": kAuto vs " << MoeCudaGemmName(chosen) << " forced";
    EXPECT_EQ(automatic.ids, forced.ids);
  }
  // The forced RS GEMM is seen as such.
  std::vector<std::string> kernels;
  run(MoeCudaGemm::kWgmmaRs, 0, &kernels);
  EXPECT_EQ(rs_launches(kernels), 2);
}

TEST(MoeGpuLayerTest, ZeroTokensIsANoOp) {
  FS_SKIP_WITHOUT_GPU();
  moe_test::LayerSpec spec;
  const auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
  MoeCudaParams p;
  p.weights = &dev->view;
  p.options.top_k = 2;
  p.m = 0;
  EXPECT_TRUE(MoeCuda(p, nullptr).ok());
  CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- the v41-tiny fixture ------------------------------------------------------------------

constexpr char kData[] = "tests/conformance/data/v41-tiny/";

TEST(MoeGpuLayerTest, FixtureLayer0MatchesMoeCpu) {
  FS_SKIP_WITHOUT_GPU();
  constexpr int64_t kE = 8, kD = 256, kI = 128, kTokens = 201;
  auto model = safetensors::SafetensorsFile::Open(std::string(kData) + "model.safetensors");
  auto golden = safetensors::SafetensorsFile::Open(std::string(kData) + "golden.safetensors");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto t = [&](const std::string& n) {
    auto v = (*model)->Get("layers.0." + n);
    CHECK_OK(v.status());
    return *v;
  };
  std::vector<moe_test::HostFp4> proj[3];
  moe_test::CpuExperts cpu_experts(kE, kD, kI);
  const char* names[3] = {"w1", "w3", "w2"};
  for (int p : {moe_test::kW1, moe_test::kW3, moe_test::kW2}) {
    for (int64_t e = 0; e < kE; ++e) {
      const std::string base = "ffn.experts." + std::to_string(e) + "." + names[p];
      const auto wt = t(base + ".weight").bytes();
      const auto sc = t(base + ".scale").bytes();
      proj[p].push_back(
          {std::vector<uint8_t>(wt.begin(), wt.end()), std::vector<uint8_t>(sc.begin(), sc.end())});
      cpu_experts.Set(e, p, proj[p].back());
    }
  }
  const auto bias_t = t("ffn.gate.bias").as<float>();
  const auto bias_vl_t = t("ffn.gate.bias_vl").as<float>();
  const std::vector<float> bias(bias_t.begin(), bias_t.end()),
      bias_vl(bias_vl_t.begin(), bias_vl_t.end());
  const auto gate_bf16 = t("ffn.gate.weight").as<uint16_t>();
  std::vector<float> gate_w(kE * kD);
  for (int64_t i = 0; i < kE * kD; ++i) gate_w[i] = Bf16BitsToFloat(gate_bf16[i]);
  auto gate =
      PreparedLinear::Create({WeightFormat::kF32,
                              kE,
                              kD,
                              {reinterpret_cast<const uint8_t*>(gate_w.data()), kE * kD * 4},
                              {},
                              {}});
  ASSERT_TRUE(gate.ok());
  moe_test::SharedExpert shared;
  auto fp8 = [&](int64_t n, int64_t k, const std::string& name) {
    auto l = PreparedLinear::Create({WeightFormat::kFp8Block32,
                                     n,
                                     k,
                                     t("ffn.shared_experts." + name + ".weight").bytes(),
                                     t("ffn.shared_experts." + name + ".scale").bytes(),
                                     {}});
    CHECK_OK(l.status());
    return std::make_unique<PreparedLinear>(std::move(l).value());
  };
  shared.w1 = fp8(kI, kD, "w1");
  shared.w3 = fp8(kI, kD, "w3");
  shared.w2 = fp8(kD, kI, "w2");
  // Stream 0 of the golden layer-0 input through an RMSNorm with ffn_norm (what the FFN sees,
  // as in moe_fixture_test.cc).
  auto xs =
      (*golden)->GetChecked("a.prefill.block_in.L0", safetensors::DType::kBF16, {kTokens, 4, kD});
  ASSERT_TRUE(xs.ok()) << xs.status();
  const auto norm_w = t("ffn_norm.weight").as<uint16_t>();
  std::vector<uint16_t> x;
  for (int64_t tok = 0; tok < kTokens; ++tok) {
    const uint16_t* row = xs->as<uint16_t>().data() + tok * 4 * kD;
    float ss = 0.f;
    for (int64_t c = 0; c < kD; ++c) ss += Bf16BitsToFloat(row[c]) * Bf16BitsToFloat(row[c]);
    const float r = 1.f / std::sqrt(ss / kD + 1e-20f);
    for (int64_t c = 0; c < kD; ++c) {
      x.push_back(FloatToBf16Bits(Bf16BitsToFloat(row[c]) * r * Bf16BitsToFloat(norm_w[c])));
    }
  }
  MoeOptions o;
  o.top_k = 2;
  o.route_scale = 1.5f;
  o.swiglu_limit = 10.f;
  std::vector<uint8_t> image(kTokens, 0);
  for (int64_t tok = 1; tok < kTokens; tok += 4) image[tok] = 1;
  const auto logits = moe_test::GateLogits(*gate, x, kTokens);
  std::vector<bool> clear(kTokens);
  int64_t n_clear = 0;
  for (int64_t tok = 0; tok < kTokens; ++tok) {
    clear[tok] = moe_test::RouteIsClear(logits.data() + tok * kE, kE,
                                        image[tok] != 0 ? bias_vl.data() : bias.data(), o);
    n_clear += clear[tok] ? 1 : 0;
  }
  EXPECT_GE(n_clear, kTokens * 9 / 10);
  const auto shared_y = moe_test::SharedExpertOutput(shared, x, kTokens, kD, o.swiglu_limit);
  const MoeWeights w{kE,
                     &*gate,
                     bias.data(),
                     bias_vl.data(),
                     cpu_experts.w(moe_test::kW1),
                     cpu_experts.w(moe_test::kW3),
                     cpu_experts.w(moe_test::kW2),
                     shared.w1.get(),
                     shared.w3.get(),
                     shared.w2.get()};
  for (bool with_image : {false, true}) {
    const auto cpu = moe_test::RunMoeCpu(w, o, x, kTokens, with_image ? image.data() : nullptr);
    const auto dev = moe_test::UploadDeviceExperts(kE, kD, kI, proj, bias, bias_vl);
    std::vector<bool> rows(kTokens);
    for (int64_t tok = 0; tok < kTokens; ++tok) {
      rows[tok] = with_image ? clear[tok]
                             : moe_test::RouteIsClear(logits.data() + tok * kE, kE, bias.data(), o);
    }
    for (MoeCudaGemm gemm :
         {MoeCudaGemm::kTiled, MoeCudaGemm::kStream, MoeCudaGemm::kStream16, MoeCudaGemm::kStream32,
          MoeCudaGemm::kWgmma, MoeCudaGemm::kWgmmaRs, MoeCudaGemm::kStreamRing}) {
      const GpuRun gpu =
          RunMoeCuda(dev->view, o, logits, x, with_image ? image : std::vector<uint8_t>{}, shared_y,
                     kTokens, nullptr, gemm);
      const std::string name =
          std::string(with_image ? "fixture layer 0, image flags" : "fixture layer 0") +
          GemmTag(gemm);
      ExpectClose(name.c_str(), gpu, cpu, kD, o.top_k, rows);
    }
  }
}

}  // namespace
}  // namespace flashserve::kernels
