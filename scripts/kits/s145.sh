#!/usr/bin/env bash
# Kit s145 (built by scripts/gpu_kit.sh s145; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s145_run.sh t g
# Session 84 (no device lent): a bf16 Linear's weight in its FP8 form alone (FloatLinearCudaParams
# "FP8 only": no w_bf16; the FP8 kernels up to 256 rows, the bf16 plans on an expansion of the
# codes in the workspace).
#   t  kernels_gemm_gpu_test: FloatLinearFp8OnlyGpuTest.* (each plan's bits on the expansion equal
#      the same plan's on the bf16 weight; the expansion equals the weight), then
#      FloatLinearFp8GpuTest.* (unchanged kernels, the launcher changed around them)
#   g  bench_gemm_float_gpu, wo_a with both forms against the FP8 form alone at 64 .. 4,096 rows:
#      auto, swap (bf16 swapped-role; FP8 only: after the expansion), swap-fp8 (the FP8 kernel at
#      every size) — decides kFloatLinearCudaSwapFp8OnlyMaxM (256, estimated)
# kit-target: kernels_gemm_gpu_test bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s145; mkdir -p $K; for t in "$(dirname "$0")"/s145.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 240 $K/kernels_gemm_gpu_test \
        --gtest_filter='FloatLinearFp8OnlyGpuTest.*:FloatLinearFp8GpuTest.*' > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected|output|float64|differ|expansion" \
        $OUT/gemm_test.log | head -50 ;;
    g)
      timeout 200 $K/bench_gemm_float_gpu --iters 20 --warmup 3 --shapes wo_a_fp8,wo_a_fp8only \
        --m 64,128,192,256,320,384,512,1024,4096 --kernels auto,swap,swap-fp8 > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "^(wo_a|device|shape|command)" $OUT/gemm_bench.log | head -80 ;;
  esac
done
