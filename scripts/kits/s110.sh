#!/usr/bin/env bash
# Kit s110 (built by scripts/gpu_kit.sh s110; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s110_run.sh r
# Session 74, a kernel timeline of the layer step's graph (bench_decoder_layer_step --trace 1:
# CUPTI's activity records of one replay, kernels/common/kernel_trace.h; the machine has no nsys):
#   r  the step at 1 / 8 / 64 tokens with the trace, twice
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s110; mkdir -p $K; for t in "$(dirname "$0")"/s110*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
ls /usr/local/cuda/lib64/libcupti* /usr/local/cuda/extras/CUPTI/lib64/libcupti* 2>/dev/null | head -3
for mode in "$@"; do
  case $mode in
    r)
      for round in 1 2; do
        timeout 200 $K/bench_decoder_layer_step --tokens 1,8,64 --reindex-tokens "" \
          --extra-tokens "" --stages 0 --iters 20 --warmup 3 --trace 1 > $OUT/trace_$round.log 2>&1
        echo "trace rc $?"
      done
      grep -vE "^\s*$" $OUT/trace_1.log | tail -150 ;;
  esac
done
