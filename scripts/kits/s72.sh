#!/usr/bin/env bash
# Kit s72 (built by scripts/gpu_kit.sh s72; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s72_run.sh MODES
#   f  bench_gemm_gpu as kit s71's f, with --x-qdq 1 now on x QDQ'd before timing (s71 read the raw
#      random x in place: engram.wkv ran ~9 % slower on it, the operands' bits)
#   m  bench_moe's shared-expert table at 2,048 / 4,096 tokens with the shared expert's SwiGLU
#      writing its output QDQ'd and w2 skipping its activation pass (bench_moe, the default) and
#      without (bench_moe_noqdq: FS_MOE_SHARED_SWIGLU_QDQ=0), alternated twice
# One call: `fm` (f ~15 s, m ~2 min).
# kit-target: bench_gemm_gpu bench_moe
# kit-variant: bench_moe noqdq kernels/moe/moe_shared_params.cc -DFS_MOE_SHARED_SWIGLU_QDQ=0
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s72*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-fm}
cols='$1 ~ /^(wq_a|wkv|wq_b|wo_b|shared_w13|shared_w2|idx_wq_b|engram_wkv|main_proj)$/'
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    f) timeout 200 $K/bench_gemm_gpu --iters 10 --warmup 2 --m 2048,4096 \
         --shapes wq_a,wq_b,wo_b,shared_w13,shared_w2,main_proj,engram_wkv --x-qdq 0,1 \
         --kept-expansion 0,1 --cublas rand > $OUT/gemm_bench.log 2>&1
       echo "bench rc $?"; grep -E "^roofs|random operands" $OUT/gemm_bench.log
       awk "$cols"' {print $1, $4, $5, $8, $14}' $OUT/gemm_bench.log ;;
    m) for r in 1 2; do
         for b in bench_moe bench_moe_noqdq; do
           timeout 150 $K/$b --tokens 2048,4096 --shared 1 --iters 10 --warmup 2 > $OUT/${b}_$r.log 2>&1
           echo "$b run $r rc $?"; grep -iE "shared|tokens" $OUT/${b}_$r.log | tail -12
         done
       done ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
