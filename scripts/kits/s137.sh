#!/usr/bin/env bash
# Kit s137 (built by scripts/gpu_kit.sh s137; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s137_run.sh t g s w
# Session 81: wo_a's FP8 form on a swapped-role kernel (cuda/float_linear_swap_fp8.cuh, tile_rows
# 8: 64 weight rows per CTA, codes decoded to bf16 in registers as the wgmma A operand, x resident
# as B), with session 80's unmeasured CUDA-core kernel in its wide geometry.
#   t  kernels_gemm_gpu_test: FloatLinearFp8GpuTest.* (the swapped-role FP8 kernel against
#      float64 at wo_a's shape M 1..8 and small shapes; the CUDA-core FP8 form bit-equal to bf16,
#      both geometries), the released shapes, the PDL tests; and the FP8 Linear's exact-decode
#      tests (E4m3PairScaled now three instructions per code pair: every kernel decoding E4M3)
#   g  bench_gemm_float_gpu --shapes wo_a_fp8,wo_a --m 1,2,4,8: swap, gemv, gemv-wide, swap-fp8
#   s  the step at 1,2,4,8 tokens: --wo-a-fp8 1 (default) / 4 / 5, alternated twice
#   w  the step at 1,2 tokens: the defaults / --wo-a-wide 1 / --wob-tma 0, and the 1-token trace
#      with --wo-a-fp8 4
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s137; mkdir -p $K; for t in "$(dirname "$0")"/s137.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    t)
      timeout 300 $K/kernels_gemm_gpu_test \
        --gtest_filter='FloatLinearFp8GpuTest.*:FloatLinearGpuTest.ReleasedShapes*:FloatLinearGpuTest.OneHot*:FloatLinearPdlTest.*:GemmGpuTest.ExactArithmetic*:GemmGpuTest.NanScale*:GemmGpuTest.IdentityWeight*:GemmGpuTest.ReleasedShapesDecodeBatchRs:GemmGpuWsTest.WarpSpecialisedDecodesEveryCodeAndScale' \
        > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|output|float64|differ" $OUT/gemm_test.log | head -60 ;;
    g)
      timeout 150 $K/bench_gemm_float_gpu --iters 20 --warmup 3 --shapes wo_a_fp8,wo_a --m 1,2,4,8 \
        --kernels auto,swap,gemv,gemv-wide,swap-fp8 > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "^(wo_a|device|shape)" $OUT/gemm_bench.log | head -40 ;;
    s)
      for round in 1 2; do
        for f in 1 4 5; do
          echo "[--wo-a-fp8 $f] round $round"; eval timeout 100 $B --tokens 1,2,4,8 --wo-a-fp8 $f 2>&1 | show
        done
      done ;;
    w)
      for f in "" "--wo-a-wide 1" "--wob-tma 0"; do
        echo "[$f]"; eval timeout 100 $B --tokens 1,2 $f 2>&1 | show
      done
      eval timeout 120 $B --tokens 2 --trace 1 --wo-a-fp8 4 > $OUT/trace_s137.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ|Gemv|Swap|Tma|span" $OUT/trace_s137.log | head -30 ;;
  esac
done
