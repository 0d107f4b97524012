#!/usr/bin/env bash
# Kit s70 (built by scripts/gpu_kit.sh s70; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s70_run.sh MODES   (letters, run in order)
#   t  the fused activation QDQ (LinearCudaParams::ws_fused_qdq: the producer warpgroup QDQs each
#      x stage in shared memory) against the separate pass, bit for bit; the pair bit test
#   f  bench_gemm_gpu with and without the fused QDQ on the prefill shapes at M 2,048 / 4,096
#      (the by-waves width), beside cuBLAS on random operands
# One call: `tf` (t ~15 s, f ~30 s).
# kit-target: kernels_gemm_gpu_test bench_gemm_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s70*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-tf}
cols='$1 ~ /^(wq_a|wkv|wq_b|wo_b|shared_w13|shared_w2|idx_wq_b|engram_wkv|main_proj)$/'
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    t) timeout 100 $K/kernels_gemm_gpu_test --gtest_brief=1 \
         --gtest_filter='*FusedQdq*:*PairMulticast*' > $OUT/fused_test.log 2>&1
       echo "fused tests rc $?"; grep -E "FAILED|PASSED|tests ran|fused QDQ|pair multicast|Failure|rror" $OUT/fused_test.log | head -20 ;;
    f) timeout 150 $K/bench_gemm_gpu --iters 10 --warmup 2 --m 2048,4096 \
         --shapes wq_a,wq_b,wo_b,shared_w13,shared_w2,main_proj --fused-qdq 0,1 --cublas rand \
         > $OUT/fused_bench.log 2>&1
       echo "bench rc $?"; grep -E "^roofs|random operands" $OUT/fused_bench.log
       awk "$cols"' {print $1, $4, $5, $8, $14}' $OUT/fused_bench.log ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
