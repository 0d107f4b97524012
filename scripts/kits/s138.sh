#!/usr/bin/env bash
# Kit s138 (built by scripts/gpu_kit.sh s138; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s138_run.sh t g s f
# Session 81, built after the device budget ended:
#   t  kernels_gemm_gpu_test: FloatLinearFp8GpuTest.* — the FP8 swapped-role kernel's forms
#      (swap_fp8_warpgroups 2, swap_fp8_chains 4: exact sums, float64 bound) and the automatic
#      plan from 2 to 8 rows (bit-equal to the forced kernel)
#   g  bench_gemm_float_gpu --shapes wo_a_fp8 --m 1,2,4,8: auto, swap, swap-fp8 and its forms
#      -c4 / -w2 / -w2c4
#   s  the step at 1,2,4,8 tokens: the defaults (the FP8 swapped-role kernel from 2 tokens by the
#      plan now) against --wo-a-fp8 0, alternated twice
#   f  the step at 2,4,8 tokens with the kernel's forms (wgs 1|2 × chains 1|4), once each
# (The RS kernel's decode A/B is kit s139: bench_gemm_gpu with the three- and four-instruction
# E4m3PairScaled.)
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s138; mkdir -p $K; for t in "$(dirname "$0")"/s138.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    t)
      timeout 200 $K/kernels_gemm_gpu_test --gtest_filter='FloatLinearFp8GpuTest.*' \
        > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected|output|float64|differ" $OUT/gemm_test.log | head -40 ;;
    g)
      timeout 150 $K/bench_gemm_float_gpu --iters 20 --warmup 3 --shapes wo_a_fp8 --m 1,2,4,8 \
        --kernels auto,swap,swap-fp8,swap-fp8-c4,swap-fp8-w2,swap-fp8-w2c4 > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "^(wo_a|device|shape)" $OUT/gemm_bench.log | head -40 ;;
    s)
      for round in 1 2; do
        for f in 1 0; do
          echo "[--wo-a-fp8 $f] round $round"; eval timeout 100 $B --tokens 1,2,4,8 --wo-a-fp8 $f 2>&1 | show
        done
      done ;;
    f)
      for w in 1 2; do for c in 1 4; do
        echo "[wgs $w chains $c]"; eval timeout 100 $B --tokens 2,4,8 --wo-a-swap-wgs $w --wo-a-swap-chains $c 2>&1 | show
      done; done ;;
  esac
done
