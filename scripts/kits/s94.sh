#!/usr/bin/env bash
# Kit s94 (built by scripts/gpu_kit.sh s94; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s94_run.sh t y
#   t  every MoE GPU test: the ring kernel's `full` barrier in the counted .noinc form (33
#      arrivals: 32 producer lanes' cp.async arrivals + lane 0's expect_tx; the end mark arrives
#      33 at once) instead of the incrementing form on a count of 1
#   y  synccheck on the MoE GPU tests (kit s93: 128 "Barrier overflow" errors at the ring kernel's
#      cp.async.mbarrier.arrive): the error summary and the first errors, if any
# kit-target: kernels_moe_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s94*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 120 $K/kernels_moe_gpu_test --gtest_brief=1 > $OUT/moe_test.log 2>&1
      echo "moe tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/moe_test.log | head -10 ;;
    y)
      timeout 150 $SAN --tool synccheck --print-limit 6 $K/kernels_moe_gpu_test > $OUT/moe_sync.log 2>&1
      echo "moe synccheck rc $?"; grep -cE "^\[       OK" $OUT/moe_sync.log
      grep -E "^=========" $OUT/moe_sync.log | grep -vE "Host Frame|Saved host" | head -24
      grep -E "^\[  FAILED|^\[  PASSED" $OUT/moe_sync.log | head ;;
  esac
done
