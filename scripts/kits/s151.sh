#!/usr/bin/env bash
# Kit s151 (built by scripts/gpu_kit.sh s151; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s151_run.sh t g
# Session 85 (built, not run: the session's device time was spent): the FP8 stream kernel with
# 256-row x tiles above 128 rows (FS_FP8_STREAM_BM256=1: the codes decoded once per 256 rows, not
# once per 128; fp8_weight_form.md "Ragged row tiles") against the landed 128-row tiles.
#   t  kernels_gemm_gpu_test_bm256: FloatLinearFp8GpuTest.* and FloatLinearFp8OnlyGpuTest.* (bits
#      against the bf16 kernel; 140, 200 and 300 rows take 256-row tiles in this build)
#   g  bench_gemm_float_gpu and bench_gemm_float_gpu_bm256 alternated twice: wo_a's FP8 form alone
#      at 128-512 rows (decides whether the FP8-only plan should take 256-row tiles, and whether
#      kFloatLinearCudaSwapFp8OnlyMaxM, 384, moves)
# kit-target: kernels_gemm_gpu_test bench_gemm_float_gpu
# kit-variant: kernels_gemm_gpu_test bm256 kernels/gemm/cuda/float_linear_launch.cu -DFS_FP8_STREAM_BM256=1
# kit-variant: bench_gemm_float_gpu bm256 kernels/gemm/cuda/float_linear_launch.cu -DFS_FP8_STREAM_BM256=1
# kit-drop: kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s151; mkdir -p $K; tar xJf "$(dirname "$0")"/s151.tar.xz -C $K
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 240 $K/kernels_gemm_gpu_test_bm256 \
        --gtest_filter='FloatLinearFp8OnlyGpuTest.*:FloatLinearFp8GpuTest.*' > $OUT/gemm_test.log 2>&1
      echo "gemm tests (256-row tiles) rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected" $OUT/gemm_test.log | head -40 ;;
    g)
      for r in 1 2; do
        for b in bench_gemm_float_gpu bench_gemm_float_gpu_bm256; do
          echo "[$b]"
          timeout 100 $K/$b --iters 30 --warmup 5 --shapes wo_a_fp8only \
            --m 128,160,192,256,288,320,384,448,512 --kernels auto,swap-fp8 2>&1 | grep -E "^wo_a" | head -20
        done
      done ;;
  esac
done
