#!/usr/bin/env bash
# Kit s133 (built by scripts/gpu_kit.sh s133; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s133_run.sh o r
#   o  session 79's final defaults (the stack, wq_b at 256 tiles, wo_b's ring filled during wo_a)
#      against session 78's (--stack-qkv 0 --wqb-ctas 0 --wob-tma 0 --wo-a-trigger 0) at
#      1 / 2 / 4 / 8 / 64 tokens, alternated twice — not yet run together in one process
#   r  traces of the 1- and 4-token steps with the defaults
#   t  kernels_gemm_gpu_test FloatLinearPdlTest.* (session 79's trigger_dependents test, built and
#      not run)
#   m  with the new defaults, --mixes-ctas 0 / 80 / 40 at 1 / 8 tokens, alternated twice (session
#      77 measured 40 / 20 slower beside the separate wkv; the attention mixes now run beside wq_b
#      alone for ~29 µs)
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s133; mkdir -p $K; for t in "$(dirname "$0")"/s133.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    o)
      for round in 1 2; do
        echo "old round $round"; eval timeout 200 $B --tokens 1,2,4,8,64 --stack-qkv 0 --wqb-ctas 0 --wob-tma 0 --wo-a-trigger 0 2>&1 | show
        echo "new round $round"; eval timeout 200 $B --tokens 1,2,4,8,64 2>&1 | show
      done ;;
    r)
      eval timeout 120 $B --tokens 1,4 --trace 1 > $OUT/trace_s133.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ|stacked" $OUT/trace_s133.log ;;
    t)
      timeout 300 $K/kernels_gemm_gpu_test --gtest_filter='FloatLinearPdlTest.*' 2>&1 |
        grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|poison|differ" | tail -20 ;;
    m)
      for round in 1 2; do
        for c in 0 80 40; do
          echo "mixes-ctas $c round $round"; eval timeout 120 $B --tokens 1,8 --mixes-ctas $c 2>&1 | show
        done
      done ;;
  esac
done
