#!/usr/bin/env bash
# Kit s87 (built by scripts/gpu_kit.sh s87; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s87_run.sh t
#   t  GemmGpuWsTest (the FP8 Linear's warp-specialised variants, bit for bit) after the unsplit
#      rule, the in-place decode and the cp.async kernel at the ws plan's split count
# kit-target: kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s87*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    f)
      $K/bench_gemm_float_gpu --iters 10 --warmup 2 --m 1024,2048,4096 --shapes gate,cmp_wkv_r1,cmp_r2_pair,wo_a > $OUT/float.log 2>&1
      echo "float bench rc $?"; grep -v "^#" $OUT/float.log | tail -20 ;;
    t)
      timeout 420 $K/kernels_gemm_gpu_test --gtest_brief=1 --gtest_filter='GemmGpuWsTest.*:GemmGpuConcatTest.*' > $OUT/float_test.log 2>&1
      echo "ws tests rc $?"; grep -E "FAILED|PASSED|Failure|runs|ms total" $OUT/float_test.log | head -20 ;;
  esac
done
