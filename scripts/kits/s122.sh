#!/usr/bin/env bash
# Kit s122 (built by scripts/gpu_kit.sh s122; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s122_run.sh a b r
#   a  --attn-mixes-at 0 / 2 (the attention site's mixes at the step's start / beside wo_a) at
#      1 / 8 / 64 tokens, alternated twice
#   b  --attn-mixes-at 2 with --stack-qkv 0 / 1 at 1 / 8 tokens, alternated twice
#   r  traces of the 1-token step with --attn-mixes-at 2, without and with --stack-qkv
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s122; mkdir -p $K; for t in "$(dirname "$0")"/s122.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    a)
      for round in 1 2; do
        for c in 0 2; do
          echo "attn-mixes-at $c round $round"; eval timeout 150 $B --tokens 1,8,64 --attn-mixes-at $c 2>&1 | show
        done
      done ;;
    b)
      for round in 1 2; do
        for c in 0 1; do
          echo "attn-mixes-at 2 stack-qkv $c round $round"; eval timeout 120 $B --tokens 1,8 --attn-mixes-at 2 --stack-qkv $c 2>&1 | show
        done
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 --attn-mixes-at 2 > $OUT/trace_a2.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_a2.log
      eval timeout 90 $B --tokens 1 --trace 1 --attn-mixes-at 2 --stack-qkv 1 > $OUT/trace_a2s.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_a2s.log ;;
  esac
done
