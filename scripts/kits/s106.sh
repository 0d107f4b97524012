#!/usr/bin/env bash
# Kit s106 (built by scripts/gpu_kit.sh s106; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s106_run.sh t b
# The switch (FS_MOE_RING_EARLY_DOWN) lives in s106_experiment.patch, not kept in the tree
# (session 74: level):
# `git apply scripts/kits/s106_experiment.patch` before scripts/gpu_kit.sh s106 to rebuild this
# kit.
# (kernels/moe/ring_gemm.md "Session 73")
# Session 73, the decode MoE's down ring GEMM loading its first stages' weights before its
# griddepcontrol.wait (FS_MOE_RING_EARLY_DOWN=1; the up ring's epilogue triggers the down ring
# right after its own wait; the default build is byte-identical to before):
#   t  the MoE stage, layer, front and shared-expert GPU tests on the e1 build
#   b  bench_moe at 1 / 2 / 4 / 8 / 16 / 32 / 64 tokens, HEAD and e1 alternated twice
# The layer step's A/B (kits s107 / s108, session 73) was not run: bench_moe measured level, and
# both kits were removed in session 74.
# kit-target: kernels_moe_gpu_test bench_moe
# kit-drop: kernels_moe_gpu_test
# kit-variant: kernels_moe_gpu_test e1 kernels/moe/cuda/moe_ring_launch.cu -DFS_MOE_RING_EARLY_DOWN=1
# kit-variant: bench_moe e1 kernels/moe/cuda/moe_ring_launch.cu -DFS_MOE_RING_EARLY_DOWN=1
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s106*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 300 $K/kernels_moe_gpu_test_e1 --gtest_brief=1 --gtest_filter='MoeGpuStageTest.*:MoeGpuLayerTest.*:MoeGpuFrontTest.*:MoeGpuSharedTest.Concurrent*:MoeGpuSharedTest.CallerForked*' \
        > $OUT/moe_test_e1.log 2>&1
      echo "moe tests (e1) rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/moe_test_e1.log | head -20 ;;
    b)
      for round in 1 2; do
        for v in "" _e1; do
          timeout 90 $K/bench_moe$v --tokens 1,2,4,8,16,32,64 --iters 20 --warmup 3 --shared 0 \
            > $OUT/moe${v}_$round.log 2>&1
          echo "bench_moe$v rc $?"; grep -E "^ +[0-9]+ +[0-9.]+ +[0-9.]+ " $OUT/moe${v}_$round.log
        done
      done ;;
  esac
done
