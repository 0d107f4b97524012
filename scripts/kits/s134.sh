#!/usr/bin/env bash
# Kit s134 (built by scripts/gpu_kit.sh s134 with scripts/kits/s104_experiment.patch applied — the
# switches FS_MHC_WG_PIPE / _EARLY / _ABLATE are not in the tree; the patch's defaults build HEAD's
# kernel). Runs on the GPU machine from the repository root:
#   bash build-gpu-bin/s134_run.sh b t
# Session 80: session 73's mHC wgmma-body experiments (measured level on an H100, where the X loads
# bound the kernel) on an H200, whose faster copy leaves the kernel's own chain the larger part
# (session 74: 0.63 / 0.61 of the copy at 16,384 tokens):
#   b  bench_mhc --large 1: HEAD and p2 (two chunks in flight) alternated twice, then pe (p2 with
#      the segment's first stage early) and the timing-only ablations a1 (no TMA) and a2 (no wgmma)
#   t  the wgmma and batch-invariance tests on the p2 build (the same bits as HEAD's body)
# kit-target: bench_mhc kernels_mhc_gpu_test
# kit-variant: kernels_mhc_gpu_test p2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PIPE=2
# kit-variant: bench_mhc p2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PIPE=2
# kit-variant: bench_mhc pe kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PIPE=2 -DFS_MHC_WG_EARLY=1
# kit-variant: bench_mhc a1 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_ABLATE=1
# kit-variant: bench_mhc a2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_ABLATE=2
# kit-drop: kernels_mhc_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit_s134; mkdir -p $K; for t in "$(dirname "$0")"/s134.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
sel() { grep -E "^(mixes(_prep)?(\+collapse)?|copy|d2d) +(4096|16384)|d2d|GB/s" | head -12; }
for mode in "$@"; do
  case $mode in
    b)
      for round in 1 2; do
        for v in "" _p2; do
          echo "bench_mhc$v round $round"
          timeout 60 $K/bench_mhc$v --large 1 --iters 20 --warmup 3 > $OUT/mhc${v}_$round.log 2>&1
          sel < $OUT/mhc${v}_$round.log
        done
      done
      for v in _pe _a1 _a2; do
        echo "bench_mhc$v"
        timeout 60 $K/bench_mhc$v --large 1 --iters 20 --warmup 3 > $OUT/mhc${v}.log 2>&1
        sel < $OUT/mhc${v}.log
      done ;;
    t)
      timeout 200 $K/kernels_mhc_gpu_test_p2 --gtest_filter='*Wgmma*:*BatchInvariant*' \
        > $OUT/mhc_test_p2.log 2>&1
      echo "mhc tests (p2) rc $?"
      grep -E "^\[  (PASSED|FAILED) |Failure" $OUT/mhc_test_p2.log | head -20 ;;
  esac
done
