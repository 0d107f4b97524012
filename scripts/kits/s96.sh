#!/usr/bin/env bash
# Kit s96 (built by scripts/gpu_kit.sh s96; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s96_run.sh t a m T s
# Session 69: the transposed-products prototype (kernels/attention/wgmma_ws.md "Session 69"), and
# session 68's last device changes, which that session could not run (kit s95, never run, is folded
# in here):
#   t  the prototype's GPU tests (both variants), then bench_sparse_attn --path tproto (wgmma-ws,
#      the prototype, its SS variant, the row form's default kernel)
#   T  the prototype's GPU tests under compute-sanitizer memcheck and synccheck
#   a  every attention GPU test, then SparseAttnRopeGpuTest.WidthZeroIsZeroOnEveryWgmmaBody 10
#      more times (a unit without blocks now loads no Q in WgmmaKernel / WgmmaRowsKernel)
#   m  every MoE GPU test (the ring producer drains its copies before exit)
#   s  compute-sanitizer memcheck, synccheck and initcheck (never run before) on the attention GPU
#      tests (each bounded)
# Run in session 69: `t` before the SS variant existed, and `a` (all passed). Still to run: `t`
# (the SS variant's row), `m`, `T`, `s`.
# kit-target: kernels_attention_gpu_test kernels_moe_gpu_test bench_sparse_attn
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s96*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 60 $K/kernels_attention_gpu_test --gtest_filter='*TransposedProto*' > $OUT/tproto_test.log 2>&1
      echo "tproto tests rc $?"; grep -E "FAILED|PASSED|Failure|differ|worst|Expected|Which|error" $OUT/tproto_test.log | head -30
      timeout 120 $K/bench_sparse_attn --path tproto --tokens 1,8,64,256,1024,4096 --iters 30 \
        --warmup 5 > $OUT/tproto_bench.log 2>&1
      echo "tproto bench rc $?"; grep -vE "^$" $OUT/tproto_bench.log | tail -24 ;;
    T)
      for tool in memcheck synccheck; do
        timeout 90 $SAN --tool $tool --print-limit 10 $K/kernels_attention_gpu_test --gtest_brief=1 \
          --gtest_filter='*TransposedProto*' > $OUT/tproto_$tool.log 2>&1
        echo "tproto $tool rc $?: $(grep -E 'ERROR SUMMARY' $OUT/tproto_$tool.log | tail -1)"
        grep -E "^========= (Invalid|Error|Barrier|Program hit)" $OUT/tproto_$tool.log | sort | uniq -c | head -4
      done ;;
    a)
      timeout 200 $K/kernels_attention_gpu_test --gtest_brief=1 > $OUT/attn_test.log 2>&1
      echo "attention tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/attn_test.log | head -20
      timeout 60 $K/kernels_attention_gpu_test --gtest_brief=1 --gtest_repeat=10 \
        --gtest_filter='SparseAttnRopeGpuTest.WidthZero*' > $OUT/attn_w0.log 2>&1
      echo "width-0 x10 rc $?"; grep -E "FAILED|Failure|nonzero|run [0-9]" $OUT/attn_w0.log | head ;;
    m)
      timeout 150 $K/kernels_moe_gpu_test --gtest_brief=1 > $OUT/moe_test.log 2>&1
      echo "moe tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/moe_test.log | head -10 ;;
    s)
      for tool in memcheck synccheck initcheck; do
        timeout 150 $SAN --tool $tool --print-limit 10 $K/kernels_attention_gpu_test --gtest_brief=1 > $OUT/attn_$tool.log 2>&1
        echo "attention $tool rc $?: $(grep -E 'ERROR SUMMARY' $OUT/attn_$tool.log | tail -1)"
        grep -E "^========= (Invalid|Error|Barrier|Program hit)" $OUT/attn_$tool.log | sort | uniq -c | head -4
      done ;;
  esac
done
