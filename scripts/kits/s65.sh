#!/usr/bin/env bash
# Kit s65 (built by scripts/gpu_kit.sh s65; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s65_run.sh MODES   (letters, run in order)
#   t  the stream-K tail's bit test (the reduction now a second kernel over all SMs), the bf16
#      Linear's narrow-tile bit checks (kit s64 timed out before them) and the FP8 narrow tiles
#   b  bench_gemm_gpu: the by-waves width, 256 and the stream-K tail on the shapes with a tail
# One call: `tb` (about 2 minutes of run time plus the machine's start).
# kit-target: kernels_gemm_gpu_test bench_gemm_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s65*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-tb}
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    t) timeout 100 $K/kernels_gemm_gpu_test --gtest_brief=1 \
         --gtest_filter='*StreamKTail*:FloatLinearGpuTest.WarpSpecialised*:*NarrowTiles*' \
         > $OUT/gemm_test.log 2>&1
       echo "gemm tests rc $?"; grep -E "FAILED|PASSED|tests ran|narrow ws|stream-K tail|warp-spec" $OUT/gemm_test.log | head -20 ;;
    b) timeout 120 $K/bench_gemm_gpu --iters 10 --warmup 2 --m 1024,2048,4096 \
         --shapes wq_a,wo_b,shared_w13,shared_w2 --ws-cols 0,256 \
         --stream-k-tail 0,1 > $OUT/gemm_bench.log 2>&1
       echo "bench rc $?"; grep -E "^roofs" $OUT/gemm_bench.log
       awk '$1 ~ /^(wq_a|wkv|wq_b|wo_b|shared_w13|shared_w2|idx_wq_b|engram_wkv)$/ {print $1, $4, $5, $7, $8, $14}' $OUT/gemm_bench.log ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
