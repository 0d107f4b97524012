#!/usr/bin/env bash
# Kit s95 (built by scripts/gpu_kit.sh s95; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s95_run.sh a m s
# Session 68's last device changes, which that session could not run (its device time was spent):
#   a  every attention GPU test, then SparseAttnRopeGpuTest.WidthZeroIsZeroOnEveryWgmmaBody 10
#      more times (a unit without blocks now loads no Q in WgmmaKernel / WgmmaRowsKernel)
#   m  every MoE GPU test (the ring producer drains its copies before exit)
#   s  compute-sanitizer memcheck, synccheck and initcheck (never run before) on the attention GPU
#      tests (each bounded)
# kit-target: kernels_attention_gpu_test kernels_moe_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s95*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    a)
      timeout 300 $K/kernels_attention_gpu_test --gtest_brief=1 > $OUT/attn_test.log 2>&1
      echo "attention tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/attn_test.log | head -20
      timeout 120 $K/kernels_attention_gpu_test --gtest_brief=1 --gtest_repeat=10 \
        --gtest_filter='SparseAttnRopeGpuTest.WidthZero*' > $OUT/attn_w0.log 2>&1
      echo "width-0 x10 rc $?"; grep -E "FAILED|Failure|nonzero|run [0-9]" $OUT/attn_w0.log | head ;;
    m)
      timeout 120 $K/kernels_moe_gpu_test --gtest_brief=1 > $OUT/moe_test.log 2>&1
      echo "moe tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/moe_test.log | head -10 ;;
    s)
      for tool in memcheck synccheck initcheck; do
        timeout 150 $SAN --tool $tool --print-limit 10 $K/kernels_attention_gpu_test --gtest_brief=1 > $OUT/attn_$tool.log 2>&1
        echo "attention $tool rc $?: $(grep -E 'ERROR SUMMARY' $OUT/attn_$tool.log | tail -1)"
        grep -E "^========= (Invalid|Error|Barrier|Program hit)" $OUT/attn_$tool.log | sort | uniq -c | head -4
      done ;;
  esac
done
