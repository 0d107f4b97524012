#!/usr/bin/env bash
# Kit s132 (built by scripts/gpu_kit.sh s132; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s132_run.sh a
#   a  at 1 token: --wo-a-trigger 0 / 1 with --wob-tma 1 (wo_b's ring scheduled during wo_a),
#      and --wo-a-trigger 1 with the stream kernel (--wob-tma 0), alternated twice
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s132; mkdir -p $K; for t in "$(dirname "$0")"/s132.tar.xz; do tar xJf "$t" -C $K; done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    a)
      for round in 1 2; do
        for c in "--wo-a-trigger 0 --wob-tma 1" "--wo-a-trigger 1 --wob-tma 1" "--wo-a-trigger 1 --wob-tma 0" "--wo-a-trigger 0 --wob-tma 0"; do
          echo "[$c] round $round"; eval timeout 60 $B --tokens 1,2 $c 2>&1 | show
        done
      done ;;
  esac
done
