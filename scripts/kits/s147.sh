#!/usr/bin/env bash
# Kit s147 (session 84; assembled by hand, not by scripts/gpu_kit.sh: bench_sparse_attn_old is
# kit s143's bench_sparse_attn, built at d550113 before the combine change):
#   bash build-gpu-bin/s147_run.sh t a b
#   t  kernels_gemm_gpu_test FloatLinearFp8OnlyGpuTest.* (the test's workspace fix)
#   a  kernels_attention_gpu_test: the combine's shared form with one float4 group per thread
#      (CombineFormsGiveTheSameBits against the unchanged per-thread form, the row form and the
#      wgmma paths at the released dims)
#   b  bench_sparse_attn --path rows and ws at 1 / 2 / 8 tokens with RoPE, old and new alternated
# kit-target: kernels_gemm_gpu_test kernels_attention_gpu_test bench_sparse_attn
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s147; mkdir -p $K; tar xJf "$(dirname "$0")"/s147.tar.xz -C $K
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 120 $K/kernels_gemm_gpu_test --gtest_filter='FloatLinearFp8OnlyGpuTest.*' 2>&1 |
        grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected|Value of|Actual|differ|expansion" | head -30 ;;
    a)
      timeout 200 $K/kernels_attention_gpu_test --gtest_filter='SparseAttnGpuTest.CombineFormsGiveTheSameBits:SparseAttnGpuTest.RowForm*:SparseAttnGpuTest.WgmmaWsEqualsWgmma:SparseAttnGpuTest.BothTensorPathsAtReleasedDims:SparseAttnGpuTest.WgmmaWsAtReleasedDims:SparseAttnGpuTest.MisalignedWorkspaceGivesTheSameBits:SparseAttnGpuTest.Deterministic' 2>&1 |
        grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected|differ" | head -40 ;;
    b)
      for r in 1 2; do
        for v in old new; do
          b=$K/bench_sparse_attn; [ $v = old ] && b=$K/bench_sparse_attn_old
          echo "[$v]"
          timeout 60 $b --path rows --tokens 1,2,8 --rope 1 --iters 30 --no-roofs 2>&1 |
            grep -E "^wgmma|correctness" | head -8
        done
      done ;;
  esac
done
