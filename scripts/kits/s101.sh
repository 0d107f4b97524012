#!/usr/bin/env bash
# Kit s101 (built by scripts/gpu_kit.sh s101; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s101_run.sh m b
# Session 72, the mHC wgmma body's shapes (mhc_wg_kernel.cuh WgShape; FS_MHC_WG_GPI). Ran at
# e8fcc0b, where the default was shape 1 (the base binaries) and _g2 the variant; shape 2 is the
# default since, so at later commits the base and _g2 binaries are the same build.
#   m  every mHC GPU test on the 2-groups-per-stage build (kernels_mhc_gpu_test_g2)
#   b  bench_mhc --large 1 on the 1- and 2-groups builds, alternated twice, and the ablations
#      (a1: no wgmma, a2: no TMA, stale stages; timing only, their checks fail by design)
# kit-target: kernels_mhc_gpu_test bench_mhc
# kit-variant: kernels_mhc_gpu_test g2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_GPI=2
# kit-variant: bench_mhc g2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_GPI=2
# kit-variant: bench_mhc a1 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_ABLATE=1
# kit-variant: bench_mhc a2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_ABLATE=2
# kit-variant: bench_mhc g2a1 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_GPI=2 -DFS_MHC_WG_ABLATE=1
# kit-variant: bench_mhc g2a2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_GPI=2 -DFS_MHC_WG_ABLATE=2
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s101*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    m)
      timeout 200 $K/kernels_mhc_gpu_test_g2 --gtest_filter='*Wgmma*:*BatchInvariant*' > $OUT/mhc_test_g2.log 2>&1
      echo "mhc tests (g2) rc $?"
      grep -E "^\[  (PASSED|FAILED) |Failure|wgmma vs|OK \]" $OUT/mhc_test_g2.log | head -20 ;;
    b)
      for i in 1; do
        for v in "" _g2; do
          timeout 60 $K/bench_mhc$v --large 1 --iters 20 --warmup 3 > $OUT/bench${v}_$i.log 2>&1
          echo "bench_mhc$v $i rc $?"; grep -E "^mixes" $OUT/bench${v}_$i.log
        done
      done
      for v in _a1 _a2; do
        timeout 60 $K/bench_mhc$v --large 1 --iters 20 --warmup 3 > $OUT/bench$v.log 2>&1
        echo "bench_mhc$v rc $? (ablation)"; grep -E "^mixes(_prep)? " $OUT/bench$v.log
      done ;;
  esac
done
