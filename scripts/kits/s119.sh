#!/usr/bin/env bash
# Kit s119 (built by scripts/gpu_kit.sh s119; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s119_run.sh c r d
#   c  bench_decoder_layer_step at 1 / 8 tokens, --shared-ctas 0 / 132 / 66 alternated twice
#   r  a trace at 1 token with --shared-ctas 132
#   d  bench_decoder_layer_step with the defaults at 1 / 8 / 64 / 256 tokens, twice
#   o  the previous defaults (1 token: --float-pdl 0 --boundary-cluster 1; 8 / 64:
#      --boundary-cluster 1) against the new ones, alternated twice (for an H200's figures)
# (kit s119m: kernels_moe_gpu_test MoeGpuSharedTest.*)
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s119; mkdir -p $K; for t in "$(dirname "$0")"/s119.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    c)
      for round in 1 2; do
        for c in 0 132 66; do
          echo "shared-ctas $c round $round"; eval timeout 90 $B --tokens 1,8 --shared-ctas $c 2>&1 | show
        done
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 --shared-ctas 132 > $OUT/trace_c132.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_c132.log ;;
    o)
      for round in 1 2; do
        echo "old 1 round $round"; eval timeout 90 $B --tokens 1 --float-pdl 0 --boundary-cluster 1 2>&1 | show
        echo "new 1 round $round"; eval timeout 90 $B --tokens 1 2>&1 | show
        echo "old 8/64 round $round"; eval timeout 120 $B --tokens 8,64 --boundary-cluster 1 2>&1 | show
        echo "new 8/64 round $round"; eval timeout 120 $B --tokens 8,64 2>&1 | show
      done ;;
    d)
      for round in 1 2; do
        echo "defaults round $round"; eval timeout 200 $B --tokens 1,8,64,256 2>&1 | show
      done ;;
  esac
done
