#!/usr/bin/env bash
# Kit s82 (built by scripts/gpu_kit.sh s82; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s82_run.sh s b p
#   s  the shared-expert GPU tests, whose fused w13 is now built by ConcatLinearRows
#   b  bench_gemm_gpu at M 384 / 512 / 768, where the expanded plan now drops its K splits:
#      the plan (splits 0) against the splits it took before (2, 3)
#   p  bench_prefill_linears, twice (the figures for the docs)
# kit-target: kernels_moe_gpu_test bench_gemm_gpu bench_prefill_linears
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s82*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    s)
      timeout 240 $K/kernels_moe_gpu_test --gtest_brief=1 --gtest_filter='MoeGpuShared*' > $OUT/moe_test.log 2>&1
      echo "moe shared tests rc $?"; grep -E "FAILED|PASSED|Failure|ms total" $OUT/moe_test.log | head -20 ;;
    b)
      $K/bench_gemm_gpu --iters 10 --warmup 2 --m 384,512,768 --shapes wq_a,idx_wq_b,shared_w1,shared_w13,shared_w2,wo_b --x-qdq 1 --kept-expansion 1 --splits 0,2,3 > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "xq-ke|command|roofs" $OUT/gemm_bench.log | awk '{print $1, $4, $5, $7, $8, $NF}' ;;
    p)
      for r in 1 2; do
        $K/bench_prefill_linears --iters 20 --warmup 3 --tokens 1024,2048,4096 > $OUT/prefill_$r.log 2>&1
        echo "prefill bench rc $?"; grep -v "differ" $OUT/prefill_$r.log
      done ;;
  esac
done
