#!/usr/bin/env bash
# Kit s112 (built by scripts/gpu_kit.sh s112; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s112_run.sh t a
# Session 75: where the layer step forks its mHC mixes. Kit s111's trace showed the small-batch
# mixes (a cooperative launch of 160 blocks) taking every SM for 12-18 µs beside wkv / wq_a and
# beside the gate / MoE front; --mixes-late 1 forks the attention site's mixes after wq_b and the
# FFN site's after the gate.
#   t  traces: --layer-loop 0 at 1 token; --layer-loop 1 --mixes-late 1 at 1 / 8 tokens
#   a  (layer-loop, mixes-late) in (0,0) (1,0) (1,1) (0,1), twice, at 1 / 8 tokens
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s112; mkdir -p $K; for t in "$(dirname "$0")"/s112*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
for mode in "$@"; do
  case $mode in
    t)
      eval timeout 90 $B --tokens 1 --trace 1 --layer-loop 0 > $OUT/trace_l0.log 2>&1
      echo "trace l0 rc $?"
      grep -vE "^\s*$" $OUT/trace_l0.log | tail -32
      eval timeout 90 $B --tokens 1,8 --trace 1 --layer-loop 1 --mixes-late 1 > $OUT/trace_l1m1.log 2>&1
      echo "trace l1m1 rc $?"
      grep -vE "^\s*$" $OUT/trace_l1m1.log | tail -62 ;;
    a)
      for round in 1 2; do
        for cfg in "0 0" "1 0" "1 1" "0 1"; do
          set -- $cfg
          eval timeout 70 $B --tokens 1,8 --layer-loop $1 --mixes-late $2 > $OUT/ab_$1$2_$round.log 2>&1
          echo "loop $1 late $2 round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER" $OUT/ab_$1$2_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done ;;
  esac
done
