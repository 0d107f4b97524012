#!/usr/bin/env bash
# Kit s126 (built by scripts/gpu_kit.sh s126; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s126_run.sh o r
#   o  session 79's defaults (--stack-qkv 1 --wqb-ctas 256) against session 78's (--stack-qkv 0
#      --wqb-ctas 0) at 1 / 8 / 64 / 128 / 256 tokens, alternated twice
#   r  a trace of the 1-token step with the defaults
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s126; mkdir -p $K; for t in "$(dirname "$0")"/s126.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|stacked|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    o)
      for round in 1 2; do
        echo "old round $round"; eval timeout 200 $B --tokens 1,8,64,128,256 --stack-qkv 0 --wqb-ctas 0 2>&1 | show
        echo "new round $round"; eval timeout 200 $B --tokens 1,8,64,128,256 2>&1 | show
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 > $OUT/trace_new.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ|stacked" $OUT/trace_new.log ;;
  esac
done
