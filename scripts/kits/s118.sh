#!/usr/bin/env bash
# Kit s118 (built by scripts/gpu_kit.sh s118; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s118_run.sh n s r
# Session 78's defaults (--float-pdl auto = 3 below 8 tokens, the site boundaries as clusters of
# 8 CTAs per token up to 64 tokens) against the previous ones, and the forked shared expert with
# forced K splits.
#   (kit s118m: kernels_moe_gpu_test MoeGpuSharedTest.*, the shared expert's forced splits)
#   n  bench_decoder_layer_step: the new defaults against the old ones (1 token: --float-pdl 0
#      --boundary-cluster 1; 8 / 64 / 256: --boundary-cluster 1), alternated twice
#   s  bench_decoder_layer_step at 1 / 8 tokens, --shared-splits 0 / 1 / 2 alternated twice
#   r  a trace at 1 token with --shared-splits 1
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s118; mkdir -p $K; for t in "$(dirname "$0")"/s118.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    n)
      for round in 1 2; do
        echo "old 1 token round $round"; eval timeout 90 $B --tokens 1 --float-pdl 0 --boundary-cluster 1 2>&1 | show
        echo "new 1 token round $round"; eval timeout 90 $B --tokens 1 2>&1 | show
        echo "old 8/64/256 round $round"; eval timeout 200 $B --tokens 8,64,256 --boundary-cluster 1 2>&1 | show
        echo "new 8/64/256 round $round"; eval timeout 200 $B --tokens 8,64,256 2>&1 | show
      done ;;
    s)
      for round in 1 2; do
        for c in 0 1 2; do
          echo "shared-splits $c round $round"; eval timeout 90 $B --tokens 1,8 --shared-splits $c 2>&1 | show
        done
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 --shared-splits 1 > $OUT/trace_s1.log 2>&1
      echo "trace rc $?" ;;
  esac
done
