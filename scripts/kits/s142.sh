#!/usr/bin/env bash
# Kit s142 (built by scripts/gpu_kit.sh s142; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s142_run.sh t g s f
# Session 82, after kit s140: the FP8 swapped-role kernel streaming x with
# 128-row tiles (one warpgroup) from 65 rows, the automatic plan taking it up to 64 rows, and a
# third consumer warpgroup as an opt-in form (swap_fp8_warpgroups 3).
#   t  kernels_gemm_gpu_test: FloatLinearFp8GpuTest.*
#   g  bench_gemm_float_gpu --shapes wo_a_fp8 at 1 .. 256 rows: auto, swap, swap-fp8 (1
#      warpgroup), -w2, -w3
#   s  the step at 16, 32, 64, 128 tokens: the defaults against --wo-a-fp8 0 (the bf16 weight)
#      and 6 (the FP8 kernel at every size)
#   f  the step at 2, 4, 8, 16, 32 tokens: --wo-a-swap-wgs 3 against the default 2
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s142; mkdir -p $K; for t in "$(dirname "$0")"/s142.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    t)
      timeout 200 $K/kernels_gemm_gpu_test --gtest_filter='FloatLinearFp8GpuTest.*' > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected|output|float64|differ" $OUT/gemm_test.log | head -40 ;;
    g)
      timeout 150 $K/bench_gemm_float_gpu --iters 20 --warmup 3 --shapes wo_a_fp8 \
        --m 1,2,4,8,16,32,64,96,128,256 --kernels auto,swap,swap-fp8,swap-fp8-w2,swap-fp8-w3 > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "^(wo_a|device|shape)" $OUT/gemm_bench.log | head -60 ;;
    s)
      for f in 1 0 6; do
        echo "[--wo-a-fp8 $f]"; eval timeout 120 $B --tokens 16,32,64,128 --wo-a-fp8 $f 2>&1 | show
      done ;;
    f)
      for w in 2 3; do
        echo "[--wo-a-swap-wgs $w]"; eval timeout 120 $B --tokens 2,4,8,16,32 --wo-a-swap-wgs $w 2>&1 | show
      done ;;
  esac
done
