#!/usr/bin/env bash
# Kit s149 (built by scripts/gpu_kit.sh s149; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s149_run.sh m g
#   m  kernels_moe_gpu_test: MoeGpuSharedTest.* (session 83's MoeCudaParams::after_up fork, never
#      run on a GPU until now)
#   g  bench_gemm_float_gpu, wo_a's FP8 form alone around the 128-row tiles (session 84 saw a
#      ragged last tile slower: 192 rows 70.9 µs against 256's 62.4), three runs
# kit-target: kernels_moe_gpu_test bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s149; mkdir -p $K; tar xJf "$(dirname "$0")"/s149.tar.xz -C $K
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    m)
      timeout 200 $K/kernels_moe_gpu_test --gtest_filter='MoeGpuSharedTest.*' 2>&1 |
        grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected" | head -40 ;;
    g)
      for r in 1 2 3; do
        timeout 100 $K/bench_gemm_float_gpu --iters 30 --warmup 5 --shapes wo_a_fp8only \
          --m 128,160,192,224,256,288,320,384 --kernels auto 2>&1 | grep -E "^wo_a" | head -20
      done ;;
  esac
done
