// bench_moe: the routed experts of one DeepSeek-V4.1-Flash MoE layer on the GPU (MoeCuda) at the
// released dims against the roofline.
//
//   bench_moe [--iters N] [--warmup N] [--tokens 1,16,128,512,1024,4096] [--sets S]
//             [--k-step 0|128|256] [--shared 0|1] [--route-path 0|1|2] [--sort-path 0|1|2]
//             [--hoist 0|1] [--gemm 0|1|2|3|4|5|6|7] [--gather-slots 0|1] [--stream-rt 0|1|2]
//             [--front 0|1] [--ring-combine 0|1] [--ring-cut 0|1|2] [--down-gemm 0|4]
//             [--route-redux 0|1]
//             [--rs-tile-rows 0|32|48|64|80|96|128] [--rs-min-slots 0|N]
//
// E = 384 FP4 experts (realistic scales), top-6, D = 5120, I = 2304; gate logits N(0, 1) per
// (token, expert), no bias: uniform random routing. S (default 8) different routings are cycled
// through the timed calls so that successive calls touch different experts (no L2 reuse between
// calls that a real decode step would not have). Per token count it prints the median of N calls
// (CUDA events, after the warm-up) of MoeCuda (route, sort, quantise, w1/w3 + SwiGLU, w2,
// combine; the shared expert and the gate GEMM are not part of it), and of each stage alone.
//   bytes  = the touched experts' FP4 codes + scales (18.8 MB each) + x + y (bf16) + logits
//   FLOPs  = 2 · tokens · 6 · 3 · D · I
//   roof   = max(bytes / d2d copy bandwidth, FLOPs / dense bf16 tensor rate), both measured in
//            this run (cudaMemcpyAsync d2d of 1 GiB counted read + write; the tensor rate is the
//            larger of cuBLAS's bf16 GEMM at 8192^3 and kernels/attention/bench's mma.sync peak,
//            as bench_sparse_attn: the large-batch GEMM runs wgmma, whose rate is cuBLAS's; until
//            session 51 the mma.sync peak alone, which made the compute roof ~28 % low);
//            ratio = roof / measured.
// up_GB/s, dn_GB/s: the touched experts' w1 + w3 (resp. w2) codes + scales over that stage's
// time: each GEMM's weight streaming rate (compare with the d2d figure, which counts a copy's
// read and write). --k-step: the GEMMs' K per pipeline stage (MoeCudaParams::gemm_k_step;
// 0 = automatic, 128 = the first design), to compare the two on one build. --route-path /
// --sort-path: the route and permute shapes (MoeCudaPath: 0 automatic by m, 1 = small: a block
// per token / the one-block sort, 2 = large: a warp per token / the multi-block sort), for the
// layer and for the route / perm stage times; the outputs do not depend on them. The "paths"
// column says which shapes ran (route/sort, s = small, L = large). --hoist 1: the GEMMs' main
// loop with per-tile precomputed copy addresses (MoeCudaParams::gemm_hoisted_addresses; same
// outputs), to A/B against the default on one build. --gemm: the expert GEMM (MoeCudaParams::gemm:
// 0 automatic by m, 1 = tiled, 2 = weight-streaming, 3 = wgmma, 4 = register-sourced wgmma, 5 /
// 6 = weight-streaming with 16- / 32-row tiles, 7 = weight-streaming through the TMA ring), for
// the layer and the up / down stage times; the "paths" column's third letter says which ran (T
// tiled, S streaming, 2 / 4 streaming 16- / 32-row, W wgmma, R register-sourced wgmma, G TMA
// ring), and the launch table's rows = 8 / 16 / 32 mark the streaming GEMMs, 32 / 48 / 64 / 80 / 96
// / 128 the register-sourced one's tiles and 128 the wgmma GEMM's. --gather-slots 1: the permute
// writes top_k copies of each token's QDQ row (MoeCudaParams::gather_slot_rows, the round-3 gather;
// default 0: once per token, the up GEMM reading by slot_token), for the layer and the perm / up
// stage times, to A/B on one build. --route-redux 0: the fused front's top-k by the shuffle
// merge (MoeCudaParams::route_redux; default 1: by warp reductions, session 77; the same bytes),
// for the layer and the front stage time.
// --ring-combine 0: with the TMA-ring GEMM, the down epilogue kernel writes the expert outputs and
// the combine reads them (MoeCudaParams::ring_fused_combine; default 1: the combine sums the down
// ring's partials itself, one launch fewer; the same bits), for the layer. --ring-cut 1 / 2: the
// TMA ring's static / dynamic cut at every token count (MoeCudaParams::ring_cut; default 0: kAuto,
// dynamic from 1 slot per expert), for the layer and the up / down stage times. --down-gemm 4:
// the register-sourced GEMM for the down projection after another up GEMM
// (MoeCudaParams::down_gemm; the paths column's GEMM letter gets "+R", and down_us includes the
// tile regroup and the reorder of ag between the stages). --rs-tile-rows: the register-sourced
// GEMM's tiles (MoeCudaParams::rs_tile_rows, MoeCudaRsTileRows): 0 (default) by the slot rows per
// expert (32-row tiles with 8 ring stages at <= 20, 64-row tiles with 6 at <= 40, 80-row tiles
// with 6 at <= 64, 96-row tiles with 5 at <= 80, else 128-row tiles with 4), 32 / 48 / 64 / 80 /
// 96 only that height where it applies (48: at <= 32, never the default's), 128 always 128-row
// tiles, to A/B on one build. --rs-min-slots: kAuto's RS threshold
// (MoeCudaParams::rs_min_slots_per_expert): 0 (default) the device's (MoeCudaRsMinSlotsPerExpert:
// 8 slot rows per expert on the H200, 4 on the H100), N from N per expert. Per token
// count the layer also runs once with both small and once with both large shapes forced: y and the
// ids must be byte-identical (one line each after the table; a difference makes the exit code 1).
// Batch-1 latency: the m = 1 median by events (GPU time of back-to-back calls), the host wall time
// of one call + synchronize, and the replay of a CUDA graph of one call. Shared expert
// (--shared 1, the default): a second table times, per token count, MoeCuda with the FP8 shared
// expert run inside it (MoeCudaParams::shared, w1/w3 fused into one [2·Is, D] w13, Is = 2304) and
// LaunchMoeSharedExpert alone (fused w13, and w1 + w3 as two GEMMs); the calls cycle through 4
// device copies of each form of the shared weights (35.4 MB of FP8 codes + scales each, 141 MB per
// form, more than the L2) so no call finds them in L2. shared GB/s = its weight bytes over the
// shared-only time. Before timing, m = 1 and m = 4 are checked against MoeCpu (exact mode, only the
// touched experts built on the host) with the GPU test's tolerances, routed only and (with --shared
// 1) with the GPU shared expert against MoeCpu's; a failure makes the exit code 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/base/check.h"
#include "kernels/attention/bench/mma_peak.h"
#include "kernels/common/cuda_check.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_bench_check.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/moe/moe_shared_cuda.h"
#include "kernels/moe/moe_test_util.h"

namespace flashserve::kernels {
namespace {

constexpr int64_t kE = 384, kK = 6, kD = 5120, kI = 2304, kIs = 2304;
constexpr int kSharedCopies = 4;

struct Options {
  int iters = 20;
  int warmup = 3;
  int sets = 8;
  std::vector<int64_t> tokens = {1, 16, 128, 512, 1024, 4096};
  int64_t k_step = kMoeCudaKStepAuto;
  bool shared = true;
  MoeCudaPath route_path = MoeCudaPath::kAuto;
  MoeCudaPath sort_path = MoeCudaPath::kAuto;
  bool hoist = kMoeCudaGemmHoistedAddresses;
  MoeCudaGemm gemm = MoeCudaGemm::kAuto;
  bool gather_slots = false;                        // MoeCudaParams::gather_slot_rows
  MoeCudaGemm down_gemm = MoeCudaGemm::kAuto;       // MoeCudaParams::down_gemm
  int64_t rs_tile_rows = 0;                         // MoeCudaParams::rs_tile_rows
  int64_t rs_min_slots = 0;                         // MoeCudaParams::rs_min_slots_per_expert
  int stream_rt = 0;                                // MoeCudaParams::gemm_stream_row_tiles
  bool front = true;                                // MoeCudaParams::fused_front
  bool route_redux = true;                          // MoeCudaParams::route_redux
  bool ring_combine = true;                         // MoeCudaParams::ring_fused_combine
  MoeCudaRingCut ring_cut = MoeCudaRingCut::kAuto;  // MoeCudaParams::ring_cut
};

double MedianMicros(const Options& o, cudaStream_t stream, const std::function<void(int)>& launch) {
  for (int i = 0; i < o.warmup; ++i) launch(i);
  std::vector<cudaEvent_t> ev(2 * o.iters);
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < o.iters; ++i) {
    CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
    launch(i);
    CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us(o.iters);
  for (int i = 0; i < o.iters; ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    us[i] = 1000.0 * ms;
  }
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventDestroy(e));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// One routing set on the device and the buffers of a call (stage outputs kept for the per-stage
// timings).
struct Call {
  int64_t m = 0;
  DeviceBuffer logits, x, y, ws;
  DeviceBuffer counts, ids, wts, offsets, slot_token, slot_weight, token_slot, tiles, num_tiles, xg,
      ag, ye, sort_scratch, ring, tiles_rs, num_tiles_rs;
  int64_t touched = 0;
};

Call MakeCall(int64_t m, uint64_t seed) {
  Call c;
  c.m = m;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> logits(m * kE);
  for (float& v : logits) v = normal(rng);
  c.logits = ToDevice(logits);
  c.x = ToDevice(moe_test::RealisticActivations(m, kD, seed + 1));
  c.y = DeviceBuffer(m * kD * 2);
  c.ws = DeviceBuffer(*MoeCudaWorkspaceBytes(MoeCudaWeights{kE, kD, kI}, m, kK));
  const int64_t s = m * kK;
  c.counts = DeviceBuffer(kE * 4);
  c.ids = DeviceBuffer(s * 4);
  c.wts = DeviceBuffer(s * 4);
  c.offsets = DeviceBuffer((kE + 1) * 4);
  c.slot_token = DeviceBuffer(s * 4);
  c.slot_weight = DeviceBuffer(s * 4);
  c.token_slot = DeviceBuffer(s * 4);
  c.tiles = DeviceBuffer(2 * s * 4);
  c.num_tiles = DeviceBuffer(4);
  c.tiles_rs = DeviceBuffer(2 * s * 4);
  c.num_tiles_rs = DeviceBuffer(4);
  c.xg = DeviceBuffer(s * kD * 2);
  c.ag = DeviceBuffer(s * kI * 2);
  c.ye = DeviceBuffer(s * kD * 2);
  c.sort_scratch = DeviceBuffer(MoeCudaSortScratchBytes(kE));
  c.ring = DeviceBuffer(
      MoeCudaRingPartialBytes(std::min(s, MoeCudaRingMaxSlots(kE)), std::max(2 * kI, kD)));
  // The ring's work counters start zero and every ring call leaves them so: the stage timings
  // run without the launchers' memset (MoeExpertUpParams::ring_counters_zeroed).
  CUDA_CHECK(cudaMemset(c.ring.get(), 0, 16));  // also the register-sourced GEMM's counters
  return c;
}

MoeOptions Opts() {
  MoeOptions o;
  o.top_k = kK;
  o.route_scale = 1.5f;  // (any value: it does not change the cost)
  return o;
}

MoeCudaParams LayerParams(const MoeCudaWeights& w, Call& c, int32_t* ids_out, const Options& o) {
  MoeCudaParams p;
  p.gemm_k_step = o.k_step;
  p.gemm_hoisted_addresses = o.hoist;
  p.gemm_stream_row_tiles = o.stream_rt;
  p.gemm = o.gemm;
  p.down_gemm = o.down_gemm;
  p.rs_tile_rows = o.rs_tile_rows;
  p.rs_min_slots_per_expert = o.rs_min_slots;
  p.gather_slot_rows = o.gather_slots;
  p.ring_fused_combine = o.ring_combine;
  p.ring_cut = o.ring_cut;
  p.route_path = o.route_path;
  p.sort_path = o.sort_path;
  p.fused_front = o.front;
  p.route_redux = o.route_redux;
  p.weights = &w;
  p.options = Opts();
  p.m = c.m;
  p.logits = c.logits.get<float>();
  p.x = c.x.get<uint16_t>();
  p.x_stride = kD;
  p.y = c.y.get<uint16_t>();
  p.y_stride = kD;
  p.expert_ids = ids_out;
  p.workspace = c.ws.get();
  p.workspace_bytes = c.ws.bytes();
  return p;
}

// The stages of MoeCuda on the call's own buffers (for the per-stage times).
struct Stages {
  MoeRouteParams route;
  MoePermuteParams permute;
  MoeExpertUpParams up;
  MoeExpertDownParams down;
  MoeCombineParams combine;
  // --down-gemm 4 after another up GEMM (MoeCudaDownRsAfterOtherUp): the down stage time includes
  // the regroup (into the call's own 128-row list) and the reorder of ag, as in MoeCuda.
  bool rs_down_after = false;
  MoeRegroupTilesParams regroup;
};

Stages MakeStages(const MoeCudaWeights& w, Call& c, const Options& o) {
  const int64_t k_step = o.k_step;
  // As MoeCuda: the GEMM once, its tile rows and stage flags from it.
  const int64_t rs_min = MoeCudaRsMinSlotsPerExpert(o.rs_min_slots);
  const MoeCudaGemm gemm = MoeCudaChooseGemm(c.m, kK, kE, o.gemm, std::max(kD, kI), rs_min);
  const int64_t tile_rows = gemm == MoeCudaGemm::kWgmmaRs
                                ? MoeCudaRsTileRows(c.m * kK, kE, o.rs_tile_rows)
                                : MoeCudaTileRows(c.m, kK, kE, gemm);
  Stages s;
  s.route = MoeRouteParams{Opts(),
                           c.m,
                           kE,
                           c.logits.get<float>(),
                           nullptr,
                           nullptr,
                           nullptr,
                           c.ids.get<int32_t>(),
                           c.wts.get<float>()};
  MoePermuteParams& p = s.permute;
  p.route_redux = o.route_redux;
  p.m = c.m;
  p.n_experts = kE;
  p.top_k = kK;
  p.dim = kD;
  p.tile_rows = tile_rows;
  p.expert_ids = c.ids.get<int32_t>();
  p.expert_weights = c.wts.get<float>();
  p.expert_counts = c.counts.get<int32_t>();
  p.x = c.x.get<uint16_t>();
  p.x_stride = kD;
  p.offsets = c.offsets.get<int32_t>();
  p.slot_token = c.slot_token.get<int32_t>();
  p.slot_weight = c.slot_weight.get<float>();
  p.token_slot = c.token_slot.get<int32_t>();
  p.tiles = c.tiles.get<int32_t>();
  p.num_tiles = c.num_tiles.get<int32_t>();
  p.xg = c.xg.get<uint16_t>();
  p.path = o.sort_path;
  p.sort_scratch = c.sort_scratch.get<int32_t>();
  p.xg_by_token = !o.gather_slots;
  s.up.weights = &w;
  s.up.swiglu_limit = 10.f;
  s.up.slots = c.m * kK;
  s.up.tile_rows = tile_rows;
  s.up.offsets = p.offsets;
  s.up.tiles = p.tiles;
  s.up.num_tiles = p.num_tiles;
  s.up.xg = p.xg;
  s.up.slot_token = o.gather_slots ? nullptr : p.slot_token;
  s.up.slot_weight = p.slot_weight;
  s.up.ag = c.ag.get<uint16_t>();
  s.down = MoeExpertDownParams{&w,
                               c.m * kK,
                               tile_rows,
                               p.offsets,
                               p.tiles,
                               p.num_tiles,
                               c.ag.get<uint16_t>(),
                               c.ye.get<uint16_t>()};
  s.up.k_step = k_step;
  s.down.k_step = k_step;
  s.up.hoisted_addresses = o.hoist;
  s.down.hoisted_addresses = o.hoist;
  s.up.stream_row_tiles = o.stream_rt;
  s.down.stream_row_tiles = o.stream_rt;
  s.up.wgmma_rs = gemm == MoeCudaGemm::kWgmmaRs;
  s.down.wgmma_rs = s.up.wgmma_rs;
  s.up.stream = gemm == MoeCudaGemm::kStream16 || gemm == MoeCudaGemm::kStream32;
  s.down.stream = s.up.stream;
  s.up.ring = gemm == MoeCudaGemm::kStreamRing && c.m * kK <= MoeCudaRingMaxSlots(kE);
  s.down.ring = s.up.ring;
  s.up.ring_partials = s.down.ring_partials = c.ring.get<float>();
  s.up.ring_partials_bytes = s.down.ring_partials_bytes = static_cast<int64_t>(c.ring.bytes());
  s.up.ring_cut = s.down.ring_cut = o.ring_cut;
  s.up.ring_counters_zeroed = s.down.ring_counters_zeroed = true;
  // The register-sourced GEMM's work counters (as MoeCuda's: words 0, 1 up, 2, 3 down; each call
  // leaves them zero).
  if (s.up.wgmma_rs) {
    s.up.wgmma_rs_counters = reinterpret_cast<int32_t*>(c.ring.get<float>());
    s.down.wgmma_rs_counters = s.up.wgmma_rs_counters + 2;
  }
  p.wgmma_rs_order = s.up.wgmma_rs;  // as MoeCuda: xg in the order of the GEMM that reads it
  s.rs_down_after =
      MoeCudaDownRsAfterOtherUp(c.m, kK, kE, o.gemm, o.down_gemm, std::max(kD, kI), rs_min);
  if (s.rs_down_after) {
    s.regroup = MoeRegroupTilesParams{kE,
                                      c.m * kK,
                                      tile_rows,
                                      p.offsets,
                                      p.tiles,
                                      p.num_tiles,
                                      c.tiles_rs.get<int32_t>(),
                                      c.num_tiles_rs.get<int32_t>()};
    s.down.tile_rows = kMoeCudaWgmmaTileRows;
    s.down.tiles = s.regroup.tiles_out;
    s.down.num_tiles = s.regroup.num_tiles_out;
    s.down.wgmma_rs = true;
    s.down.stream = false;
    s.down.ring = false;
    s.down.wgmma_rs_counters = reinterpret_cast<int32_t*>(c.ring.get<float>()) + 2;
  }
  s.combine = MoeCombineParams{c.m,       kK,      kD, p.expert_ids,        p.token_slot,
                               s.down.ye, nullptr, 0,  c.y.get<uint16_t>(), kD};
  return s;
}

// The "paths" column's GEMM letter for the GEMM a call runs (MoeCudaChooseGemm).
const char* GemmLetter(MoeCudaGemm gemm) {
  switch (gemm) {
    case MoeCudaGemm::kStream:
      return "S";
    case MoeCudaGemm::kStream16:
      return "2";
    case MoeCudaGemm::kStream32:
      return "4";
    case MoeCudaGemm::kWgmma:
      return "W";
    case MoeCudaGemm::kWgmmaRs:
      return "R";
    case MoeCudaGemm::kStreamRing:
      return "G";
    default:
      return "T";
  }
}

// The layer's y and ids with the small and with the large route / sort shapes forced, and with
// the fused front (route + permute in one block; kAuto paths, MoeCudaFrontFits) when
// it applies (the GEMM settings of `o`): they must be byte-identical. Appends one line to
// `report`; returns true when they are.
bool ShapesAgree(const MoeCudaWeights& w, Call& c, const Options& o, cudaStream_t stream,
                 std::string* report) {
  const bool front = MoeCudaFrontFits(c.m);
  std::vector<uint16_t> y[3];
  std::vector<int32_t> ids[3];
  for (int i = 0; i < (front ? 3 : 2); ++i) {
    Options forced = o;
    forced.route_path = forced.sort_path = i == 0   ? MoeCudaPath::kSmall
                                           : i == 1 ? MoeCudaPath::kLarge
                                                    : MoeCudaPath::kAuto;
    forced.front = i == 2;
    DeviceBuffer d_ids(c.m * kK * 4);
    CUDA_CHECK(cudaMemsetAsync(c.y.get(), 0xA5, c.y.bytes(), stream));
    MoeCudaParams p = LayerParams(w, c, d_ids.get<int32_t>(), forced);
    CHECK_OK(MoeCuda(p, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    y[i] = ToHost<uint16_t>(c.y, c.m * kD);
    ids[i] = ToHost<int32_t>(d_ids, c.m * kK);
  }
  const bool same =
      y[0] == y[1] && ids[0] == ids[1] && (!front || (y[0] == y[2] && ids[0] == ids[2]));
  char line[200];
  std::snprintf(line, sizeof(line),
                "m %ld: y and ids with small vs large route/sort shapes%s: %s\n",
                static_cast<long>(c.m), front ? " vs the fused front" : "",
                same ? "byte-identical" : "DIFFER");
  *report += line;
  return same;
}

int Main(int argc, char** argv) {
  Options o;
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) {
    command += std::string(" ") + argv[i];
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(
          stderr,
          "usage: %s [--iters N] [--warmup N] [--sets S] [--tokens a,b,...] "
          "[--k-step 0|128|256] [--shared 0|1] [--route-path 0|1|2] "
          "[--sort-path 0|1|2] [--hoist 0|1] [--gemm 0|1|2|3|4|5|6|7] [--gather-slots 0|1] "
          "[--stream-rt 0|1|2] [--front 0|1] [--ring-combine 0|1] [--ring-cut 0|1|2] [--down-gemm "
          "0|4] [--rs-tile-rows 0|32|48|64|80|96|128] [--rs-min-slots 0|N] [--route-redux 0|1]\n",
          argv[0]);
      return 2;
    }
    const std::string v = argv[++i];
    command += " " + v;
    if (a == "--tokens") {
      o.tokens.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) o.tokens.push_back(std::atoll(item.c_str()));
    } else if (a == "--k-step") {
      o.k_step = std::atoll(v.c_str());
      if (o.k_step != 0 && o.k_step != 128 && o.k_step != 256) {
        std::fprintf(stderr, "--k-step must be 0, 128 or 256\n");
        return 2;
      }
    } else if (a == "--route-path" || a == "--sort-path") {
      const int path = std::atoi(v.c_str());
      if (path < 0 || path > 2) {
        std::fprintf(stderr, "%s must be 0 (auto), 1 (small) or 2 (large)\n", a.c_str());
        return 2;
      }
      (a == "--route-path" ? o.route_path : o.sort_path) = static_cast<MoeCudaPath>(path);
    } else if (a == "--gemm") {
      const int gemm = std::atoi(v.c_str());
      if (gemm < 0 || gemm > 7) {
        std::fprintf(stderr,
                     "--gemm must be 0 (auto), 1 (tiled), 2 (streaming), 3 (wgmma), 4 (wgmma "
                     "RS), 5 (streaming 16-row), 6 (streaming 32-row) or 7 (streaming TMA "
                     "ring)\n");
        return 2;
      }
      o.gemm = static_cast<MoeCudaGemm>(gemm);
    } else if (a == "--down-gemm") {
      if (v != "0" && v != "4") {
        std::fprintf(stderr, "--down-gemm must be 0 (the layer's GEMM) or 4 (wgmma RS)\n");
        return 2;
      }
      o.down_gemm = v == "4" ? MoeCudaGemm::kWgmmaRs : MoeCudaGemm::kAuto;
    } else if (a == "--rs-tile-rows") {
      if (v != "0" && v != "32" && v != "48" && v != "64" && v != "80" && v != "96" && v != "128") {
        std::fprintf(stderr, "--rs-tile-rows must be 0, 32, 48, 64, 80, 96 or 128\n");
        return 2;
      }
      o.rs_tile_rows = std::atoi(v.c_str());
    } else if (a == "--rs-min-slots") {
      const bool digits =
          !v.empty() && v.size() <= 6 &&
          std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      o.rs_min_slots = digits ? std::atoll(v.c_str()) : -1;
      if (o.rs_min_slots < 0) {
        std::fprintf(stderr, "--rs-min-slots must be 0 (the device's) or a positive count\n");
        return 2;
      }
    } else if (a == "--gather-slots") {
      o.gather_slots = v != "0";
    } else if (a == "--stream-rt") {
      o.stream_rt = std::atoi(v.c_str());
      if (o.stream_rt < 0 || o.stream_rt > 2) {
        std::fprintf(stderr, "--stream-rt must be 0 (auto), 1 or 2\n");
        return 2;
      }
    } else if (a == "--ring-combine") {
      o.ring_combine = v != "0";
    } else if (a == "--ring-cut") {
      const int cut = std::atoi(v.c_str());
      if (cut < 0 || cut > 2) {
        std::fprintf(stderr, "--ring-cut must be 0 (auto), 1 (static) or 2 (dynamic)\n");
        return 2;
      }
      o.ring_cut = static_cast<MoeCudaRingCut>(cut);
    } else if (a == "--front") {
      o.front = v != "0";
    } else if (a == "--route-redux") {
      o.route_redux = v != "0";
    } else if (a == "--hoist") {
      o.hoist = v != "0";
    } else if (a == "--shared") {
      o.shared = v != "0";
    } else if (a == "--iters" || a == "--warmup" || a == "--sets") {
      (a == "--iters" ? o.iters : a == "--warmup" ? o.warmup : o.sets) = std::atoi(v.c_str());
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  for (int64_t m : o.tokens) {
    if (m < 1) {
      std::fprintf(stderr, "--tokens needs positive counts\n");
      return 2;
    }
  }
  if (o.iters < 1 || o.warmup < 0 || o.sets < 1) {
    std::fprintf(stderr, "--iters and --sets need positive counts\n");
    return 2;
  }
  if (!CudaDeviceAvailable()) {
    std::fprintf(stderr, "bench_moe: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "device: %s, %d SMs, L2 %d MB; E %ld top-%ld D %ld I %ld; median of %d calls after "
      "%d warm-up, %d routing sets\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, static_cast<long>(kE),
      static_cast<long>(kK), static_cast<long>(kD), static_cast<long>(kI), o.iters, o.warmup,
      o.sets);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const moe_test::LayerSpec spec{kE, kD, kI, 2024, moe_test::WeightKind::kRealistic};
  const auto dev = moe_test::GenerateDeviceExperts(spec, {}, {});
  const MoeCudaWeights w = dev->view;
  const double expert_bytes = 3.0 * kI * kD * (0.5 + 1.0 / 32);

  // Roofs.
  const size_t copy_bytes = size_t{1} << 30;
  DeviceBuffer src(copy_bytes), dst(copy_bytes);
  CUDA_CHECK(cudaMemset(src.get(), 1, copy_bytes));
  const double copy_us = MedianMicros(o, stream, [&](int) {
    CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gbps = 2.0 * copy_bytes / copy_us / 1e3;
  const attn_bench::Bf16TensorRates rates = attn_bench::MeasureBf16TensorRates();
  const double tc_tflops = rates.dense;
  std::printf(
      "roofs: d2d copy %.0f GB/s (read + write), bf16 tensor %.0f TFLOP/s (cuBLAS %.0f: %s; "
      "mma.sync %.0f)\n",
      copy_gbps, tc_tflops, rates.cublas, rates.cublas_source.c_str(), rates.mma);
  // kAuto's RS threshold on this device (MoeCudaRsMinSlotsPerExpert: 8 slot rows per expert on
  // the H200, 4 on the H100) or as asked (--rs-min-slots).
  const int64_t rs_min = MoeCudaRsMinSlotsPerExpert(o.rs_min_slots);
  std::printf("kAuto's RS GEMM from %ld slot rows per expert (%s)\n", static_cast<long>(rs_min),
              o.rs_min_slots > 0 ? "--rs-min-slots" : "the device's");

  bool ok = CheckMoeCudaAgainstCpu(spec, Opts(), w, 1);
  ok = CheckMoeCudaAgainstCpu(spec, Opts(), w, 4) && ok;
  // The shared expert: one host copy (MoeCpu), kSharedCopies device copies of each form (fused
  // w13, separate w1 / w3), all from the same bytes.
  moe_test::SharedExpert shared;
  std::vector<std::unique_ptr<moe_test::DeviceSharedExpert>> dev_shared, dev_shared_sep;
  if (o.shared) {
    shared = moe_test::RandomSharedExpert(kD, kIs, 31);
    for (int i = 0; i < kSharedCopies; ++i) {
      dev_shared.push_back(moe_test::UploadSharedExpert(shared, true));
      dev_shared_sep.push_back(moe_test::UploadSharedExpert(shared, false));
    }
    ok = CheckMoeCudaAgainstCpu(spec, Opts(), w, 1, &shared, &dev_shared[0]->view) && ok;
    ok = CheckMoeCudaAgainstCpu(spec, Opts(), w, 4, &shared, &dev_shared[0]->view) && ok;
    ok = CheckMoeCudaAgainstCpu(spec, Opts(), w, 4, &shared, &dev_shared_sep[0]->view) && ok;
  }
  std::vector<double> routed_us;

  std::printf(
      "gemm %d (0 auto, 1 tiled, 2 streaming, 3 wgmma, 4 wgmma RS, 5 / 6 streaming 16- / 32-row, "
      "7 streaming TMA ring), "
      "k_step %ld "
      "(0 = "
      "automatic), hoisted addresses %d, gather slot rows %d; route path %d, sort path %d (0 "
      "auto, 1 small, 2 large); fused front %d (route + permute in one block up to %ld tokens; "
      "front_us times it where it applies, 0.0 elsewhere), route redux %d\n",
      static_cast<int>(o.gemm), static_cast<long>(o.k_step), o.hoist ? 1 : 0,
      o.gather_slots ? 1 : 0, static_cast<int>(o.route_path), static_cast<int>(o.sort_path),
      o.front ? 1 : 0, static_cast<long>(kMoeCudaFrontMaxTokens), o.route_redux ? 1 : 0);
  std::printf("\n%6s %7s %10s %9s %9s %8s %7s %10s %6s | %8s %8s %8s %8s %8s %8s | %8s %8s %6s\n",
              "tokens", "experts", "median_us", "MB", "GFLOP", "TFLOP/s", "GB/s", "roof_us",
              "ratio", "route_us", "perm_us", "front_us", "up_us", "down_us", "comb_us", "up_GB/s",
              "dn_GB/s", "paths");
  std::vector<std::string> plans;
  std::string shape_report, tile_report;
  for (int64_t m : o.tokens) {
    for (bool up : {true, false}) {
      const MoeCudaGemmPlan g = *MoeCudaDescribeGemm(w, m, kK, o.k_step, up, o.gemm, o.ring_cut,
                                                     o.rs_tile_rows, o.rs_min_slots);
      // Resident CTAs per SM at the start of the call (the grid's first wave; y counts tile
      // slots, of which about num_tiles do work) and the weight bytes they have in flight.
      const double resident = std::min<double>(
          g.ctas_per_sm, static_cast<double>(g.grid_x * g.grid_y) / prop.multiProcessorCount);
      char line[256];
      std::snprintf(line, sizeof(line), "%6ld %4s %5ld %6ld %6ld %6ld %8.1f %5ldx%-6ld %7ld %9.1f",
                    static_cast<long>(m), up ? "up" : "down", static_cast<long>(g.tile_rows),
                    static_cast<long>(g.weight_rows), static_cast<long>(g.k_step),
                    static_cast<long>(g.stages), g.smem_bytes / 1024.0, static_cast<long>(g.grid_x),
                    static_cast<long>(g.grid_y), static_cast<long>(g.ctas_per_sm),
                    resident * (g.stages - 1) * g.weight_stage_bytes / 1024.0);
      plans.push_back(line);
    }
    std::vector<Call> calls;
    double touched = 0;
    for (int s = 0; s < o.sets; ++s) {
      calls.push_back(MakeCall(m, 1000 * m + s));
      DeviceBuffer ids(m * kK * 4);
      MoeCudaParams p = LayerParams(w, calls.back(), ids.get<int32_t>(), o);
      CHECK_OK(MoeCuda(p, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<bool> used(kE, false);
      const std::vector<int32_t> host_ids = ToHost<int32_t>(ids, m * kK);
      for (int32_t id : host_ids) used[id] = true;
      if (s == 0) {
        // How the RS GEMM's tiles fall into its widths (wgmma_rs_gemm_sessions.md "Session 53").
        const std::array<int64_t, 5> b = moe_test::RsTilesByWidth(host_ids, kE);
        char line[160];
        std::snprintf(line, sizeof(line),
                      "m %ld: 128-row tiles (rs_tile_rows 128) by slot rows: <=16 %ld, 17-32 %ld, "
                      "33-64 %ld, 65-96 "
                      "%ld, 97-128 %ld\n",
                      static_cast<long>(m), static_cast<long>(b[0]), static_cast<long>(b[1]),
                      static_cast<long>(b[2]), static_cast<long>(b[3]), static_cast<long>(b[4]));
        tile_report += line;
      }
      calls.back().touched = std::count(used.begin(), used.end(), true);
      touched += static_cast<double>(calls.back().touched) / o.sets;
    }
    ok = ShapesAgree(w, calls[0], o, stream, &shape_report) && ok;
    const double us = MedianMicros(o, stream, [&](int i) {
      MoeCudaParams p = LayerParams(w, calls[i % o.sets], nullptr, o);
      CHECK_OK(MoeCuda(p, stream));
    });
    routed_us.push_back(us);
    std::vector<Stages> stages;
    for (Call& c : calls) stages.push_back(MakeStages(w, c, o));
    auto stage_us = [&](const std::function<void(Stages&, Call&)>& run) {
      return MedianMicros(o, stream, [&](int i) { run(stages[i % o.sets], calls[i % o.sets]); });
    };
    // As MoeCuda runs it: no per-expert counts (the sort counts the ids itself).
    const double route_us = stage_us([&](Stages& s, Call&) {
      CHECK_OK(LaunchMoeRoute(s.route, nullptr, stream, o.route_path));
    });
    const double perm_us =
        stage_us([&](Stages& s, Call&) { CHECK_OK(LaunchMoePermute(s.permute, stream)); });
    const double front_us = MoeCudaFrontFits(m) ? stage_us([&](Stages& s, Call&) {
      CHECK_OK(LaunchMoeRoutePermute(s.route, s.permute, stream));
    })
                                                : 0.0;
    const double up_us =
        stage_us([&](Stages& s, Call&) { CHECK_OK(LaunchMoeExpertUp(s.up, stream)); });
    const double down_us = stage_us([&](Stages& s, Call& c) {
      // --down-gemm 4: each call reorders ag again, so every other timed call reads it in the
      // other order (a permutation of the same values: the same work).
      if (s.rs_down_after) {
        CHECK_OK(LaunchMoeRegroupTiles(s.regroup, stream));
        CHECK_OK(LaunchMoeToRsOperandOrder(c.ag.get<uint16_t>(), c.m * kK, kI, stream));
      }
      CHECK_OK(LaunchMoeExpertDown(s.down, stream));
    });
    const double comb_us =
        stage_us([&](Stages& s, Call&) { CHECK_OK(LaunchMoeCombine(s.combine, stream)); });
    const double bytes = touched * expert_bytes + 4.0 * m * kD + 4.0 * m * kE;
    const double flops = 2.0 * m * kK * 3.0 * kD * kI;
    const double roof = std::max(bytes / copy_gbps / 1e3, flops / tc_tflops / 1e6);
    const double up_bytes = touched * expert_bytes * 2.0 / 3.0;
    const double down_bytes = touched * expert_bytes / 3.0;
    std::printf(
        "%6ld %7.1f %10.1f %9.1f %9.1f %8.1f %7.0f %10.1f %6.3f | %8.1f %8.1f %8.1f %8.1f %8.1f "
        "%8.1f | %8.0f %8.0f %4s/%s/%s%s\n",
        static_cast<long>(m), touched, us, bytes / 1e6, flops / 1e9, flops / us / 1e6,
        bytes / us / 1e3, roof, roof / us, route_us, perm_us, front_us, up_us, down_us, comb_us,
        up_bytes / up_us / 1e3, down_bytes / down_us / 1e3,
        MoeCudaRoutePath(m, o.route_path) == MoeCudaPath::kLarge ? "L" : "s",
        MoeCudaPlanSort(m * kK, o.sort_path, true).path == MoeCudaPath::kLarge ? "L" : "s",
        GemmLetter(MoeCudaChooseGemm(m, kK, kE, o.gemm, std::max(kD, kI), rs_min)),
        MoeCudaDownRsAfterOtherUp(m, kK, kE, o.gemm, o.down_gemm, std::max(kD, kI), rs_min) ? "+R"
                                                                                            : "");
  }

  std::printf("\n%s", shape_report.c_str());
  std::printf("\n%s", tile_report.c_str());

  if (o.shared) {
    std::printf(
        "\nwith the shared expert (Is %ld, FP8 w13 fused inside MoeCuda; shared-only times of "
        "LaunchMoeSharedExpert, fused w13 and separate w1 + w3; %d weight copies cycled; "
        "+shared_us: on a forked stream next to the routed experts, +shared_seq_us: in order "
        "on one stream):\n%6s %10s %12s %8s %14s %12s %12s %10s\n",
        static_cast<long>(kIs), kSharedCopies, "tokens", "routed_us", "+shared_us", "delta",
        "+shared_seq_us", "shared13_us", "shared_1_3_us", "sh_GB/s");
    const double shared_bytes = 3.0 * kIs * kD * (1.0 + 1.0 / 1024);
    for (size_t ti = 0; ti < o.tokens.size(); ++ti) {
      const int64_t m = o.tokens[ti];
      Call c = MakeCall(m, 77 + m);
      DeviceBuffer ws(*MoeCudaWorkspaceBytes(w, m, kK, &dev_shared[0]->view));
      auto layer = [&](bool concurrent) {
        return MedianMicros(o, stream, [&](int i) {
          MoeCudaParams p = LayerParams(w, c, nullptr, o);
          p.shared = &dev_shared[i % kSharedCopies]->view;
          p.shared_concurrent = concurrent;
          p.workspace = ws.get();
          p.workspace_bytes = ws.bytes();
          CHECK_OK(MoeCuda(p, stream));
        });
      };
      const double layer_us = layer(true);
      const double layer_seq_us = layer(false);
      DeviceBuffer sws(std::max(*MoeSharedExpertWorkspaceBytes(dev_shared[0]->view, m),
                                *MoeSharedExpertWorkspaceBytes(dev_shared_sep[0]->view, m)));
      auto shared_only = [&](const MoeSharedExpertWeights& sw) {
        MoeSharedExpertParams sp;
        sp.weights = &sw;
        sp.m = m;
        sp.x = c.x.get<uint16_t>();
        sp.x_stride = kD;
        sp.y = c.y.get<uint16_t>();
        sp.y_stride = kD;
        sp.workspace = sws.get();
        sp.workspace_bytes = sws.bytes();
        CHECK_OK(LaunchMoeSharedExpert(sp, stream));
      };
      const double fused_us =
          MedianMicros(o, stream, [&](int i) { shared_only(dev_shared[i % kSharedCopies]->view); });
      const double sep_us = MedianMicros(
          o, stream, [&](int i) { shared_only(dev_shared_sep[i % kSharedCopies]->view); });
      std::printf("%6ld %10.1f %12.1f %8.1f %14.1f %12.1f %12.1f %10.0f\n", static_cast<long>(m),
                  routed_us[ti], layer_us, layer_us - routed_us[ti], layer_seq_us, fused_us, sep_us,
                  shared_bytes / fused_us / 1e3);
    }
  }

  std::printf(
      "\nGEMM launches (grid y = tile slots, an upper bound of the tiles; the ring and RS "
      "GEMMs: persistent CTAs x 1; in-flight = "
      "first-wave CTAs per SM x (stages - 1) x weight bytes per stage):\n%6s %4s %5s %6s "
      "%6s %6s %8s %12s %7s %9s\n",
      "tokens", "gemm", "rows", "w_rows", "k_step", "stages", "smem_KB", "grid", "CTA/SM", "KB/SM");
  for (const std::string& line : plans) std::printf("%s\n", line.c_str());

  // Batch-1 latency: host wall time of one call + synchronize, and a CUDA graph of one call.
  Call one = MakeCall(1, 7);
  MoeCudaParams p1 = LayerParams(w, one, nullptr, o);
  CHECK_OK(MoeCuda(p1, stream));  // outside capture first: per-device kernel attributes
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> wall;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_OK(MoeCuda(p1, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= o.warmup) wall.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(wall.begin(), wall.end());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CHECK_OK(MoeCuda(p1, stream));
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double graph_us =
      MedianMicros(o, stream, [&](int) { CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  std::printf(
      "\nbatch-1 latency: host wall (enqueue + sync) median %.1f us; CUDA graph replay "
      "%.1f us (events); same routing every call, so weights may hit L2\n",
      wall[wall.size() / 2], graph_us);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("correctness vs MoeCpu: %s\ncommand: %s\n", ok ? "OK" : "MISMATCH", command.c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace flashserve::kernels

int main(int argc, char** argv) { return flashserve::kernels::Main(argc, argv); }
