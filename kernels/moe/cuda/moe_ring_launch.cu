// The TMA-ring expert GEMM's launchers (cuda/moe_ring_launch.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/per_device_cache.h"
#include "kernels/moe/cuda/moe_ring_combine.cuh"
#include "kernels/moe/cuda/moe_ring_gemm.cuh"
#include "kernels/moe/cuda/moe_ring_launch.h"

namespace flashserve::kernels::moe_device {
namespace {

static_assert(kRingMaxOrdinals == kMoeCudaRingMaxOrdinals);
// The host's buffer size (moe_cuda.h) and the device layout (RingCounters, RingArgs::partial,
// RingSlotRecords) describe the same regions: the counters, [slots][cols], a block per chunk, a
// record per slot row.
static_assert(MoeCudaRingPartialBytes(3, 5) ==
              4 * (kRingCounterWords + 3 * 5 + kMoeCudaRingMaxChunks * kRingBlockFloats + 3));

// The ring kernel's grid: kRingCtasPerSm per SM, at most a quarter of kMoeCudaRingMaxChunks (the
// lead chunks leave room for small ones).
int64_t RingGrid() {
  return std::min<int64_t>(kRingCtasPerSm * SmCount(CurrentDevice()), kMoeCudaRingMaxChunks / 4);
}

RingCut MakeRingCut(bool dynamic) {
  RingCut cut;
  cut.grid = RingGrid();
  cut.dynamic = dynamic;
  return cut;
}

// The ring kernel's shared-memory request on `device`, found (and the kernel opted into it) once
// per device: what it uses, unless its registers would let more than kRingCtasPerSm CTAs share an
// SM — then the least request with which kRingCtasPerSm + 1 do not fit. The grid is kRingCtasPerSm
// per SM and persistent: a further resident CTA piles the work onto some SMs and leaves others
// idle.
template <bool kUp, bool kDynamic>
int RingSmemBytes(int device) {
  static PerDeviceInt cache;
  return cache.Get(device, [device] {
    auto* kernel = MoeExpertRingKernel<kUp, kDynamic>;
    int per_sm = 0;
    int reserved = 0;
    CUDA_CHECK(
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
    const int cap = std::max(kRingSmemUsed, per_sm / (kRingCtasPerSm + 1) - reserved + 1);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, cap));
    int ctas = 0;
    CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kRingThreads, kRingSmemUsed));
    return ctas > kRingCtasPerSm ? cap : kRingSmemUsed;
  });
}

template <bool kUp, bool kDynamic>
void Launch(const RingArgs& a, bool epilogue, cudaStream_t stream) {
  const int smem = RingSmemBytes<kUp, kDynamic>(CurrentDevice());
  cuda_common::LaunchPdl(MoeExpertRingKernel<kUp, kDynamic>,
                         dim3(static_cast<unsigned>(a.cut.grid)), dim3(kRingThreads), smem, stream,
                         a);
  if (!epilogue) return;
  // The epilogue: a warp per (tile, 32 columns) of the call's tile bound, at most 8 blocks of 8
  // warps per SM (grid-stride beyond).
  const int64_t tiles = std::min(a.slots, (a.slots + std::min(a.slots, a.g.n_experts) * 7) / 8);
  const int64_t warps = tiles * (a.g.n / 32);
  const int64_t blocks =
      std::max<int64_t>(1, std::min<int64_t>((warps + 7) / 8, 8 * SmCount(CurrentDevice())));
  cuda_common::LaunchPdl(MoeRingEpilogueKernel<kUp, kDynamic>, dim3(static_cast<unsigned>(blocks)),
                         dim3(kRingEpilogueThreads), 0, stream, a);
}

}  // namespace

int32_t* RingCounterWords(float* partials) { return RingCounters(partials, true); }

bool RingCutIsDynamic(MoeCudaRingCut cut, int64_t slots, int64_t n_experts) {
  if (cut == MoeCudaRingCut::kAuto) return slots >= MoeCudaRingDynamicMinSlots(n_experts);
  return cut == MoeCudaRingCut::kDynamic;
}

bool LaunchRing(const GemmArgs& g, bool up, int64_t slots, float* partials, bool counters_zeroed,
                MoeCudaRingCut cut, cudaStream_t stream, bool epilogue) {
  const int64_t pair_cols = up ? 64 : 128;
  if (g.k % kRingUnitK != 0 || g.n % pair_cols != 0 || slots <= 0) return false;
  // The walk's cursor (and the dynamic cut's stage header) hold tile and unit indices as int32:
  // the tile bound · blocks · units must fit.
  const int64_t max_tiles = std::min(slots, slots / 8 + g.n_experts);
  if (max_tiles * (g.n / pair_cols) * (g.k / kRingUnitK) > INT32_MAX) return false;
  // The producer copies each row's 8 scale bytes of a unit in one 8-byte cp.async.
  if (reinterpret_cast<uintptr_t>(g.w_scale) % 8 != 0 ||
      (up && reinterpret_cast<uintptr_t>(g.w_up_scale) % 8 != 0)) {
    return false;
  }
  RingArgs a;
  a.g = g;
  a.partial = RingPartials(partials);
  a.counters = RingCounters(partials, up);
  a.slots = slots;
  a.cut = MakeRingCut(RingCutIsDynamic(cut, slots, g.n_experts));
  // Weights: [E·N rows][K/2 bytes], boxes of 128 code bytes × 64 (up: w1 and w3 each) or 128
  // rows.
  const int64_t rows = g.n_experts * g.n;
  const uint32_t box_rows = up ? 64 : 128;
  if (!wgmma_ws::MakeTmaOperand(&a.w, g.w, 1, g.k / 2, rows, g.k / 2, 1, 0, 128, box_rows, true)) {
    return false;
  }
  if (up && !wgmma_ws::MakeTmaOperand(&a.w_up, g.w_up, 1, g.k / 2, rows, g.k / 2, 1, 0, 128,
                                      box_rows, true)) {
    return false;
  }
  // Activations: (64 columns, K/64 groups, rows), boxes of 64 × 4 × 1 (one row's 256 columns).
  // Rows: the slot rows, or (a_row) the token rows, fewer than the slots.
  if (!wgmma_ws::MakeTmaOperand(&a.a, g.a, 2, 64, g.k / 64, 64, slots, g.k, 64, 4, true)) {
    return false;
  }
  if (a.cut.dynamic && !counters_zeroed) {
    CUDA_CHECK(cudaMemsetAsync(partials, 0, 4 * sizeof(int32_t), stream));
  }
  if (a.cut.dynamic) {
    up ? Launch<true, true>(a, true, stream) : Launch<false, true>(a, epilogue, stream);
  } else {
    up ? Launch<true, false>(a, true, stream) : Launch<false, false>(a, epilogue, stream);
  }
  return true;
}

void LaunchRingCombine(const MoeCombineParams& c, float* partials, const int32_t* num_tiles,
                       int64_t slots, int64_t inter, bool dynamic, cudaStream_t stream) {
  if (c.m == 0) return;
  RingCombineArgs a;
  a.c = c;
  a.partial = RingPartials(partials);
  a.counters = RingCounters(partials, false);
  a.num_tiles = num_tiles;
  a.slots = slots;
  a.units = inter / kRingUnitK;
  a.cut = MakeRingCut(dynamic);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(c.m, int64_t{1} << 20)),
                  static_cast<unsigned>(RingCombineSplits(c.dim)));
  if (dynamic) {
    MoeRingCombineKernel<true><<<grid, kRingCombineThreads, 0, stream>>>(a);
  } else {
    MoeRingCombineKernel<false><<<grid, kRingCombineThreads, 0, stream>>>(a);
  }
  CUDA_CHECK(cudaGetLastError());
}

MoeCudaGemmPlan DescribeRing(bool up, bool dynamic) {
  MoeCudaGemmPlan plan;
  plan.stream = true;
  plan.ring = true;
  plan.tile_rows = kMoeCudaStreamTileRows;
  plan.weight_rows = 128;
  plan.k_step = kRingUnitK;
  plan.stages = kRingStages;
  const int device = CurrentDevice();
  const void* kernel = nullptr;
  if (dynamic) {
    plan.smem_bytes = up ? RingSmemBytes<true, true>(device) : RingSmemBytes<false, true>(device);
    kernel = up ? reinterpret_cast<const void*>(MoeExpertRingKernel<true, true>)
                : reinterpret_cast<const void*>(MoeExpertRingKernel<false, true>);
  } else {
    plan.smem_bytes = up ? RingSmemBytes<true, false>(device) : RingSmemBytes<false, false>(device);
    kernel = up ? reinterpret_cast<const void*>(MoeExpertRingKernel<true, false>)
                : reinterpret_cast<const void*>(MoeExpertRingKernel<false, false>);
  }
  plan.grid_x = RingGrid();
  plan.grid_y = 1;
  int ctas = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kRingThreads,
                                                           static_cast<int>(plan.smem_bytes)));
  plan.ctas_per_sm = ctas;
  plan.weight_stage_bytes = kRingWeightBytes + kRingScaleBytes;
  return plan;
}

}  // namespace flashserve::kernels::moe_device
