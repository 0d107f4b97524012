#!/usr/bin/env bash
# Kit s81 (built by scripts/gpu_kit.sh s81; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s81_run.sh t b p
#   t  GemmGpuTest (against LinearCpu) and GemmGpuConcatTest after the expanded plans dropped K
#      splits where unsplit 128-column tiles fill half the SMs
#   b  bench_gemm_gpu: the affected shapes at the plan's choice
#   p  bench_prefill_linears, each launch also alone (--stages 1)
# kit-target: kernels_gemm_gpu_test bench_gemm_gpu bench_prefill_linears
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s81*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 360 $K/kernels_gemm_gpu_test --gtest_brief=1 --gtest_filter='GemmGpuTest.*:GemmGpuConcatTest.*' > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"; grep -E "FAILED|PASSED|Failure|runs|ms total" $OUT/gemm_test.log | head -30 ;;
    b)
      $K/bench_gemm_gpu --iters 10 --warmup 2 --m 1024,2048,4096 --shapes wq_a,wkv,wq_a_wkv,shared_w1,shared_w13 --x-qdq 1 --kept-expansion 1 > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "xq-ke|command|roofs" $OUT/gemm_bench.log ;;
    p)
      $K/bench_prefill_linears --iters 20 --warmup 3 --tokens 1024,2048,4096 --stages 1 > $OUT/prefill_stages.log 2>&1
      echo "prefill bench rc $?"; cat $OUT/prefill_stages.log ;;
  esac
done
