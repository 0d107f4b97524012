#!/usr/bin/env bash
# Kit s100 (built by scripts/gpu_kit.sh s100; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s100_run.sh a m b
# Session 72:
#   a  every attention GPU test (session 71's test split, e5690ac, had not run on a device)
#   m  every mHC GPU test (the wgmma body: WgmmaBodyEqualsMmaSyncBodyBitForBit, the batch
#      invariance cases that now run it)
#   b  bench_mhc (the wgmma body by default at large batches; mixes_mma rows: the mma.sync TMA
#      kernel it replaced), twice
#   s  the mHC GPU tests under compute-sanitizer memcheck and synccheck
# kit-target: kernels_attention_gpu_test kernels_mhc_gpu_test bench_mhc
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s100*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    a)
      timeout 240 $K/kernels_attention_gpu_test --gtest_brief=1 > $OUT/attn_test.log 2>&1
      echo "attention tests rc $?"
      grep -E "^\[  (PASSED|FAILED) |Failure|tests ran" $OUT/attn_test.log | head -20 ;;
    m)
      timeout 240 $K/kernels_mhc_gpu_test > $OUT/mhc_test.log 2>&1
      echo "mhc tests rc $?"
      grep -E "^\[  (PASSED|FAILED) |Failure|wgmma vs|tests ran|OK \]" $OUT/mhc_test.log | head -40 ;;
    b)
      for i in 1 2; do
        timeout 150 $K/bench_mhc --iters 20 --warmup 3 > $OUT/bench_mhc_$i.log 2>&1
        echo "bench_mhc $i rc $?"
        grep -E "^(op|mixes|mixes_prep|mixes_mma)|copy|peaks|FAIL|mismatch" $OUT/bench_mhc_$i.log | head -60
      done ;;
    s)
      for tool in memcheck synccheck; do
        timeout 200 $SAN --tool $tool --print-limit 10 $K/kernels_mhc_gpu_test --gtest_brief=1 \
          --gtest_filter='*Wgmma*:*BatchInvariant*' > $OUT/mhc_$tool.log 2>&1
        echo "mhc $tool rc $?: $(grep -E 'ERROR SUMMARY' $OUT/mhc_$tool.log | tail -1)"
        grep -E "PASSED|FAILED" $OUT/mhc_$tool.log | head -3
        grep -E "^========= (Invalid|Error|Barrier|Program hit)" $OUT/mhc_$tool.log | sort | uniq -c | head -4
      done ;;
  esac
done
