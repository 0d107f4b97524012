#!/usr/bin/env bash
# Kit s105 (built by scripts/gpu_kit.sh s105; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s105_run.sh b t
# The switch (FS_MHC_WG_PREFETCH) lives in s105_experiment.patch, not kept in the tree (session
# 74: slower at every distance):
# `git apply scripts/kits/s105_experiment.patch` before scripts/gpu_kit.sh s105 to rebuild this
# kit.
# (kernels/mhc/README.md "Session 74")
# Session 73, the mHC wgmma body's L2 prefetch of the X boxes (FS_MHC_WG_PREFETCH items ahead of
# the stage; the default build, 0, is byte-identical to session 72's kernels): kit s104 found the
# kernel bound by its X loads with 64 KB of stages per SM in flight.
#   b  bench_mhc --large 1 on HEAD and prefetch distances 1, 2, 4, two rounds
#   t  the wgmma and batch-invariance tests on the distance-2 build (a prefetch changes no data;
#      this checks that it faults nowhere, e.g. past the last token)
# kit-target: kernels_mhc_gpu_test bench_mhc
# kit-variant: kernels_mhc_gpu_test f2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PREFETCH=2
# kit-variant: bench_mhc f1 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PREFETCH=1
# kit-variant: bench_mhc f2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PREFETCH=2
# kit-variant: bench_mhc f4 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PREFETCH=4
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s105*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    b)
      for round in 1 2; do
        for v in "" _f1 _f2 _f4; do
          timeout 60 $K/bench_mhc$v --large 1 --iters 20 --warmup 3 > $OUT/bench${v}_$round.log 2>&1
          echo "bench_mhc$v rc $?"
          grep -E "^mixes(_prep)?(\+collapse)? +16384|^mixes_prep +4096" $OUT/bench${v}_$round.log
        done
      done ;;
    t)
      timeout 200 $K/kernels_mhc_gpu_test_f2 --gtest_filter='*Wgmma*:*BatchInvariant*' \
        > $OUT/mhc_test_f2.log 2>&1
      echo "mhc tests (f2) rc $?"
      grep -E "^\[  (PASSED|FAILED) |Failure|OK \]" $OUT/mhc_test_f2.log | head -20 ;;
  esac
done
