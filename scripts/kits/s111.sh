#!/usr/bin/env bash
# Kit s111 (built by scripts/gpu_kit.sh s111; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s111_run.sh r a
# Session 75, the layer step as a layer loop runs it (--layer-loop 1, the default: the FFN hc_post
# fused with the next layer's collapse + attn_norm) and a kernel timeline of its graph (--trace 1:
# CUPTI's activity records of one replay, kernels/common/kernel_trace.h; the machine has no nsys):
#   r  the step at 1 / 8 / 64 tokens with the trace
#   a  --layer-loop 0 / 1 alternated twice at 1 / 8 tokens, then --ablate 1 at 1 token
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s111; mkdir -p $K; for t in "$(dirname "$0")"/s111*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
ls /usr/local/cuda/lib64/libcupti* /usr/local/cuda/extras/CUPTI/lib64/libcupti* 2>/dev/null | head -3
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3"
for mode in "$@"; do
  case $mode in
    r)
      eval timeout 200 $B --tokens 1,8,64 --stages 0 --trace 1 > $OUT/trace.log 2>&1
      echo "trace rc $?"
      grep -vE "^\s*$" $OUT/trace.log | tail -170 ;;
    a)
      for round in 1 2; do
        for loop in 0 1; do
          eval timeout 120 $B --tokens 1,8 --stages 0 --layer-loop $loop > $OUT/loop${loop}_$round.log 2>&1
          echo "loop $loop round $round rc $?"
          grep -E "tokens: |Reuse layer|CHECK" $OUT/loop${loop}_$round.log
        done
      done
      eval timeout 200 $B --tokens 1 --stages 1 --ablate 1 > $OUT/ablate.log 2>&1
      echo "ablate rc $?"
      grep -vE "^\s*$" $OUT/ablate.log | tail -60 ;;
  esac
done
