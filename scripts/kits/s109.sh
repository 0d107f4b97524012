#!/usr/bin/env bash
# Kit s109 (built by scripts/gpu_kit.sh s109; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s109_run.sh t p a
# Session 74, the L2 weight prefetch (kernels/gemm weight_prefetch.h): the layer step's Linears
# asked into the L2 on a forked stream while the kernels before them leave the HBM idle.
#   t  the prefetch's GPU tests (no fault past the ranges, nothing written, graph replays)
#   p  bench_decoder_layer_step at 1 / 8 tokens, budgets 0 / 16 / 32 / 48 MB alternated twice in
#      one process (targets wq, wo_a, gate)
#   a  the targets one at a time at 48 MB (wq_next: the next layer's wq_a / wq_b before the last
#      hc_post), wo_a + wo_b at 24, and wq,wq_next,wo_a,gate at 48, 1 / 8 tokens, against 0
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit_s109; mkdir -p $K; for t in "$(dirname "$0")"/s109*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
step() {  # step LOG ARGS...: the step bench at 1 / 8 tokens, graph rows only
  local log=$1; shift
  timeout 240 $K/bench_decoder_layer_step --tokens 1,8 --reindex-tokens "" --extra-tokens "" \
    --stages 0 --iters 20 --warmup 3 "$@" > $OUT/$log.log 2>&1
  echo "$log rc $?"; grep -E "^Reuse layer|DIFFER|FAILED" $OUT/$log.log
}
for mode in "$@"; do
  case $mode in
    t)
      timeout 120 $K/kernels_gemm_gpu_test --gtest_filter='L2Prefetch*' > $OUT/prefetch_test.log 2>&1
      echo "prefetch tests rc $?"; grep -E "^\[  (PASSED|FAILED) |Failure" $OUT/prefetch_test.log ;;
    p) step budgets --l2-prefetch 0,16,32,48,0,16,32,48 ;;
    a)
      for t in wq wq_next wo_a gate; do
        step target_$t --l2-prefetch 0,48 --l2-prefetch-targets $t
      done
      step target_wo_ab --l2-prefetch 0,24 --l2-prefetch-targets wo_a,wo_b
      step target_all --l2-prefetch 0,48,0,48 --l2-prefetch-targets wq,wq_next,wo_a,gate ;;
  esac
done
