// Bench-only: the dense bf16 mma.sync rate of the current device (bench_sparse_attn's fallback
// for the tensor-core roof when cuBLAS cannot be loaded).
#pragma once

#include <string>

namespace flashserve::kernels::attn_bench {

// Runs a register-only kernel that issues independent mma.sync.m16n8k16 bf16→fp32 on every SM
// (8 warps per CTA, 4 CTAs per SM, 8 accumulator chains per warp) and returns the best of
// `repeats` timed launches in TFLOP/s (2·16·8·16 FLOPs per mma). Aborts on CUDA errors.
double MeasureMmaSyncTflops(int repeats);

// The compute roof's rate of every bench_*: the dense bf16 tensor rate measured in the run, the
// larger of cuBLAS's bf16 GEMM (MeasureCublasBf16Tflops; 0 when no libcublas loads) and the
// mma.sync peak above (the issue defines the roof by cuBLAS's rate; session 51 moved the benches
// that took the mma.sync peak alone, ~28 % lower, onto this).
struct TensorRates {
  double mma = 0;     // the mma.sync peak (MeasureMmaSyncTflops(5) / MeasureMmaSyncInt8Tops(5))
  double cublas = 0;  // cuBLAS's GEMM (MeasureCublasBf16Tflops / MeasureCublasInt8Tops)
  double dense = 0;   // max(mma, cublas)
  std::string cublas_source;
};
using Bf16TensorRates = TensorRates;
Bf16TensorRates MeasureBf16TensorRates();

// The same for kernels that compute in int8 (the indexer's scorer): mma.sync.m16n8k32 s8 → s32
// peak (2·16·8·32 operations per mma, the bf16 kernel's shape otherwise) and cuBLAS's int8 GEMM
// (MeasureCublasInt8Tops), TOP/s; dense = the larger.
double MeasureMmaSyncInt8Tops(int repeats);
using Int8TensorRates = TensorRates;
Int8TensorRates MeasureInt8TensorRates();

}  // namespace flashserve::kernels::attn_bench
