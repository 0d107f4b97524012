#!/usr/bin/env bash
# Kit s146 (built by scripts/gpu_kit.sh s146; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s146_run.sh t g m
# Kits s144 and s145 in one call (one device start fewer; 28 MiB):
#   t  kernels_gemm_gpu_test: FloatLinearFp8OnlyGpuTest.* (session 84, the FP8-only weight: each
#      plan's bits on the expansion equal the same plan's on the bf16 weight, the expansion equals
#      the weight), then FloatLinearFp8GpuTest.*
#   g  bench_gemm_float_gpu, wo_a with both forms against the FP8 form alone at 64 .. 4,096 rows:
#      auto, swap, swap-fp8 — decides kFloatLinearCudaSwapFp8OnlyMaxM (256, estimated)
#   m  kernels_moe_gpu_test: MoeGpuSharedTest.* (session 83's MoeCudaParams::after_up fork), then
#      the whole binary (cut at 280 s on an H100)
# kit-target: kernels_gemm_gpu_test bench_gemm_float_gpu kernels_moe_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s146; mkdir -p $K; tar xJf "$(dirname "$0")"/s146.tar.xz -C $K
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
    m)
      timeout 300 $K/kernels_moe_gpu_test --gtest_filter='MoeGpuSharedTest.*' 2>&1 |
        grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected" | head -40
      timeout 280 $K/kernels_moe_gpu_test 2>&1 | grep -E "^\[(  FAILED|  PASSED|==========)" | head -20 ;;
  esac
done
