// Bench-only: the dense bf16 mma.sync rate of the current device (bench_sparse_attn's fallback
// for the tensor-core roof when cuBLAS cannot be loaded).
#pragma once

namespace flashserve::kernels::attn_bench {

// Runs a register-only kernel that issues independent mma.sync.m16n8k16 bf16→fp32 on every SM
// (8 warps per CTA, 4 CTAs per SM, 8 accumulator chains per warp) and returns the best of
// `repeats` timed launches in TFLOP/s (2·16·8·16 FLOPs per mma). Aborts on CUDA errors.
double MeasureMmaSyncTflops(int repeats);

}  // namespace flashserve::kernels::attn_bench
