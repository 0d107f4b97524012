// CUDA launchers of the block quantisers: validate (quant_params.cc, shared with the CPU body),
// size the grid, pick the instantiation for the format and the operands' alignment, launch.
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/quant/cuda/quant_kernels.cuh"
#include "kernels/quant/quant.h"

namespace flashserve::kernels::quant {
namespace {

using device::CodeAccess;
using device::Fmt;
using device::kThreads;
using device::kUnit;

struct Grid {
  uint32_t units_per_row = 0;
  uint32_t total = 0;
  unsigned blocks = 0;
};

// A persistent grid: as many blocks as can be resident at once (never more than the work needs),
// for kU units per lane and warp step (the kernel's own). The per-kernel occupancy is computed
// once; the SM count is read per launch (cheap, and correct whichever device is current).
template <auto kKernel, int kU>
absl::Status PlanGrid(const char* op, int64_t rows, int64_t cols, Grid* g) {
  const int64_t units_per_row = cols / kUnit;
  if (rows > (int64_t{1} << 31) / units_per_row - 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: [%d, %d] has too many values for one launch (rows * cols / 8 must be < 2^31)", op,
        rows, cols));
  }
  static const int per_sm = [] {
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, kThreads, 0));
    return n > 0 ? n : 1;
  }();
  int dev = 0;
  int sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  g->units_per_row = static_cast<uint32_t>(units_per_row);
  g->total = static_cast<uint32_t>(rows * units_per_row);
  const int64_t per_block = int64_t{kThreads} * kU;
  const int64_t needed = (int64_t{g->total} + per_block - 1) / per_block;
  const int64_t resident = int64_t{per_sm} * sms;
  g->blocks = static_cast<unsigned>(needed < resident ? needed : resident);
  return absl::OkStatus();
}

bool Aligned(const void* p, int64_t stride_bytes, int64_t n) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(n) == 0 && stride_bytes % n == 0;
}

// The widest access every code row allows: whole units, 4-byte words or bytes.
CodeAccess CodeAccessFor(const void* codes, int64_t stride, int64_t unit_bytes) {
  if (Aligned(codes, stride, unit_bytes)) return CodeAccess::kUnit;
  if (Aligned(codes, stride, 4)) return CodeAccess::kWord;
  return CodeAccess::kByte;
}

template <auto kKernel, int kU = device::kUnitsPerLane, typename Params>
absl::Status Launch(const char* op, const Params& p, cudaStream_t stream) {
  Grid g;
  RETURN_IF_ERROR((PlanGrid<kKernel, kU>(op, p.rows, p.cols, &g)));
  kKernel<<<g.blocks, kThreads, 0, stream>>>(p, g.units_per_row, g.total);
  CUDA_CHECK(cudaGetLastError());
  return absl::OkStatus();
}

template <BlockFormat F, bool kVec>
absl::Status QuantizeWith(const QuantizeParams& p, CodeAccess access, cudaStream_t s) {
  constexpr int kU = device::kQuantizeUnits<F>;
  switch (access) {
    case CodeAccess::kUnit:
      return Launch<device::QuantizeKernel<F, kVec, CodeAccess::kUnit>, kU>("Quantize", p, s);
    case CodeAccess::kWord:
      return Launch<device::QuantizeKernel<F, kVec, CodeAccess::kWord>, kU>("Quantize", p, s);
    case CodeAccess::kByte:
      return Launch<device::QuantizeKernel<F, kVec, CodeAccess::kByte>, kU>("Quantize", p, s);
  }
  return absl::InternalError("Quantize: bad code access");
}

template <BlockFormat F>
absl::Status QuantizeFor(const QuantizeParams& p, cudaStream_t s) {
  const CodeAccess access = CodeAccessFor(p.codes, p.codes_stride, 4 * Fmt<F>::kCodeWords);
  // kVec covers the bf16 mirror's stores too.
  const bool vec = Aligned(p.x, 2 * p.x_stride, 16) &&
                   (p.qdq_out == nullptr || Aligned(p.qdq_out, 2 * p.qdq_stride, 16));
  return vec ? QuantizeWith<F, true>(p, access, s) : QuantizeWith<F, false>(p, access, s);
}

template <BlockFormat F, bool kVec>
absl::Status DequantizeWith(const DequantizeParams& p, CodeAccess access, cudaStream_t s) {
  switch (access) {
    case CodeAccess::kUnit:
      return Launch<device::DequantizeKernel<F, kVec, CodeAccess::kUnit>>("Dequantize", p, s);
    case CodeAccess::kWord:
      return Launch<device::DequantizeKernel<F, kVec, CodeAccess::kWord>>("Dequantize", p, s);
    case CodeAccess::kByte:
      return Launch<device::DequantizeKernel<F, kVec, CodeAccess::kByte>>("Dequantize", p, s);
  }
  return absl::InternalError("Dequantize: bad code access");
}

template <BlockFormat F>
absl::Status DequantizeFor(const DequantizeParams& p, cudaStream_t s) {
  const CodeAccess access = CodeAccessFor(p.codes, p.codes_stride, 4 * Fmt<F>::kCodeWords);
  return Aligned(p.out, 2 * p.out_stride, 16) ? DequantizeWith<F, true>(p, access, s)
                                              : DequantizeWith<F, false>(p, access, s);
}

template <BlockFormat F>
absl::Status QdqFor(const QdqParams& p, cudaStream_t s) {
  const bool vec = Aligned(p.x, 2 * p.x_stride, 16) && Aligned(p.out, 2 * p.out_stride, 16);
  return vec ? Launch<device::QdqKernel<F, true>>("Qdq", p, s)
             : Launch<device::QdqKernel<F, false>>("Qdq", p, s);
}

}  // namespace

absl::Status LaunchQuantize(const QuantizeParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.rows == 0 || p.cols == 0) return absl::OkStatus();
  switch (p.format) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return QuantizeFor<BlockFormat::kFp8E4m3Ue8m0B32>(p, stream);
    case BlockFormat::kFp4E2m1E4m3B16:
      return QuantizeFor<BlockFormat::kFp4E2m1E4m3B16>(p, stream);
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return QuantizeFor<BlockFormat::kFp4E2m1Ue8m0B32>(p, stream);
  }
  return absl::InvalidArgumentError("Quantize: invalid format");  // unreachable after Validate
}

absl::Status LaunchDequantize(const DequantizeParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.rows == 0 || p.cols == 0) return absl::OkStatus();
  switch (p.format) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return DequantizeFor<BlockFormat::kFp8E4m3Ue8m0B32>(p, stream);
    case BlockFormat::kFp4E2m1E4m3B16:
      return DequantizeFor<BlockFormat::kFp4E2m1E4m3B16>(p, stream);
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return DequantizeFor<BlockFormat::kFp4E2m1Ue8m0B32>(p, stream);
  }
  return absl::InvalidArgumentError("Dequantize: invalid format");
}

absl::Status LaunchQdq(const QdqParams& p, CUstream_st* stream) {
  RETURN_IF_ERROR(Validate(p));
  if (p.rows == 0 || p.cols == 0) return absl::OkStatus();
  switch (p.format) {
    case BlockFormat::kFp8E4m3Ue8m0B32:
      return QdqFor<BlockFormat::kFp8E4m3Ue8m0B32>(p, stream);
    case BlockFormat::kFp4E2m1E4m3B16:
      return QdqFor<BlockFormat::kFp4E2m1E4m3B16>(p, stream);
    case BlockFormat::kFp4E2m1Ue8m0B32:
      return QdqFor<BlockFormat::kFp4E2m1Ue8m0B32>(p, stream);
  }
  return absl::InvalidArgumentError("Qdq: invalid format");
}

absl::Status LaunchEncodeRows(const EncodeRowsParams& p, CUstream_st* stream) {
  QuantizeParams q;
  RETURN_IF_ERROR(ToQuantizeParams(p, &q));
  return LaunchQuantize(q, stream);
}

absl::Status LaunchDecodeRows(const DecodeRowsParams& p, CUstream_st* stream) {
  DequantizeParams d;
  RETURN_IF_ERROR(ToDequantizeParams(p, &d));
  return LaunchDequantize(d, stream);
}

}  // namespace flashserve::kernels::quant
