#!/usr/bin/env bash
# Kit s129 (built by scripts/gpu_kit.sh s129; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s129_run.sh a r
#   a  --wob-tma 0 / 1 (wo_b on the weight-streaming kernel's TMA-ring variant) at 1 / 8 tokens,
#      alternated twice
#   r  a trace of the 1-token step with --wob-tma 1
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s129; mkdir -p $K; for t in "$(dirname "$0")"/s129.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    a)
      for round in 1 2; do
        for c in 0 1; do
          echo "wob-tma $c round $round"; eval timeout 120 $B --tokens 1,8 --wob-tma $c 2>&1 | show
        done
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 --wob-tma 1 > $OUT/trace_t1.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ|stacked" $OUT/trace_t1.log ;;
  esac
done
