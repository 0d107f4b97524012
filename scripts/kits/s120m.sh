#!/usr/bin/env bash
# Kit s120m (built by scripts/gpu_kit.sh s120m; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s120m_run.sh t
#   t  kernels_moe_gpu_test: MoeGpuFrontPdlTest.*, MoeGpuFrontTest.* (session 78: the programmatic front)
# kit-target: kernels_moe_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit_s120m; mkdir -p $K; for t in "$(dirname "$0")"/s120m.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 300 $K/kernels_moe_gpu_test --gtest_filter='MoeGpuFrontPdlTest.*:MoeGpuFrontTest.*' > $OUT/moe_test.log 2>&1
      echo "moe test rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|OK \]" $OUT/moe_test.log | tail -12 ;;
  esac
done
