#!/usr/bin/env bash
# Kit s79 (built by scripts/gpu_kit.sh s79; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s79_run.sh p b
#   p  bench_prefill_linears with each launch timed alone (--stages 1), then the plain chain
#   b  bench_gemm_gpu at M 1,024 / 2,048: the plan's K splits against unsplit narrow tiles
# kit-target: bench_gemm_gpu bench_prefill_linears
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s79*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    p)
      $K/bench_prefill_linears --iters 20 --warmup 3 --tokens 1024,2048,4096 --stages 1 > $OUT/prefill_stages.log 2>&1
      echo "prefill bench rc $?"; grep -v "^# .*differ" $OUT/prefill_stages.log
      $K/bench_prefill_linears --iters 20 --warmup 3 --tokens 1024,2048,4096 > $OUT/prefill.log 2>&1
      echo "prefill bench rc $?"; cat $OUT/prefill.log ;;
    b)
      $K/bench_gemm_gpu --iters 10 --warmup 2 --m 1024,2048 --shapes wq_a_wkv,shared_w13,shared_w2 --x-qdq 1 --kept-expansion 1 --splits 0,1 --ws-cols 0,128,160,192,256 > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "xq-ke|command" $OUT/gemm_bench.log ;;
  esac
done
