#!/usr/bin/env bash
# Kit s93 (the binaries of kit s92, rebuilt by scripts/gpu_kit.sh s93; runs on the GPU machine):
#   bash build-gpu-bin/s93_run.sh y g
#   y  synccheck on the MoE GPU tests, the test by test (kit s92: 128 "Barrier overflow" errors,
#      the log not fetched): the kernel, PC and test of each error
#   g  memcheck on the GEMM and MoE GPU tests with a longer bound (200 s each; kit s92's 50 s
#      found nothing before timing out): the last test started and any error
# kit-target: kernels_moe_gpu_test kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s93*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    y)
      timeout 90 $SAN --tool synccheck --print-limit 6 $K/kernels_moe_gpu_test > $OUT/moe_sync.log 2>&1
      echo "moe synccheck rc $?"
      grep -E "^\[ RUN|^\[  FAILED|^\[       OK|=========" $OUT/moe_sync.log | grep -B2 -A12 "Barrier" | head -60
      grep -E "ERROR SUMMARY" $OUT/moe_sync.log ;;
    g)
      for b in gemm moe; do
        timeout 200 $SAN --tool memcheck --print-limit 10 $K/kernels_${b}_gpu_test > $OUT/${b}_mem.log 2>&1
        echo "$b memcheck rc $?: $(grep -E 'ERROR SUMMARY' $OUT/${b}_mem.log | tail -1)"
        grep -cE "^\[       OK" $OUT/${b}_mem.log; grep -E "^\[ RUN" $OUT/${b}_mem.log | tail -1
        grep -E "^========= (Invalid|Error|Program hit)" $OUT/${b}_mem.log | sort | uniq -c | head -5
      done ;;
  esac
done
