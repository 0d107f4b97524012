// MakeTmaOperand (cuda/tma_map.h).
#include "kernels/gemm/cuda/tma_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

namespace flashserve::kernels::wgmma_ws {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 EncodeTiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // not sticky; the caller falls back
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

constexpr uint64_t kMaxDim = uint64_t{1} << 32;
constexpr uint64_t kMaxStride = uint64_t{1} << 40;

}  // namespace

bool MakeTmaOperand(TmaOperand* op, const void* base, int elem_bytes, int64_t k, int64_t rows,
                    int64_t row_stride, int64_t groups, int64_t group_stride, uint32_t box_k,
                    uint32_t box_rows, bool swizzle128) {
  if (base == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  if (k <= 0 || rows <= 0 || groups <= 0 || row_stride < k) return false;
  const uint64_t eb = static_cast<uint64_t>(elem_bytes);
  const uint64_t rs = static_cast<uint64_t>(row_stride) * eb;
  const uint64_t gs = static_cast<uint64_t>(group_stride) * eb;
  if (rs % 16 != 0 || gs % 16 != 0 || rs >= kMaxStride || gs >= kMaxStride) return false;
  if (static_cast<uint64_t>(k) >= kMaxDim || static_cast<uint64_t>(rows) >= kMaxDim) return false;

  cuuint64_t dims[3];
  cuuint64_t strides[2];
  cuuint32_t box[3];
  dims[0] = static_cast<cuuint64_t>(k);
  box[0] = box_k;
  op->group_mul = 1;
  if (groups == 1 || group_stride == 0) {
    // One operand for every group: (K, 1, rows), coordinate 0 in the middle.
    op->group_mul = 0;
    op->group_inner = 1;
    dims[1] = 1;
    dims[2] = static_cast<cuuint64_t>(rows);
    strides[0] = rs;
    strides[1] = rs;
  } else if (gs >= rs * static_cast<uint64_t>(rows)) {  // [G][rows][K]
    op->group_inner = 0;
    dims[1] = static_cast<cuuint64_t>(rows);
    dims[2] = static_cast<cuuint64_t>(groups);
    strides[0] = rs;
    strides[1] = gs;
  } else if (gs >= static_cast<uint64_t>(k) * eb && rs >= gs * static_cast<uint64_t>(groups)) {
    op->group_inner = 1;  // [rows][G][K] (groups interleaved inside a row)
    dims[1] = static_cast<cuuint64_t>(groups);
    dims[2] = static_cast<cuuint64_t>(rows);
    strides[0] = gs;
    strides[1] = rs;
  } else {
    return false;
  }
  if (op->group_inner) {
    box[1] = 1;
    box[2] = box_rows;
  } else {
    box[1] = box_rows;
    box[2] = 1;
  }
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeTiled();
  if (encode == nullptr) return false;
  const CUresult r = encode(
      &op->map, elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 3,
      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

bool MakeTmaRows(CUtensorMap* map, const void* base, int64_t k_bytes, int64_t rows, uint32_t box_k,
                 uint32_t box_rows, CUtensorMapSwizzle swizzle) {
  if (base == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  if (k_bytes <= 0 || k_bytes % 16 != 0 || rows <= 0) return false;
  if (static_cast<uint64_t>(k_bytes) >= kMaxStride || static_cast<uint64_t>(rows) >= kMaxDim) {
    return false;
  }
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k_bytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k_bytes)};
  const cuuint32_t box[2] = {box_k, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeTiled();
  if (encode == nullptr) return false;
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box,
                elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace flashserve::kernels::wgmma_ws
