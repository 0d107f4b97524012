#!/usr/bin/env bash
# Kit s108 (built by scripts/gpu_kit.sh s108; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s108_run.sh l
# Session 73: bench_decoder_layer_step with FS_MOE_RING_EARLY_DOWN=1 (kit s106's change).
# Alternate s107 and s108 calls on one warm machine (one binary each: the step binary is ~23 MB
# compressed). The early down CTAs start beside the forked shared expert, where session 28's
# early down GEMM (the register-ring form) lost 6 us at 1 token.
#   l  bench_decoder_layer_step at 1 / 8 / 64 tokens, graph, twice
# kit-target: bench_decoder_layer_step
# kit-variant: bench_decoder_layer_step e1 kernels/moe/cuda/moe_ring_launch.cu -DFS_MOE_RING_EARLY_DOWN=1
# kit-drop: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit_s108; mkdir -p $K; for t in "$(dirname "$0")"/s108*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    l)
      for round in 1 2; do
        timeout 150 $K/bench_decoder_layer_step_e1 --tokens 1,8,64 --reindex-tokens "" \
          --extra-tokens "" --stages 0 --iters 20 --warmup 3 > $OUT/step_e1_$round.log 2>&1
        echo "step_e1 rc $?"; grep -E "^Reuse layer|bit-identical|DIFFER" $OUT/step_e1_$round.log
      done ;;
  esac
done
