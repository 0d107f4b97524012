#!/usr/bin/env bash
# Kit s104 (built by scripts/gpu_kit.sh s104; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s104_run.sh t b
# The switches below (FS_MHC_WG_PIPE / _EARLY / _ABLATE) live in s104_experiment.patch, which was
# not kept in the tree (measured level; kernels/mhc/README.md "Session 73"): `git apply
# scripts/kits/s104_experiment.patch` before scripts/gpu_kit.sh s104 to rebuild this kit.
# Session 73, the mHC wgmma body (shape 2, the fused collapse on it): two chunks in flight and the
# segment's first stage issued before the B tiles are staged, against HEAD; two timing-only
# ablations of HEAD's kernel (a1: no TMA — stale stages; a2: no wgmma) from a temporary patch.
#   t  the wgmma and batch-invariance tests on the pe build (two chunks in flight + early stage)
#   b  bench_mhc --large 1 on HEAD, e1 (early stage), p2 (two chunks), pe (both), a1, a2
# kit-target: kernels_mhc_gpu_test bench_mhc
# kit-variant: kernels_mhc_gpu_test pe kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PIPE=2 -DFS_MHC_WG_EARLY=1
# kit-variant: bench_mhc e1 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_EARLY=1
# kit-variant: bench_mhc p2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PIPE=2
# kit-variant: bench_mhc pe kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_PIPE=2 -DFS_MHC_WG_EARLY=1
# kit-variant: bench_mhc a1 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_ABLATE=1
# kit-variant: bench_mhc a2 kernels/mhc/cuda/mhc_launch.cu -DFS_MHC_WG_ABLATE=2
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s104*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 200 $K/kernels_mhc_gpu_test_pe --gtest_filter='*Wgmma*:*BatchInvariant*' \
        > $OUT/mhc_test_pe.log 2>&1
      echo "mhc tests (pe) rc $?"
      grep -E "^\[  (PASSED|FAILED) |Failure|OK \]" $OUT/mhc_test_pe.log | head -20 ;;
    b)
      for round in 1; do
        for v in "" _e1 _p2 _pe; do
          timeout 60 $K/bench_mhc$v --large 1 --iters 20 --warmup 3 > $OUT/bench${v}_$round.log 2>&1
          echo "bench_mhc$v rc $?"; grep -E "^mixes(_prep)?(\+collapse)? +16384|^mixes_prep +4096" $OUT/bench${v}_$round.log
        done
      done
      for v in _a1 _a2; do
        timeout 60 $K/bench_mhc$v --large 1 --iters 20 --warmup 3 > $OUT/bench${v}.log 2>&1
        echo "bench_mhc$v rc $?"; grep -E "^mixes(_prep)?(\+collapse)? +16384" $OUT/bench${v}.log
      done ;;
  esac
done
