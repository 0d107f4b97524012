#!/usr/bin/env bash
# Kit s125 (built by scripts/gpu_kit.sh s125; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s125_run.sh v m
#   v  defaults / --stack-qkv 1 --wqb-ctas 256 at 1 / 128 / 256 tokens, alternated twice (the
#      stacked Linear checked against wq_a and wkv alone at each count)
#   m  --stack-qkv 1 --wqb-ctas 256 with --attn-mixes-at 0 / 1 at 1 / 8 tokens, alternated twice
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s125; mkdir -p $K; for t in "$(dirname "$0")"/s125.tar.xz; do tar xJf "$t" -C $K; done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|stacked|FAILED" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    v)
      for round in 1 2; do
        for c in "" "--stack-qkv 1 --wqb-ctas 256"; do
          echo "[$c] round $round"; eval timeout 200 $B --tokens 1,128,256 $c 2>&1 | show
        done
      done ;;
    m)
      for round in 1 2; do
        for c in 0 1; do
          echo "stack + 256, attn-mixes-at $c round $round"; eval timeout 120 $B --tokens 1,8 --stack-qkv 1 --wqb-ctas 256 --attn-mixes-at $c 2>&1 | show
        done
      done ;;
  esac
done
