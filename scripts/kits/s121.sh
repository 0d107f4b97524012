#!/usr/bin/env bash
# Kit s121 (built by scripts/gpu_kit.sh s121; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s121_run.sh t d c r
#   t  kernels_gemm_gpu_test: the x_norm cases session 78 built and did not run (the forced
#      stream kernel at 9 / 16 / 40 rows), with the stream-CTA and plan tests
#   d  bench_decoder_layer_step's defaults at 1 / 8 / 64 / 128 / 256 tokens, twice (the
#      re-baseline of this card; the bench also compares q_norm's rows between schedules now)
#   c  the site boundaries' cluster above 64 tokens: --boundary-cluster 1 / 4 / 8 at 128 / 256
#      tokens, alternated twice (the automatic choice stops at 64)
#   r  a trace of the 1-token step with the defaults
#   s  --stack-qkv 0 / 1 (wq_a | wkv as one Linear) at 1 / 8 / 64 tokens, alternated twice, and a
#      trace of the 1-token step with it
#   l  --ffn-mixes-late 0 / 1 (the FFN site's mixes forked after the gate) at 1 / 8 tokens,
#      alternated twice
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s121; mkdir -p $K; for t in "$(dirname "$0")"/s121.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|d2d|cuBLAS" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    t)
      timeout 300 $K/kernels_gemm_gpu_test --gtest_filter='XNorm*:*StreamCtas*:*XNorm*' 2>&1 |
        grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|rel|mismatch" | tail -40 ;;
    d)
      for round in 1 2; do
        echo "defaults round $round"; eval timeout 200 $B --tokens 1,8,64,128,256 2>&1 | show
      done ;;
    c)
      for round in 1 2; do
        for c in 1 4 8; do
          echo "boundary-cluster $c round $round"; eval timeout 150 $B --tokens 128,256 --boundary-cluster $c 2>&1 | show
        done
      done ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 > $OUT/trace_1.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_1.log ;;
    s)
      for round in 1 2; do
        for c in 0 1; do
          echo "stack-qkv $c round $round"; eval timeout 150 $B --tokens 1,8,64 --stack-qkv $c 2>&1 | show
        done
      done
      eval timeout 90 $B --tokens 1 --trace 1 --stack-qkv 1 > $OUT/trace_stack.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ" $OUT/trace_stack.log ;;
    l)
      for round in 1 2; do
        for c in 0 1; do
          echo "ffn-mixes-late $c round $round"; eval timeout 120 $B --tokens 1,8 --ffn-mixes-late $c 2>&1 | show
        done
      done ;;
  esac
done
