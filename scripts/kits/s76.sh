#!/usr/bin/env bash
# Kit s76 (built by scripts/gpu_kit.sh s76; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s76_run.sh t
#   t  the four warp-specialised bit tests after their shared case scaffold (LinearCase,
#      MakeCaseWeight) replaced each test's own
# kit-target: kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s76*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 $K/kernels_gemm_gpu_test --gtest_brief=1 --gtest_filter='GemmGpuTest.StreamKTail*:GemmGpuTest.PairMulticast*:GemmGpuTest.PreQuant*:GemmGpuTest.KeptExp*' > $OUT/gemm_test.log 2>&1
echo "gemm tests rc $?"; grep -E "FAILED|PASSED|Failure|runs" $OUT/gemm_test.log | head -12
