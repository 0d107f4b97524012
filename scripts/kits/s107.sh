#!/usr/bin/env bash
# Kit s107 (built by scripts/gpu_kit.sh s107; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s107_run.sh l
# Session 73: HEAD's bench_decoder_layer_step (the baseline of s108).
# Alternate s107 and s108 calls on one warm machine (one binary each: the step binary is ~23 MB
# compressed). The early down CTAs start beside the forked shared expert, where session 28's
# early down GEMM (the register-ring form) lost 6 us at 1 token.
#   l  bench_decoder_layer_step at 1 / 8 / 64 tokens, graph, twice
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit_s107; mkdir -p $K; for t in "$(dirname "$0")"/s107*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    l)
      for round in 1 2; do
        timeout 150 $K/bench_decoder_layer_step --tokens 1,8,64 --reindex-tokens "" \
          --extra-tokens "" --stages 0 --iters 20 --warmup 3 > $OUT/step_$round.log 2>&1
        echo "step rc $?"; grep -E "^Reuse layer|bit-identical|DIFFER" $OUT/step_$round.log
      done ;;
  esac
done
