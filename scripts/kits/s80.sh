#!/usr/bin/env bash
# Kit s80 (built by scripts/gpu_kit.sh s80; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s80_run.sh b
#   b  bench_gemm_gpu: the plan's K splits against unsplit tiles of every width, where the plan
#      splits at prefill sizes (wq_a, wkv, wq_a | wkv, the indexer's wq_b) and the shared
#      expert's real stacked w1 | w3 (4,608 × 5,120) at every width
# kit-target: bench_gemm_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s80*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    b)
      $K/bench_gemm_gpu --iters 10 --warmup 2 --m 1024,2048,4096 --shapes wq_a,wkv,wq_a_wkv,idx_wq_b,shared_w13 --x-qdq 1 --kept-expansion 1 --splits 0,1 --ws-cols 0,128,160,192,256 > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "xq-ke|command|roofs" $OUT/gemm_bench.log | awk '{print $1, $4, $5, $7, $8, $NF}' ;;
  esac
done
