#!/usr/bin/env bash
# Kit s124 (built by scripts/gpu_kit.sh s124; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s124_run.sh v r
#   v  defaults / --stack-qkv 1 / --wqb-ctas 256 / both, at 1 / 8 / 64 tokens, alternated three
#      times
#   r  a trace of the 1-token step with --stack-qkv 1 --wqb-ctas 256
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s124; mkdir -p $K; for t in "$(dirname "$0")"/s124.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    v)
      for round in 1 2 3; do
        for c in "" "--stack-qkv 1" "--wqb-ctas 256" "--stack-qkv 1 --wqb-ctas 256"; do
          echo "[$c] round $round"; eval timeout 150 $B --tokens 1,8,64 $c 2>&1 | show
        done
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 --stack-qkv 1 --wqb-ctas 256 > $OUT/trace_s256.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_s256.log ;;
  esac
done
