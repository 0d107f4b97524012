#!/usr/bin/env bash
# Kit s102 (built by scripts/gpu_kit.sh s102; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s102_run.sh m b
# Session 72, the fused collapse on the mHC wgmma body's default shape (FS_MHC_WG_COLLAPSE=1):
#   m  the wgmma and batch-invariance tests on the collapse build (kernels_mhc_gpu_test_c1)
#   b  bench_mhc --large 1 on the default build and the collapse build (the collapse rows:
#      mixes_prep+collapse on the wgmma body against mixes_mma_prep+collapse)
# kit-target: kernels_mhc_gpu_test bench_mhc
# kit-variant: kernels_mhc_gpu_test c1 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_COLLAPSE=1
# kit-variant: bench_mhc c1 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_COLLAPSE=1
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s102*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    m)
      timeout 150 $K/kernels_mhc_gpu_test_c1 --gtest_filter='*Wgmma*:*BatchInvariant*' \
        > $OUT/mhc_test_c1.log 2>&1
      echo "mhc tests (c1) rc $?"
      grep -E "^\[  (PASSED|FAILED) |Failure|wgmma vs|OK \]" $OUT/mhc_test_c1.log | head -20 ;;
    b)
      for v in "" _c1; do
        timeout 60 $K/bench_mhc$v --large 1 --iters 20 --warmup 3 > $OUT/bench${v}.log 2>&1
        echo "bench_mhc$v rc $?"; grep -E "^mixes" $OUT/bench${v}.log
      done ;;
  esac
done
