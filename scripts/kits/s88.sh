#!/usr/bin/env bash
# Kit s88 (built by scripts/gpu_kit.sh s88; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s88_run.sh l
#   l  bench_decoder_layer_step at prefill-sized batches (1,024 / 4,096 tokens), each stage timed
#      alone: where a layer's time goes when every Linear runs its prefill plan
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s88*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    l)
      timeout 280 $K/bench_decoder_layer_step --tokens 1024,4096 --reindex-tokens "" --extra-tokens "" --stages 1 --iters 5 --warmup 1 > $OUT/layer.log 2>&1
      echo "layer step rc $?"; tail -80 $OUT/layer.log ;;
  esac
done
