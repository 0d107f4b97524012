#!/usr/bin/env bash
# Kit s150 (built by scripts/gpu_kit.sh s150; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s150_run.sh t g
# Session 85: the FP8 form's streamed kernel with x padded to whole row tiles (the permute pass
# writes zeros past M; fp8_weight_form.md "Ragged row tiles") against the unpadded map. Run twice
# in session 85: as first built (every row tile padded), then with the landed rule (the 128-row
# tiles only).
#   t  kernels_gemm_gpu_test: FloatLinearFp8GpuTest.* and FloatLinearFp8OnlyGpuTest.* (bits
#      against the bf16 kernel at ragged M)
#   g  bench_gemm_float_gpu (padded) and bench_gemm_float_gpu_nopad alternated twice: wo_a's FP8
#      form alone at 128-384 rows, and with both forms at 9-64 rows (the streamed kernel's
#      16 / 32 / 64-row tiles)
# kit-target: kernels_gemm_gpu_test bench_gemm_float_gpu
# kit-variant: bench_gemm_float_gpu nopad kernels/gemm/cuda/float_linear_launch.cu -DFS_FP8_STREAM_PAD=0
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s150; mkdir -p $K; tar xJf "$(dirname "$0")"/s150.tar.xz -C $K
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 240 $K/kernels_gemm_gpu_test \
        --gtest_filter='FloatLinearFp8OnlyGpuTest.*:FloatLinearFp8GpuTest.*' > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected" $OUT/gemm_test.log | head -40 ;;
    g)
      for r in 1 2; do
        for b in bench_gemm_float_gpu bench_gemm_float_gpu_nopad; do
          echo "[$b]"
          timeout 100 $K/$b --iters 30 --warmup 5 --shapes wo_a_fp8only \
            --m 128,160,192,224,256,288,320,384 --kernels auto 2>&1 | grep -E "^wo_a" | head -10
          timeout 100 $K/$b --iters 30 --warmup 5 --shapes wo_a_fp8 \
            --m 9,12,16,24,32,40,48,64 --kernels auto 2>&1 | grep -E "^wo_a" | head -10
        done
      done ;;
  esac
done
