#!/usr/bin/env bash
# Kit s140 (built by scripts/gpu_kit.sh s140; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s140_run.sh t g s f
# Session 82:
#   t  kernels_gemm_gpu_test: FloatLinearFp8GpuTest.* (the FP8 swapped-role kernel with x
#      streamed above 8 rows: float64 bound, exact sums, the bf16 swapped-role kernel's bits in
#      one warpgroup) and GemmGpuTest.* / GemmGpuWsTest.* (the RS kernel's decode through the
#      shared ScaleMulOfByte)
#   g  bench_gemm_float_gpu --shapes wo_a_fp8 at 9 .. 256 rows: the automatic plan (bf16
#      swapped-role kernel), swap, swap-fp8 (one warpgroup) and swap-fp8-w2, twice
#   s  the step at 16, 32, 64, 128 tokens: --wo-a-fp8 1 (the plan) against 6 (the FP8 kernel
#      streaming x), alternated twice
#   f  the step at 1, 2, 4, 8 tokens: the new defaults (wide CUDA-core wo_a at 1 token, 2
#      warpgroups from 2) against --wo-a-wide 0 --wo-a-swap-wgs 1, alternated twice
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s140; mkdir -p $K; for t in "$(dirname "$0")"/s140.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    t)
      timeout 280 $K/kernels_gemm_gpu_test \
        --gtest_filter='FloatLinearFp8GpuTest.*:GemmGpuTest.*:GemmGpuWsTest.*' > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected|output|float64|differ" $OUT/gemm_test.log | head -60 ;;
    g)
      for round in 1 2; do
        timeout 150 $K/bench_gemm_float_gpu --iters 20 --warmup 3 --shapes wo_a_fp8 \
          --m 9,16,24,32,48,64,96,128,192,256 --kernels auto,swap,swap-fp8,swap-fp8-w2 > $OUT/gemm_bench_$round.log 2>&1
        echo "gemm bench rc $?"; grep -E "^(wo_a|device|shape)" $OUT/gemm_bench_$round.log | head -50
      done ;;
    s)
      for round in 1 2; do
        for f in 1 6; do
          echo "[--wo-a-fp8 $f] round $round"; eval timeout 120 $B --tokens 16,32,64,128 --wo-a-fp8 $f 2>&1 | show
        done
      done ;;
    f)
      for round in 1 2; do
        echo "[defaults] round $round"; eval timeout 100 $B --tokens 1,2,4,8 2>&1 | show
        echo "[--wo-a-wide 0 --wo-a-swap-wgs 1] round $round"
        eval timeout 100 $B --tokens 1,2,4,8 --wo-a-wide 0 --wo-a-swap-wgs 1 2>&1 | show
      done ;;
  esac
done
