#!/usr/bin/env bash
# Kit s120 (built by scripts/gpu_kit.sh s120; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s120_run.sh f m r
#   f  bench_decoder_layer_step at 1 / 8 tokens, --moe-front-pdl 0 / 1 alternated twice
#   m  bench_decoder_layer_step at 1 / 8 tokens, --ffn-mixes-ctas 0 / 40 / 20 alternated twice
#   r  a trace at 1 token with --moe-front-pdl 1
#   o  session 78's defaults against session 77's for an H200 (old: --float-pdl 0 at 1 token,
#      --boundary-cluster 1 --moe-front-pdl 0; new: --moe-front-pdl 1, which this build has off),
#      alternated twice
# (kit s120m: kernels_moe_gpu_test MoeGpuFrontPdlTest.*, MoeGpuFrontTest.*)
# kit-target: bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s120; mkdir -p $K; for t in "$(dirname "$0")"/s120.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    f)
      for round in 1 2; do
        for c in 0 1; do
          echo "moe-front-pdl $c round $round"; eval timeout 90 $B --tokens 1,8 --moe-front-pdl $c 2>&1 | show
        done
      done ;;
    m)
      for round in 1 2; do
        for c in 0 40 20; do
          echo "ffn-mixes-ctas $c round $round"; eval timeout 90 $B --tokens 1,8 --ffn-mixes-ctas $c 2>&1 | show
        done
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 --moe-front-pdl 1 > $OUT/trace_f1.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_f1.log ;;
    o)
      for round in 1 2; do
        echo "old 1 round $round"; eval timeout 90 $B --tokens 1 --float-pdl 0 --boundary-cluster 1 --moe-front-pdl 0 2>&1 | show
        echo "new 1 round $round"; eval timeout 90 $B --tokens 1 --moe-front-pdl 1 2>&1 | show
        echo "old 8/64 round $round"; eval timeout 120 $B --tokens 8,64 --boundary-cluster 1 --moe-front-pdl 0 2>&1 | show
        echo "new 8/64 round $round"; eval timeout 120 $B --tokens 8,64 --moe-front-pdl 1 2>&1 | show
      done ;;
  esac
done
