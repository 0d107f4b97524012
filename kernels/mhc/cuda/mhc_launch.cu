// CUDA launchers of the mHC ops: validate (mhc_params.cc, shared with the CPU bodies), pick the
// instantiation for the operands' alignment, size the grid, launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/per_device_cache.h"
#include "kernels/gemm/cuda/tma_map.h"
#include "kernels/mhc/cuda/mhc_kernels.cuh"
#include "kernels/mhc/cuda/mhc_small_kernels.cuh"
#include "kernels/mhc/cuda/mhc_tc_kernels.cuh"
#include "kernels/mhc/cuda/mhc_tc_plan.h"
#include "kernels/mhc/cuda/mhc_tc_tma_kernel.cuh"
#include "kernels/mhc/cuda/mhc_wg_kernel.cuh"
#include "kernels/mhc/mhc.h"

namespace flashserve::kernels {
namespace {

using mhc_device::kElemThreads;
using mhc_device::kFinishThreads;
using mhc_device::kMixSmemBytes;
using mhc_device::kMixThreads;
using mhc_device::kTokensPerTile;

// Grid-stride kernels never need more blocks than this.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;
constexpr int64_t kMaxTilesPerBlock = 8;

bool Aligned(const void* p, int64_t stride_bytes, int64_t n) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(n) == 0 && stride_bytes % n == 0;
}

unsigned BlocksFor(int64_t items, int64_t per_block) {
  return static_cast<unsigned>(std::min((items + per_block - 1) / per_block, kMaxBlocks));
}

template <bool kPairVec, bool kCollapse>
void LaunchPartial(const MhcMixesParams& p, float* workspace, dim3 grid, cudaStream_t stream) {
  auto* kernel = mhc_device::MixesPartialKernel<kPairVec, kCollapse>;
  static PerDeviceInt smem_attribute;  // per device: set once on each device that launches it
  smem_attribute.Get(CurrentDevice(), [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kMixSmemBytes)));
    return 1;
  });
  kernel<<<grid, kMixThreads, kMixSmemBytes, stream>>>(p, workspace);
  CUDA_CHECK(cudaGetLastError());
}

template <bool kWide, bool kVec, int kFn, bool kCollapse>
void LaunchPartialTc(const MhcMixesParams& p, float* workspace, bool coll_vec, unsigned blocks,
                     cudaStream_t stream) {
  auto* kernel = mhc_device::MixesPartialTcKernel<kWide, kVec, kFn, kCollapse>;
  static PerDeviceInt smem_attribute;
  smem_attribute.Get(CurrentDevice(), [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(mhc_device::kTcSmemBytes)));
    return 1;
  });
  kernel<<<blocks, mhc_device::TcThreads(kWide), mhc_device::kTcSmemBytes, stream>>>(p, workspace,
                                                                                     coll_vec);
  CUDA_CHECK(cudaGetLastError());
}

// The block shape (mhc_tc_plan.h): wide only for the mixes alone with >= 16 units per block.
template <bool kVec, int kFn>
void LaunchPartialTc(const MhcMixesParams& p, float* workspace, bool coll_vec, unsigned blocks,
                     cudaStream_t stream) {
  if (p.pre_in != nullptr) {
    LaunchPartialTc<false, kVec, kFn, true>(p, workspace, coll_vec, blocks, stream);
  } else if (mhc_tc::WideFor(mhc_tc::Units(p.tokens, p.dim), blocks, false)) {
    LaunchPartialTc<true, kVec, kFn, false>(p, workspace, coll_vec, blocks, stream);
  } else {
    LaunchPartialTc<false, kVec, kFn, false>(p, workspace, coll_vec, blocks, stream);
  }
}

// The wgmma body's groups per stage (mhc_wg_kernel.cuh WgShape): 2 (two warpgroups, 128-byte
// TMA rows) measured 0.73 of the copy at 16,384 tokens against 1's 0.62 (README.md "Session 72");
// 1 stays a build-time switch for A/B builds (scripts/kits' kit-variant).
#ifndef FS_MHC_WG_GPI
#define FS_MHC_WG_GPI 2
#endif
constexpr int kWgGpi = FS_MHC_WG_GPI;
// Whether the wgmma body also takes the mixes with the fused collapse: on shape 2 it measured
// 372 us (0.75 of the copy) at 16,384 tokens against the mma.sync TMA body's 485-489 (0.57), same
// bits (README.md "Session 73"); 0 (A/B builds) leaves the collapse on the TMA body. Shape 1
// spilled with it (session 72): only shape 2 takes it.
#ifndef FS_MHC_WG_COLLAPSE
#define FS_MHC_WG_COLLAPSE 1
#endif
constexpr bool kWgCollapse = FS_MHC_WG_COLLAPSE != 0 && kWgGpi == 2;

// The wgmma body (mhc_wg_kernel.cuh) for the mixes alone where the TMA body applies (same
// conditions, see below): units of 64 tokens, one block per SM at most. False: nothing launched.
bool TryLaunchPartialWg(const MhcMixesParams& p, float* workspace, bool coll_vec,
                        cudaStream_t stream) {
  using Shape = mhc_device::WgShape<kWgGpi>;
  wgmma_ws::TmaOperand x_map;
  if (!wgmma_ws::MakeTmaOperand(&x_map, p.x, 2, kMhcStreams * p.dim, p.tokens, p.x_stride, 1, 0,
                                Shape::kBoxDims, static_cast<uint32_t>(mhc_tc::kWgTileTokens),
                                false)) {
    return false;
  }
  using mhc_device::kFnPrepared;
  using mhc_device::kFnVector;
  using mhc_device::MixesPartialWgKernel;
  constexpr bool kC = kWgCollapse;
  const bool collapse = kC && p.pre_in != nullptr;
  auto* kernel = p.fn_frags != nullptr
                     ? (collapse ? MixesPartialWgKernel<kFnPrepared, kWgGpi, kC>
                                 : MixesPartialWgKernel<kFnPrepared, kWgGpi, false>)
                     : (collapse ? MixesPartialWgKernel<kFnVector, kWgGpi, kC>
                                 : MixesPartialWgKernel<kFnVector, kWgGpi, false>);
  static PerDeviceInt smem_attribute;  // every instantiation, once per device
  smem_attribute.Get(CurrentDevice(), [&] {
    for (auto* k : {MixesPartialWgKernel<kFnPrepared, kWgGpi, false>,
                    MixesPartialWgKernel<kFnVector, kWgGpi, false>,
                    MixesPartialWgKernel<kFnPrepared, kWgGpi, kC>,
                    MixesPartialWgKernel<kFnVector, kWgGpi, kC>}) {
      CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(Shape::kSmemBytes)));
    }
    return 1;
  });
  const int64_t units = mhc_tc::WgUnits(p.tokens, p.dim);
  const auto blocks = static_cast<unsigned>(mhc_tc::BlocksFor(units, SmCount(CurrentDevice())));
  kernel<<<blocks, Shape::kThreads, Shape::kSmemBytes, stream>>>(x_map, p, workspace, coll_vec);
  CUDA_CHECK(cudaGetLastError());
  return true;
}

// The TMA body (mhc_tc_tma_kernel.cuh) where it applies: the wide block shape (>= 16 units per
// block; with or without the fused collapse), D a multiple of the slice width, X rows and fn
// 16-byte aligned, and the driver describes X. False: nothing launched, the caller takes the
// tensor-core body.
bool TryLaunchPartialTma(const MhcMixesParams& p, float* workspace, unsigned blocks, bool fn_vec,
                         bool coll_vec, bool wgmma, cudaStream_t stream) {
  // The block shape's rule for the mixes alone: the TMA body keeps no X ring in registers, so
  // the fused collapse fits its 128 registers (session 50), where the tensor-core body's wide
  // shape spilled.
  if (!mhc_tc::WideFor(mhc_tc::Units(p.tokens, p.dim), blocks, false) || !fn_vec ||
      p.dim % kMhcMixesSliceDims != 0 || !Aligned(p.x, 2 * p.x_stride, 16)) {
    return false;
  }
  // The wgmma body for the mixes alone, and with the fused collapse where kWgCollapse (shape 2's
  // default; shape 1 keeps the collapse on mma.sync, where it was faster).
  if (wgmma && (p.pre_in == nullptr || kWgCollapse) &&
      TryLaunchPartialWg(p, workspace, coll_vec, stream)) {
    return true;
  }
  wgmma_ws::TmaOperand x_map;
  if (!wgmma_ws::MakeTmaOperand(&x_map, p.x, 2, kMhcStreams * p.dim, p.tokens, p.x_stride, 1, 0,
                                mhc_device::kTcChunkDims,
                                static_cast<uint32_t>(mhc_tc::kTileTokens), false)) {
    return false;
  }
  using mhc_device::kFnPrepared;
  using mhc_device::kFnVector;
  using mhc_device::MixesPartialTmaKernel;
  const bool collapse = p.pre_in != nullptr;
  auto* kernel = p.fn_frags != nullptr ? (collapse ? MixesPartialTmaKernel<kFnPrepared, true>
                                                   : MixesPartialTmaKernel<kFnPrepared, false>)
                                       : (collapse ? MixesPartialTmaKernel<kFnVector, true>
                                                   : MixesPartialTmaKernel<kFnVector, false>);
  static PerDeviceInt smem_attribute;  // every instantiation, once per device
  smem_attribute.Get(CurrentDevice(), [&] {
    for (auto* k :
         {MixesPartialTmaKernel<kFnPrepared, false>, MixesPartialTmaKernel<kFnVector, false>,
          MixesPartialTmaKernel<kFnPrepared, true>, MixesPartialTmaKernel<kFnVector, true>}) {
      CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(mhc_device::kTmaSmemBytes)));
    }
    return 1;
  });
  kernel<<<blocks, mhc_device::kTmaThreads, mhc_device::kTmaSmemBytes, stream>>>(
      x_map, p, workspace, coll_vec);
  CUDA_CHECK(cudaGetLastError());
  return true;
}

// The tensor-core body (mhc_tc_kernels.cuh): one block per SM at most, the units split evenly.
// wgmma: the wgmma body may take the TMA body's launches (kTensorCoreMmaSync: never).
void LaunchMixesTc(const MhcMixesParams& p, float* workspace, int64_t slices, bool wgmma,
                   cudaStream_t stream) {
  const int sms = SmCount(CurrentDevice());
  const int64_t units = mhc_tc::Units(p.tokens, p.dim);
  const auto blocks = static_cast<unsigned>(
      mhc_tc::SliceAlignedBlocks(units, slices, mhc_tc::BlocksFor(units, sms)));
  const bool vec = p.dim % 8 == 0 && Aligned(p.x, 2 * p.x_stride, 16);
  const bool fn_vec = p.dim % 4 == 0 && Aligned(p.fn, 0, 16);
  const bool coll_vec =
      p.collapsed != nullptr && p.dim % 8 == 0 && Aligned(p.collapsed, 2 * p.collapsed_stride, 16);
  using mhc_device::kFnPrepared;
  using mhc_device::kFnScalar;
  using mhc_device::kFnVector;
  const bool prepared = p.fn_frags != nullptr;
  if (TryLaunchPartialTma(p, workspace, blocks, fn_vec || prepared, coll_vec, wgmma, stream)) {
    // X by the TMA unit (wgmma or mma.sync); the same bits as the tensor-core body's wide shape.
  } else if (prepared && vec) {
    LaunchPartialTc<true, kFnPrepared>(p, workspace, coll_vec, blocks, stream);
  } else if (prepared) {
    LaunchPartialTc<false, kFnPrepared>(p, workspace, coll_vec, blocks, stream);
  } else if (vec && fn_vec) {
    LaunchPartialTc<true, kFnVector>(p, workspace, coll_vec, blocks, stream);
  } else if (fn_vec) {
    LaunchPartialTc<false, kFnVector>(p, workspace, coll_vec, blocks, stream);
  } else {
    // fn misaligned or D % 4 != 0: X takes the scalar path too (rare; correct, slower).
    LaunchPartialTc<false, kFnScalar>(p, workspace, coll_vec, blocks, stream);
  }
  const int64_t pairs = (p.tokens + 1) / 2;
  const int64_t warps = mhc_device::kTcFinishThreads / 32;
  mhc_device::
      MixesFinishLanesKernel<<<BlocksFor(pairs, warps), mhc_device::kTcFinishThreads, 0, stream>>>(
          p, workspace, slices);
  CUDA_CHECK(cudaGetLastError());
}

// The small-batch body (mhc_small_kernels.cuh): one cooperative launch, as many blocks as there
// are items (slices x 8) but no more than can be resident at once, nor than
// p.small_batch_ctas when set.
template <bool kVec, int kFn, bool kCollapse>
void LaunchSmallTc(MhcMixesParams p, float* workspace, bool coll_vec, int64_t slices,
                   cudaStream_t stream) {
  auto* kernel = mhc_device::MixesSmallTcKernel<kVec, kFn, kCollapse>;
  const int device = CurrentDevice();
  const int sms = SmCount(device);
  static PerDeviceInt occupancy;  // per instantiation and device; no dynamic shared memory
  const int per_sm = occupancy.Get(device, [&] {
    int v = 0;
    CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel, mhc_device::kSmallThreads, 0));
    return v;
  });
  CHECK(per_sm >= 1);
  const int64_t items = slices * mhc_device::kTcGroups;
  int64_t grid = std::min<int64_t>(items, int64_t{per_sm} * sms);
  if (p.small_batch_ctas > 0) grid = std::min(grid, p.small_batch_ctas);
  const auto blocks = static_cast<unsigned>(grid);
  void* args[] = {&p, &workspace, &coll_vec};
  CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(blocks),
                                         dim3(mhc_device::kSmallThreads), args, 0, stream));
}

template <bool kVec, int kFn>
void LaunchSmallTc(const MhcMixesParams& p, float* workspace, bool coll_vec, int64_t slices,
                   cudaStream_t stream) {
  if (p.pre_in != nullptr) {
    LaunchSmallTc<kVec, kFn, true>(p, workspace, coll_vec, slices, stream);
  } else {
    LaunchSmallTc<kVec, kFn, false>(p, workspace, coll_vec, slices, stream);
  }
}

void LaunchMixesSmallTc(const MhcMixesParams& p, float* workspace, int64_t slices,
                        cudaStream_t stream) {
  const bool vec = p.dim % 8 == 0 && Aligned(p.x, 2 * p.x_stride, 16);
  const bool fn_vec = p.dim % 4 == 0 && Aligned(p.fn, 0, 16);
  const bool coll_vec =
      p.collapsed != nullptr && p.dim % 8 == 0 && Aligned(p.collapsed, 2 * p.collapsed_stride, 16);
  using mhc_device::kFnPrepared;
  const bool prepared = p.fn_frags != nullptr;
  if (prepared && vec) {
    LaunchSmallTc<true, kFnPrepared>(p, workspace, coll_vec, slices, stream);
  } else if (prepared) {
    LaunchSmallTc<false, kFnPrepared>(p, workspace, coll_vec, slices, stream);
  } else if (vec && fn_vec) {
    LaunchSmallTc<true, mhc_device::kFnVector>(p, workspace, coll_vec, slices, stream);
  } else if (fn_vec) {
    LaunchSmallTc<false, mhc_device::kFnVector>(p, workspace, coll_vec, slices, stream);
  } else {
    LaunchSmallTc<false, mhc_device::kFnScalar>(p, workspace, coll_vec, slices, stream);
  }
}

// Whether the small-batch body applies: few tokens, D <= 16384, enough 16-byte aligned workspace.
bool SmallBatchFits(const MhcMixesParams& p, const float* workspace, int64_t workspace_floats) {
  const int64_t need = MhcMixesSmallBatchWorkspaceFloats(p.tokens, p.dim);
  return need > 0 && workspace_floats >= need && Aligned(workspace, 0, 16);
}

}  // namespace

absl::Status LaunchMhcPrepareFn(int64_t dim, const float* fn, void* frags, int64_t frags_bytes,
                                CUstream_st* stream) {
  if (dim < 1 || fn == nullptr || frags == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MhcPrepareFn: dim %d must be >= 1 and fn / frags non-null", dim));
  }
  if (!Aligned(frags, 0, 16) || frags_bytes < MhcFnFragmentBytes(dim)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MhcPrepareFn: frags must be 16-byte aligned and hold MhcFnFragmentBytes(%d) = %d bytes; "
        "it holds %d",
        dim, MhcFnFragmentBytes(dim), frags_bytes));
  }
  const int64_t slices = mhc_tc::Slices(dim);
  MhcMixesParams p;
  p.dim = dim;
  p.fn = fn;
  const unsigned blocks = BlocksFor(slices * mhc_device::kTcFragEntries, 256);
  if (dim % 4 == 0 && Aligned(fn, 0, 16)) {
    mhc_device::PrepareFnKernel<true>
        <<<blocks, 256, 0, stream>>>(p, slices, static_cast<uint4*>(frags));
  } else {
    mhc_device::PrepareFnKernel<false>
        <<<blocks, 256, 0, stream>>>(p, slices, static_cast<uint4*>(frags));
  }
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchMhcMixes(const MhcMixesParams& p, float* workspace, int64_t workspace_floats,
                            CUstream_st* stream, MhcMixesGpuKernel kernel) {
  RETURN_IF_ERROR(Validate(p));
  if (p.fn_frags != nullptr && !Aligned(p.fn_frags, 0, 16)) {
    return absl::InvalidArgumentError("MhcMixes: fn_frags must be 16-byte aligned");
  }
  if (p.tokens == 0) return absl::OkStatus();
  const int64_t need = MhcMixesSliceWorkspaceFloats(p.tokens, p.dim);
  if (workspace == nullptr || workspace_floats < need) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MhcMixes: workspace holds %d floats, %d needed (MhcMixesSliceWorkspaceFloats)",
        workspace == nullptr ? 0 : workspace_floats, need));
  }
  const int64_t slices = (p.dim + kMhcMixesSliceDims - 1) / kMhcMixesSliceDims;
  const int64_t tiles = (p.tokens + kTokensPerTile - 1) / kTokensPerTile;
  if (slices > 65535 || tiles >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MhcMixes: dim %d / tokens %d too large for one launch", p.dim, p.tokens));
  }
  const bool small_fits = SmallBatchFits(p, workspace, workspace_floats);
  if (kernel == MhcMixesGpuKernel::kTensorCoreSmallBatch && !small_fits) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MhcMixes: the small-batch body needs tokens %d <= %d, dim %d <= %d and a 16-byte aligned "
        "workspace of %d floats (MhcMixesSmallBatchWorkspaceFloats); it holds %d",
        p.tokens, kMhcMixesSmallBatchTokens, p.dim,
        kMhcMixesSmallBatchMaxSlices * kMhcMixesSliceDims,
        MhcMixesSmallBatchWorkspaceFloats(p.tokens, p.dim), workspace_floats));
  }
  // kTensorCore: the small-batch body only where it is the faster one (mhc.h).
  const bool small_auto = p.tokens <= kMhcMixesSmallBatchAutoTokens;
  if (small_fits && ((kernel == MhcMixesGpuKernel::kTensorCore && small_auto) ||
                     kernel == MhcMixesGpuKernel::kTensorCoreSmallBatch)) {
    LaunchMixesSmallTc(p, workspace, slices, stream);
    return absl::OkStatus();
  }
  if (kernel != MhcMixesGpuKernel::kFp32Fma) {
    LaunchMixesTc(p, workspace, slices, kernel != MhcMixesGpuKernel::kTensorCoreMmaSync, stream);
    return absl::OkStatus();
  }
  // Up to kMaxTilesPerBlock token tiles per block amortise its fn staging (96 KB from L2) while
  // keeping >= 64 blocks per slice; a token's result does not depend on which block takes it.
  const int64_t tiles_per_block = std::clamp<int64_t>(tiles / 64, 1, kMaxTilesPerBlock);
  const dim3 grid(static_cast<unsigned>((tiles + tiles_per_block - 1) / tiles_per_block),
                  static_cast<unsigned>(slices));
  const bool vec = p.dim % 2 == 0 && Aligned(p.x, 2 * p.x_stride, 4);
  const bool collapse = p.pre_in != nullptr;
  if (vec && collapse) {
    LaunchPartial<true, true>(p, workspace, grid, stream);
  } else if (vec) {
    LaunchPartial<true, false>(p, workspace, grid, stream);
  } else if (collapse) {
    LaunchPartial<false, true>(p, workspace, grid, stream);
  } else {
    LaunchPartial<false, false>(p, workspace, grid, stream);
  }
  mhc_device::MixesFinishKernel<<<BlocksFor(p.tokens, kFinishThreads), kFinishThreads, 0, stream>>>(
      p, workspace, slices);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchHcPre(const HcPreParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0) return absl::OkStatus();
  const bool vec =
      p.dim % 8 == 0 && Aligned(p.x, 2 * p.x_stride, 16) && Aligned(p.out, 2 * p.out_stride, 16);
  const int64_t kw = vec ? 8 : 1;
  const unsigned blocks = BlocksFor(p.tokens * (p.dim / kw), kElemThreads);
  if (vec) {
    mhc_device::HcPreKernel<8><<<blocks, kElemThreads, 0, stream>>>(p);
  } else {
    mhc_device::HcPreKernel<1><<<blocks, kElemThreads, 0, stream>>>(p);
  }
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchHcPost(const HcPostParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.tokens == 0) return absl::OkStatus();
  const bool vec = p.dim % 8 == 0 && Aligned(p.f, 2 * p.f_stride, 16) &&
                   Aligned(p.residual, 2 * p.residual_stride, 16) &&
                   Aligned(p.out, 2 * p.out_stride, 16);
  const int64_t kw = vec ? 8 : 1;
  const unsigned blocks = BlocksFor(p.tokens * (p.dim / kw), kElemThreads);
  if (vec) {
    mhc_device::HcPostKernel<8><<<blocks, kElemThreads, 0, stream>>>(p);
  } else {
    mhc_device::HcPostKernel<1><<<blocks, kElemThreads, 0, stream>>>(p);
  }
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
