#!/usr/bin/env bash
# Kit s99 (built by scripts/gpu_kit.sh s99; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s99_run.sh t b s
# Session 71 (kernels/attention/README.md "Decode once"): the row form's decode-once variant
# (SparseAttnKvRows::decoded: every serving row decoded once into a bf16 scratch, then the bf16
# pool's default body):
#   t  every attention GPU test (the decode-once checks: RowFormDecodesOnceWhereItPays, the
#      decode-once runs in every ExpectRowForm case and in ManyUnitsPerCtaBodiesAndFormsAgree)
#   b  bench_sparse_attn --path once: one sequence's shared window over 65,536 and 262,144
#      compressed rows, the decode batch's distinct windows, and the fused RoPE at 4,096 tokens
#   s  the decode-once tests under compute-sanitizer memcheck and synccheck
#   q  the decode-once tests and the row-form tests at the released dims only (after the review)
# kit-target: kernels_attention_gpu_test bench_sparse_attn
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s99*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    t)
      timeout 240 $K/kernels_attention_gpu_test > $OUT/attn_test.log 2>&1
      echo "attention tests rc $?"
      grep -E "^\[  (PASSED|FAILED) |Failure|decode once|decode-once" $OUT/attn_test.log | head -40 ;;
    b)
      timeout 150 $K/bench_sparse_attn --path once --tokens 64,256,512,1024,2048,4096 --iters 20 \
        --warmup 3 > $OUT/once_65k.log 2>&1
      echo "once 65k rc $?"; grep -vE "^$" $OUT/once_65k.log | tail -28
      timeout 120 $K/bench_sparse_attn --path once --compressed 262144 --tokens 1024,4096 \
        --iters 10 --warmup 2 > $OUT/once_262k.log 2>&1
      echo "once 262k rc $?"; grep -E "^(wgmma|once)|decode once|rule|correct|roofs" $OUT/once_262k.log
      timeout 90 $K/bench_sparse_attn --path once --windows distinct --tokens 64,256 --iters 20 \
        --warmup 3 --no-roofs > $OUT/once_distinct.log 2>&1
      echo "once distinct rc $?"; grep -E "^(wgmma|once)|decode once|rule|correct" $OUT/once_distinct.log
      timeout 90 $K/bench_sparse_attn --path once --rope 1 --tokens 1024,4096 --iters 10 \
        --warmup 2 --no-roofs > $OUT/once_rope.log 2>&1
      echo "once rope rc $?"; grep -E "^(wgmma|once)|decode once|rule|correct" $OUT/once_rope.log ;;
    q)
      timeout 150 $K/kernels_attention_gpu_test --gtest_brief=1 --gtest_filter='*DecodesOnce*:*ManyUnits*:*RowFormFallbacks*:*RowFormEqualsDecodedPoolAtReleasedDims*:*LauncherErrors*' \
        > $OUT/attn_quick.log 2>&1
      echo "quick attention tests rc $?"
      grep -E "^\[  (PASSED|FAILED) |Failure|decode once|Expected|Which" $OUT/attn_quick.log | head -30 ;;
    s)
      for tool in memcheck synccheck; do
        timeout 150 $SAN --tool $tool --print-limit 10 $K/kernels_attention_gpu_test --gtest_brief=1 \
          --gtest_filter='*DecodesOnce*:*ManyUnits*:*RowFormShapes*' > $OUT/once_$tool.log 2>&1
        echo "once $tool rc $?: $(grep -E 'ERROR SUMMARY' $OUT/once_$tool.log | tail -1)"
        grep -E "PASSED|FAILED" $OUT/once_$tool.log | head -3
        grep -E "^========= (Invalid|Error|Barrier|Program hit)" $OUT/once_$tool.log | sort | uniq -c | head -4
      done ;;
  esac
done
