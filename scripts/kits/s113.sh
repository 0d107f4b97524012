#!/usr/bin/env bash
# Kit s113 (built by scripts/gpu_kit.sh s113; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s113_run.sh t a
# Session 75: the layer-loop step with one graph root (wq_a; the branches fork after it). Kit
# s112 showed the loop form's several roots starting the main stream ~19 µs late.
#   t  trace of the loop form at 1 / 8 tokens
#   a  --layer-loop 0 / 1 alternated twice at 1 / 8 / 64 tokens
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s113; mkdir -p $K; for t in "$(dirname "$0")"/s113*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
for mode in "$@"; do
  case $mode in
    t)
      eval timeout 90 $B --tokens 1,8 --trace 1 > $OUT/trace_l1.log 2>&1
      echo "trace l1 rc $?"
      grep -vE "^\s*$" $OUT/trace_l1.log | tail -62 ;;
    a)
      for round in 1 2; do
        for loop in 0 1; do
          eval timeout 90 $B --tokens 1,8,64 --layer-loop $loop > $OUT/ab_${loop}_$round.log 2>&1
          echo "loop $loop round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER" $OUT/ab_${loop}_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done ;;
  esac
done
