#!/usr/bin/env bash
# Kit s144 (built by scripts/gpu_kit.sh s144; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s144_run.sh t
# Session 83 (built, not run): the MoE's GPU tests with MoeCudaParams::after_up
# (MoeGpuSharedTest.CallerForkedSharedExpertWithReadyEvent runs the caller's shared expert forked
# before MoeCuda and from after_up, on streams and in a graph, against MoeCuda running it).
#   t  kernels_moe_gpu_test: MoeGpuSharedTest.*, then the whole binary
# kit-target: kernels_moe_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s144; mkdir -p $K; tar xJf "$(dirname "$0")"/s144.tar.xz -C $K
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 300 $K/kernels_moe_gpu_test --gtest_filter='MoeGpuSharedTest.*' 2>&1 |
        grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected" | head -40
      timeout 280 $K/kernels_moe_gpu_test 2>&1 | grep -E "^\[(  FAILED|  PASSED|==========)" | head -20 ;;
  esac
done
