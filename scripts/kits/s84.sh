#!/usr/bin/env bash
# Kit s84 (built by scripts/gpu_kit.sh s84; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s84_run.sh f t
#   f  bench_gemm_float_gpu at the plan's choice after the bf16 Linear's ws plan dropped K splits
#      where its 128-column tiles fill half the SMs (the gate and the compressor's wkv at 4,096,
#      the ratio-2 pair at 2,048)
#   t  FloatLinearGpuTest (the bf16 / fp32 Linear against its CPU body)
# kit-target: kernels_gemm_gpu_test bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s84*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    f)
      $K/bench_gemm_float_gpu --iters 10 --warmup 2 --m 1024,2048,4096 --shapes gate,cmp_wkv_r1,cmp_r2_pair,wo_a > $OUT/float.log 2>&1
      echo "float bench rc $?"; grep -v "^#" $OUT/float.log | tail -20 ;;
    t)
      timeout 420 $K/kernels_gemm_gpu_test --gtest_brief=1 --gtest_filter='FloatLinearGpuTest.*' > $OUT/float_test.log 2>&1
      echo "float tests rc $?"; grep -E "FAILED|PASSED|Failure|runs|ms total" $OUT/float_test.log | head -20 ;;
  esac
done
