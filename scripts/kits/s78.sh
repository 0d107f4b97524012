#!/usr/bin/env bash
# Kit s78 (built by scripts/gpu_kit.sh s78; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s78_run.sh t b p
#   t  the stacked Linear's GPU tests with the same K splits forced (GemmGpuConcatTest) and the
#      warp-specialised bit tests (GemmGpuWsTest) after the by-waves rule's fixed share 16 -> 64
#   b  bench_gemm_gpu: the stacked shapes and wo_b at the new rule's width against 256 / 160
#   p  bench_prefill_linears with the stacked variant (its check within tolerance)
# kit-target: kernels_gemm_gpu_test bench_gemm_gpu bench_prefill_linears
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s78*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 420 $K/kernels_gemm_gpu_test --gtest_brief=1 --gtest_filter='GemmGpuConcatTest.*:GemmGpuWsTest.*' > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"; grep -E "FAILED|PASSED|Failure|runs|ms total" $OUT/gemm_test.log | head -20 ;;
    b)
      $K/bench_gemm_gpu --iters 10 --warmup 2 --m 1024,2048,4096 --shapes wq_a_wkv,wo_b,wq_b_idx --x-qdq 1 --kept-expansion 1 --ws-cols 0,160,256 > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; cat $OUT/gemm_bench.log | tail -60 ;;
    p)
      for r in 1 2; do
        $K/bench_prefill_linears --iters 20 --warmup 3 --tokens 1024,2048,4096 > $OUT/prefill_$r.log 2>&1
        echo "prefill bench rc $?"; cat $OUT/prefill_$r.log
      done ;;
  esac
done
