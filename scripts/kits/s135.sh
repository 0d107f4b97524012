#!/usr/bin/env bash
# Kit s135 (built by scripts/gpu_kit.sh s135; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s135_run.sh t g s
# Session 80: wo_a from its FP8 form (FloatLinearCudaParams::w_fp8, the CUDA-core kernel streams
# E4M3 codes + 32 × 32 UE8M0 scales: 33.5 MB instead of 67; the same bits as on the bf16 weight).
#   t  kernels_gemm_gpu_test: FloatLinearFp8GpuTest.* (new) and the CUDA-core / swap cases
#   g  bench_gemm_float_gpu --shapes wo_a,wo_a_fp8 at M = 1..4: swap, gemv on bf16, gemv on FP8
#   q  the step at 1 / 2 / 4 / 8 tokens: --wo-a-fp8 0 / 1 / 0 / 1 / 2 / 3 (a short call)
#   s  the step at 1 / 2 / 4 / 8 tokens: --wo-a-fp8 0 / 1 / 2 / 3, alternated twice; then the trace
#      of 1 token with --wo-a-fp8 1
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s135; mkdir -p $K; for t in "$(dirname "$0")"/s135.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    t)
      timeout 300 $K/kernels_gemm_gpu_test \
        --gtest_filter='FloatLinearFp8GpuTest.*:FloatLinearGpuTest.ReleasedShapes:FloatLinearGpuTest.ReleasedShapesDecodeBatchSwap:FloatLinearPdlTest.*' \
        > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|output|float64" $OUT/gemm_test.log | head -30 ;;
    g)
      timeout 120 $K/bench_gemm_float_gpu --iters 20 --warmup 3 --shapes wo_a,wo_a_fp8 --m 1,2,3,4 \
        --kernels auto,swap,gemv > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "^(wo_a|device|copy|shape)" $OUT/gemm_bench.log | head -30 ;;
    q)  # the lean order for a short device call: 0 / 1 twice, then 2 and 3 once
      for f in 0 1 0 1 2 3; do
        echo "wo-a-fp8 $f"; eval timeout 100 $B --tokens 1,2,4,8 --wo-a-fp8 $f 2>&1 | show
      done ;;
    s)
      for round in 1 2; do
        for f in 0 1 2 3; do
          echo "wo-a-fp8 $f round $round"; eval timeout 150 $B --tokens 1,2,4,8 --wo-a-fp8 $f 2>&1 | show
        done
      done
      eval timeout 120 $B --tokens 1 --trace 1 --wo-a-fp8 1 > $OUT/trace_s135.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_s135.log ;;
  esac
done
