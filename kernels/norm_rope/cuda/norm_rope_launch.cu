// CUDA launchers of RMSNorm, text RoPE and the fused RMSNorm + RoPE: validate (norm_rope_params.cc,
// shared with the CPU bodies), pick the instantiation for the shape and the operands' alignment,
// size the grid, launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/per_device_cache.h"
#include "kernels/norm_rope/cuda/norm_rope_kernels.cuh"
#include "kernels/norm_rope/norm_rope.h"
#include "kernels/norm_rope/rope_table.h"
#include "kernels/quant/quant.h"

namespace flashserve::kernels {
namespace {

using norm_rope_device::kNormThreads;
using norm_rope_device::kRopeThreads;
using norm_rope_device::NoRope;
using norm_rope_device::RopeArgs;

// Rows (tokens) are walked grid-stride; more blocks than this only queue.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;
// A warp per row up to this width; a 256-thread block per row above.
constexpr int64_t kWarpRowMaxCols = 1024;
// RopeVec16Kernel takes 4 units (16-byte words) per thread where a token has at least this many.
constexpr int64_t kRopeWideUnits = 4 * kRopeThreads;
// Vectorised RMSNorm keeps rows in registers between its passes (RmsNormKernel's kCache): up to
// this many rows as fp32 values with their weights (kRow: cuts a decode row's latency, but its
// registers cost occupancy, which made 16384-row launches 1.2-2.2x slower on an H200), above it
// as raw 16-byte words (kRaw: one read of each row at full occupancy; README.md "CUDA").
constexpr int64_t kNormCacheMaxRows = 256;
// kRaw on rows of at most kWarpRawMaxCols columns (up to 8 chunks per lane of a warp;
// LaunchNormRaw picks the lanes per row and the slots). Wider rows of many-row calls take a block
// per row with the next row prefetched (LaunchNormWide); kRaw there without the prefetch had
// measured level with two passes (16384 x 5120: 120.0 vs 121.3 us on an H200).
constexpr int64_t kWarpRawMaxCols = 8 * 32 * norm_rope_device::kNormRawCache;

bool Aligned(const void* p, int64_t stride_bytes, int64_t n) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(n) == 0 && stride_bytes % n == 0;
}

unsigned BlocksFor(int64_t items, int64_t per_block) {
  return static_cast<unsigned>(std::min((items + per_block - 1) / per_block, kMaxBlocks));
}

RopeArgs MakeRopeArgs(const RopeTable& table, const int64_t* positions, bool inverse) {
  RopeArgs a;
  a.positions = positions;
  a.inverse = inverse;
  const auto freqs = table.frequencies();
  a.pairs = static_cast<int>(freqs.size());
  std::copy(freqs.begin(), freqs.end(), a.freqs);
  return a;
}

template <int kGroup, typename W, int kW, typename Tail,
          int kCache = norm_rope_device::kNormCacheNone, int kRawSlots = 1, bool kQdq = false>
void LaunchNorm(const RmsNormParams& p, const W* weight, const Tail& tail, cudaStream_t stream) {
  constexpr int64_t kRowsPerBlock = kNormThreads / kGroup;
  norm_rope_device::RmsNormKernel<kGroup, W, kW, Tail, kCache, kRawSlots, false, kQdq>
      <<<BlocksFor(p.rows, kRowsPerBlock), kNormThreads, 0, stream>>>(p, weight, tail);
  CUDA_CHECK(cudaGetLastError());
}

// Wide rows (more than kWarpRawMaxCols columns, at most kNormThreads · kNormRawCache chunks) of a
// many-row call: a block per row as raw words with the next row prefetched (kPrefetch), on one
// wave of resident blocks (each walks rows grid-stride, so a prefetch is never wasted on a row
// another block takes); the occupancy is asked once per device and instantiation. 16384 x 5120
// on an H200: 119.8-120.1 -> 105.2-105.4 us, 0.69 -> 0.79 of the copy (session 46). Not used on
// the narrow groups (LaunchNormRawLanes), where it measured slower (16384 x 1280 28.8 -> 34.2 us,
// fused norm + RoPE 16384 x 512 16.5 -> 17.5: the second set of slots costs occupancy).
template <int kSlots, typename W, typename Tail, bool kQdq>
void LaunchNormWideSlots(const RmsNormParams& p, const W* weight, const Tail& tail,
                         cudaStream_t stream) {
  auto* kernel =
      norm_rope_device::RmsNormKernel<kNormThreads, W, 8, Tail, norm_rope_device::kNormCacheRaw,
                                      kSlots, true, kQdq>;
  static PerDeviceInt per_sm;
  const int device = CurrentDevice();
  const int blocks_per_sm = per_sm.Get(device, [&] {
    int v = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel, kNormThreads, 0));
    return v;
  });
  const int64_t resident = int64_t{SmCount(device)} * std::max(blocks_per_sm, 1);
  const int64_t blocks = std::min<int64_t>(BlocksFor(p.rows, 1), resident);
  kernel<<<static_cast<unsigned>(blocks), kNormThreads, 0, stream>>>(p, weight, tail);
  CUDA_CHECK(cudaGetLastError());
}

template <typename W, typename Tail, bool kQdq>
void LaunchNormWide(const RmsNormParams& p, const W* weight, const Tail& tail,
                    cudaStream_t stream) {
  const int64_t slots = (p.cols / 8 + kNormThreads - 1) / kNormThreads;
  if (slots <= 2) {
    LaunchNormWideSlots<2, W, Tail, kQdq>(p, weight, tail, stream);
  } else if (slots <= 3) {
    LaunchNormWideSlots<3, W, Tail, kQdq>(p, weight, tail, stream);
  } else if (slots <= 4) {
    LaunchNormWideSlots<4, W, Tail, kQdq>(p, weight, tail, stream);
  } else {
    LaunchNormWideSlots<norm_rope_device::kNormRawCache, W, Tail, kQdq>(p, weight, tail, stream);
  }
}

// The vectorised (kW = 8) kernel, register-cached (kRow) for few rows whose chunks fit.
template <int kGroup, typename W, typename Tail>
void LaunchNormVec(const RmsNormParams& p, const W* weight, const Tail& tail, cudaStream_t stream) {
  const bool fits = p.cols / 8 <= int64_t{norm_rope_device::kNormCache} * kGroup;
  if (fits && p.rows <= kNormCacheMaxRows) {
    LaunchNorm<kGroup, W, 8, Tail, norm_rope_device::kNormCacheRow>(p, weight, tail, stream);
  } else {
    LaunchNorm<kGroup, W, 8, Tail>(p, weight, tail, stream);
  }
}

// kRaw on a warp per row, with 2, 4 or 8 slots per lane: the fewest that hold the row, since
// unused slots cost registers and so occupancy (16384 x 512 with 8 slots: 13.9 -> 15.0 us, with
// 2: 13.7 -> 12.5 us, on an H200).
// kRaw with kLanes lanes per row and 2, 4 or 8 slots per lane (the fewest that hold the row).
template <int kLanes, typename W, typename Tail, bool kQdq>
void LaunchNormRawLanes(const RmsNormParams& p, const W* weight, const Tail& tail, int64_t slots,
                        cudaStream_t stream) {
  constexpr int kRaw = norm_rope_device::kNormCacheRaw;
  if (slots <= 2) {
    LaunchNorm<kLanes, W, 8, Tail, kRaw, 2, kQdq>(p, weight, tail, stream);
  } else if (slots <= 4) {
    LaunchNorm<kLanes, W, 8, Tail, kRaw, 4, kQdq>(p, weight, tail, stream);
  } else {
    LaunchNorm<kLanes, W, 8, Tail, kRaw, norm_rope_device::kNormRawCache, kQdq>(p, weight, tail,
                                                                                stream);
  }
}

// kRaw: a group of 4, 8, 16 or 32 lanes per row, the fewest that hold the row at 2 chunks per
// lane, so rows of <= 512 columns keep 2 chunks (32 bytes) per lane in flight and a warp takes 8 /
// 4 / 2 / 1 rows at once; wider rows take a warp with 4 or 8 slots. Unused slots cost registers
// and so occupancy (16384 x 512 with 8 slots: 13.9 -> 15.0 us, with 2: 13.7 -> 12.5 us, on an
// H200), and a lane with one chunk keeps too few bytes in flight (16384 x 128 on a warp per row:
// 9.3 us, on 8 lanes: 6.0).
template <typename W, typename Tail, bool kQdq>
void LaunchNormRaw(const RmsNormParams& p, const W* weight, const Tail& tail, cudaStream_t stream) {
  const int64_t chunks = p.cols / 8;
  if (chunks <= 8) {
    LaunchNormRawLanes<4, W, Tail, kQdq>(p, weight, tail, 2, stream);
  } else if (chunks <= 16) {
    LaunchNormRawLanes<8, W, Tail, kQdq>(p, weight, tail, 2, stream);
  } else if (chunks <= 32) {
    LaunchNormRawLanes<16, W, Tail, kQdq>(p, weight, tail, 2, stream);
  } else {
    LaunchNormRawLanes<32, W, Tail, kQdq>(p, weight, tail, (chunks + 31) / 32, stream);
  }
}

// kQdq: also writes out_qdq in the raw paths' pass 2 (many rows, 16-byte aligned rows); false
// (nothing enqueued) where another path would run. Without kQdq: true.
template <typename W, typename Tail, bool kQdq = false>
bool LaunchNormFor(const RmsNormParams& p, const W* weight, const Tail& tail, cudaStream_t stream) {
  const int64_t plain = p.cols - 2 * int64_t{tail.pairs};
  const bool vec = p.cols % 8 == 0 && plain % 8 == 0 && Aligned(p.x, 2 * p.x_stride, 16) &&
                   Aligned(p.out, 2 * p.out_stride, 16) && Aligned(weight, 0, 16);
  const bool warp_rows = p.cols <= kWarpRowMaxCols;
  const bool raw_rows = p.rows > kNormCacheMaxRows && p.cols <= kWarpRawMaxCols;
  const bool wide_rows = p.rows > kNormCacheMaxRows && p.cols > kWarpRawMaxCols &&
                         p.cols / 8 <= int64_t{kNormThreads} * norm_rope_device::kNormRawCache;
  if constexpr (kQdq) {
    if (!vec || !Aligned(p.out_qdq, 2 * p.out_qdq_stride, 16) || !(raw_rows || wide_rows)) {
      return false;
    }
  }
  if (vec && raw_rows) {
    LaunchNormRaw<W, Tail, kQdq>(p, weight, tail, stream);
  } else if (vec && wide_rows) {
    LaunchNormWide<W, Tail, kQdq>(p, weight, tail, stream);
  } else if (warp_rows && vec) {
    LaunchNormVec<32>(p, weight, tail, stream);
  } else if (warp_rows) {
    LaunchNorm<32, W, 1>(p, weight, tail, stream);
  } else if (vec) {
    LaunchNormVec<kNormThreads>(p, weight, tail, stream);
  } else {
    LaunchNorm<kNormThreads, W, 1>(p, weight, tail, stream);
  }
  return true;
}

template <typename Tail, bool kQdq = false>
bool LaunchNormWeights(const RmsNormParams& p, const Tail& tail, cudaStream_t stream) {
  if (p.weight_bf16 != nullptr)
    return LaunchNormFor<uint16_t, Tail, kQdq>(p, p.weight_bf16, tail, stream);
  return LaunchNormFor<float, Tail, kQdq>(p, p.weight_f32, tail, stream);
}

}  // namespace

absl::Status LaunchRmsNorm(const RmsNormParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateRmsNorm(p));
  if (p.rows == 0) return absl::OkStatus();
  if (p.out_qdq == nullptr) {
    LaunchNormWeights(p, NoRope{}, stream);
    return absl::OkStatus();
  }
  // The QDQ'd output in the norm's own pass where a raw path runs; else the QDQ pass on `out`
  // after it (the same bits: the same functions on the same bf16 values).
  if (LaunchNormWeights<NoRope, true>(p, NoRope{}, stream)) return absl::OkStatus();
  LaunchNormWeights(p, NoRope{}, stream);
  return quant::LaunchQdq({quant::BlockFormat::kFp8E4m3Ue8m0B32, p.rows, p.cols, p.out,
                           p.out_stride, p.out_qdq, p.out_qdq_stride},
                          stream);
}

absl::Status LaunchRmsNormRope(const RmsNormRopeParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateRmsNormRope(p));
  if (p.norm.rows == 0) return absl::OkStatus();
  LaunchNormWeights(p.norm, MakeRopeArgs(*p.table, p.positions, p.inverse), stream);
  return absl::OkStatus();
}

absl::Status LaunchRopeCosSin(const RopeCosSinParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateRopeCosSin(p, /*host_values=*/false));
  if (p.tokens == 0) return absl::OkStatus();
  const RopeArgs args = MakeRopeArgs(*p.table, p.positions, /*inverse=*/false);
  norm_rope_device::RopeCosSinKernel<<<BlocksFor(p.tokens * args.pairs, 256), 256, 0, stream>>>(
      args, p.tokens, p.out);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchRope(const RopeParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateRopeLayout(p));
  if (p.tokens == 0) return absl::OkStatus();
  if (p.heads * p.head_dim >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Rope: heads * head_dim = %d must be < 2^31 on the GPU", p.heads * p.head_dim));
  }
  const RopeArgs args = MakeRopeArgs(*p.table, p.positions, p.inverse);
  const int64_t nope = p.head_dim - p.table->rope_dims();
  const bool vec = nope % 2 == 0 && Aligned(p.x, 2 * p.x_stride, 4) &&
                   Aligned(p.out, 2 * p.out_stride, 4) && p.x_head_stride % 2 == 0 &&
                   p.out_head_stride % 2 == 0;
  const int64_t pairs = p.table->rope_dims() / 2;
  const bool vec16 = pairs % 4 == 0 && nope % 8 == 0 && Aligned(p.x, 2 * p.x_stride, 16) &&
                     Aligned(p.out, 2 * p.out_stride, 16) && p.x_head_stride % 8 == 0 &&
                     p.out_head_stride % 8 == 0;
  if (vec16) {
    const int64_t units = p.heads * (pairs / 4 + (p.out != p.x ? nope / 8 : 0));
    if (units >= kRopeWideUnits) {  // 4 units per thread (q: a block per token in place)
      const int64_t per_token = (units + kRopeWideUnits - 1) / kRopeWideUnits;
      norm_rope_device::RopeVec16Kernel<kRopeWideUnits / kRopeThreads>
          <<<BlocksFor(p.tokens * per_token, 1), kRopeThreads, 0, stream>>>(p, args);
    } else {
      const int64_t per_token = (units + kRopeThreads - 1) / kRopeThreads;
      norm_rope_device::RopeVec16Kernel<1>
          <<<BlocksFor(p.tokens * per_token, 1), kRopeThreads, 0, stream>>>(p, args);
    }
    CUDA_CHECK(cudaGetLastError());
    return absl::OkStatus();
  }
  const unsigned blocks = BlocksFor(p.tokens, 1);
  if (vec) {
    norm_rope_device::RopeKernel<true><<<blocks, kRopeThreads, 0, stream>>>(p, args);
  } else {
    norm_rope_device::RopeKernel<false><<<blocks, kRopeThreads, 0, stream>>>(p, args);
  }
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace flashserve::kernels
