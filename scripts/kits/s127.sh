#!/usr/bin/env bash
# Kit s127 (built by scripts/gpu_kit.sh s127; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s127_run.sh q r
#   q  --wqb-qnorm 0 / 1 (q_norm fused into wq_b, now on the stack's q_lora columns) at 1 / 8
#      tokens, alternated twice
#   r  a trace of the 1-token step with --wqb-qnorm 1
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s127; mkdir -p $K; for t in "$(dirname "$0")"/s127.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    q)
      for round in 1 2; do
        for c in 0 1; do
          echo "wqb-qnorm $c round $round"; eval timeout 120 $B --tokens 1,8 --wqb-qnorm $c 2>&1 | show
        done
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 --wqb-qnorm 1 > $OUT/trace_q1.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ|stacked" $OUT/trace_q1.log ;;
  esac
done
