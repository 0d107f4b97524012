#!/usr/bin/env bash
# Kit s117g (built by scripts/gpu_kit.sh s117g; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s117g_run.sh t m
#   t  kernels_gemm_gpu_test: XNormGpuTest.* (session 78's fused x_norm), FloatLinearPdl*
#      (CaptureGraph moved, session 77)
#   m  kernels_moe_gpu_test: MoeGpuHcPostTest.* (CaptureGraph moved, session 77)
# kit-target: kernels_gemm_gpu_test kernels_moe_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s117g; mkdir -p $K; for t in "$(dirname "$0")"/s117g.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
for mode in "$@"; do
  case $mode in
    t)
      timeout 300 $K/kernels_gemm_gpu_test --gtest_filter='XNormGpuTest.*:FloatLinearPdl*' \
        > $OUT/gemm_test.log 2>&1
      echo "gemm test rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|differ|OK \]" $OUT/gemm_test.log | tail -12 ;;
    m)
      timeout 300 $K/kernels_moe_gpu_test --gtest_filter='MoeGpuHcPostTest.*' > $OUT/moe_test.log 2>&1
      echo "moe test rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|differ|OK \]" $OUT/moe_test.log | tail -12 ;;
  esac
done
