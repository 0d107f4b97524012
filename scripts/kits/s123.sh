#!/usr/bin/env bash
# Kit s123 (built by scripts/gpu_kit.sh s123; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s123_run.sh w x r
#   w  --wqb-ctas 0 / 132 / 198 (wq_b's stream plan toward N CTAs) at 1 / 8 tokens, alternated
#      twice
#   x  --wqb-ctas 132 with --attn-mixes-at 2 and with --stack-qkv 1, at 1 / 8 tokens, twice
#   r  traces of the 1-token step with --wqb-ctas 132, alone and with --attn-mixes-at 2
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s123; mkdir -p $K; for t in "$(dirname "$0")"/s123.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    w)
      for round in 1 2; do
        for c in 0 132 198; do
          echo "wqb-ctas $c round $round"; eval timeout 120 $B --tokens 1,8 --wqb-ctas $c 2>&1 | show
        done
      done ;;
    x)
      for round in 1 2; do
        echo "wqb-ctas 132 attn-mixes-at 2 round $round"; eval timeout 120 $B --tokens 1,8 --wqb-ctas 132 --attn-mixes-at 2 2>&1 | show
        echo "wqb-ctas 132 stack-qkv 1 round $round"; eval timeout 120 $B --tokens 1,8 --wqb-ctas 132 --stack-qkv 1 2>&1 | show
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 --wqb-ctas 132 > $OUT/trace_w132.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_w132.log
      eval timeout 90 $B --tokens 1 --trace 1 --wqb-ctas 132 --attn-mixes-at 2 > $OUT/trace_w132a2.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_w132a2.log ;;
  esac
done
