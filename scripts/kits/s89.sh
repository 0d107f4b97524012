#!/usr/bin/env bash
# Kit s89 (built by scripts/gpu_kit.sh s89; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s89_run.sh l
#   l  bench_decoder_layer_step at 256 / 512 / 1,024 tokens, one iteration: where the attention's
#      two KV forms (serving rows, decoded bf16 pool) stop agreeing (kit s88: DIFFER at 1,024 and
#      4,096 tokens)
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s89*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    l)
      timeout 280 $K/bench_decoder_layer_step --tokens 512,1024 --reindex-tokens "" --extra-tokens "" --stages 0 --iters 1 --warmup 0 > $OUT/layer.log 2>&1
      echo "layer step rc $?"; grep -E 'tokens:|forms differ' $OUT/layer.log ;;
  esac
done
