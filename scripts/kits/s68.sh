#!/usr/bin/env bash
# Kit s68 (built by scripts/gpu_kit.sh s68; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s68_run.sh MODES   (letters, run in order)
#   t  CTA pairs sharing the weight box by TMA multicast (LinearCudaParams::ws_multicast), their
#      consumers' remote arrivals now without the MEMBAR.ALL.GPU of .release.cluster (kit s67, this
#      kit before that fix plus `g`, the whole GEMM GPU suite: pairs at 2.2x the time, every test
#      passed): the bit test against one CTA per tile, and the stream-K tail / narrow-tile bit tests
#      beside it
#   m  bench_gemm_gpu with and without pairs: expanded weights at the by-waves width and 256, and
#      the in-place decode, at M 1,024 / 2,048 / 4,096 on the prefill shapes
#   w  a wave's time at 256 columns, full against partial (kit s66's w): wq_a at M 640 / 3,328 /
#      4,096, shared w1|w3 at 384 / 1,792 / 2,048 / 4,096, unsplit and split, one CTA and pairs
#   g  the whole GEMM GPU suite (the bf16 Linear's by-waves default has not run in full yet)
# One call: `tmw` (t ~10 s, m ~2 min, w ~1); g ~6 min.
# kit-target: kernels_gemm_gpu_test bench_gemm_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s68*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-tmw}
cols='$1 ~ /^(wq_a|wkv|wq_b|wo_b|shared_w13|shared_w2|idx_wq_b|engram_wkv|main_proj)$/'
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    t) timeout 150 $K/kernels_gemm_gpu_test --gtest_brief=1 \
         --gtest_filter='*PairMulticast*:*StreamKTail*:*NarrowTiles*' > $OUT/pair_test.log 2>&1
       echo "pair tests rc $?"; grep -E "FAILED|PASSED|tests ran|pair multicast|narrow|stream-K tail|Failure|rror" $OUT/pair_test.log | head -20 ;;
    m) timeout 200 $K/bench_gemm_gpu --iters 10 --warmup 2 --m 1024,2048,4096 \
         --shapes wq_a,wq_b,wo_b,shared_w13,shared_w2,engram_wkv --ws-cols 0,256 \
         --multicast 0,1 > $OUT/pair_bench.log 2>&1
       echo "bench rc $?"
       timeout 100 $K/bench_gemm_gpu --iters 10 --warmup 2 --m 2048,4096 --kernels wgmma-ws-inplace \
         --shapes wq_a,wq_b,wo_b,shared_w13 --multicast 0,1 > $OUT/pair_bench_inplace.log 2>&1
       echo "bench in place rc $?"; grep -h -E "^roofs" $OUT/pair_bench.log $OUT/pair_bench_inplace.log
       awk "$cols"' {print $1, $4, $5, $7, $8, $14}' $OUT/pair_bench.log $OUT/pair_bench_inplace.log ;;
    w) B="$K/bench_gemm_gpu --iters 10 --warmup 2 --kernels wgmma-ws --ws-cols 256 --multicast 0,1"
       timeout 80 $B --m 640,3328,4096 --shapes wq_a --splits 1,4 > $OUT/wave_wq_a.log 2>&1
       timeout 80 $B --m 384,1792,2048,4096 --shapes shared_w13 --splits 1,5,8 > $OUT/wave_w13.log 2>&1
       awk "$cols"' {print $1, $4, $5, $6, $7, $8, $14}' $OUT/wave_wq_a.log $OUT/wave_w13.log ;;
    g) $K/kernels_gemm_gpu_test --gtest_brief=1 > $OUT/gemm_test.log 2>&1
       echo "gemm tests rc $?"; grep -E "FAILED|PASSED|tests ran|bit-identical" $OUT/gemm_test.log | head -30 ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
