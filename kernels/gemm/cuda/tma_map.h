// Host-side TMA tensor maps for the warp-specialised wgmma kernel (cuda/wgmma_ws_gemm.cuh).
// cuTensorMapEncodeTiled comes from the driver at run time (cudaGetDriverEntryPointByVersion):
// the build links the static runtime and never libcuda. Host code; usable from .cc and .cu files.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace flashserve::kernels::wgmma_ws {

// One TMA operand of a (K, rows, groups) tensor: a 3-D tensor map whose two outer dimensions
// are ordered by stride (the driver wants the strides ascending); `group_inner` = 1 when groups
// is dimension 1 (e.g. wo_a's groups interleaved along a row), `group_mul` = 0 when every group
// shares the operand (its coordinate is then always 0).
struct TmaOperand {
  CUtensorMap map;
  int group_inner = 0;
  int group_mul = 1;
};

// Describes element (g, r, kk) at base + g·group_stride + r·row_stride + kk (elements of
// `elem_bytes` 1 or 2) for g < groups, r < rows, kk < k, read in boxes of `box_k` × `box_rows`
// (box_k · elem_bytes <= 128 with `swizzle128`), zero-filled outside. Returns false, leaving
// *op unusable, when TMA cannot describe it (base or strides not 16-byte multiples, groups
// overlapping rows in a way no stride order fits, a dimension too large) or the driver refuses;
// the caller then takes another kernel. Thread-safe; cost: one driver call (host only, no GPU
// work).
bool MakeTmaOperand(TmaOperand* op, const void* base, int elem_bytes, int64_t k, int64_t rows,
                    int64_t row_stride, int64_t groups, int64_t group_stride, uint32_t box_k,
                    uint32_t box_rows, bool swizzle128);

// A 2-D tensor map of bytes: row r < rows at base + r·k_bytes, read in boxes of box_k bytes ×
// box_rows rows laid out in shared memory with `swizzle` (e.g. CU_TENSOR_MAP_SWIZZLE_64B: 16-byte
// chunk c of box row i lands at chunk c ^ ((i >> 1) & 3) of a 64-byte row, from a 512-byte
// aligned destination), zero-filled past the last row. Returns false where TMA cannot describe
// it (base or k_bytes not 16-byte multiples, a dimension too large) or the driver refuses.
// Thread-safe; one driver call (host only, no GPU work).
bool MakeTmaRows(CUtensorMap* map, const void* base, int64_t k_bytes, int64_t rows, uint32_t box_k,
                 uint32_t box_rows, CUtensorMapSwizzle swizzle);

}  // namespace flashserve::kernels::wgmma_ws
