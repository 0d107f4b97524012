#!/usr/bin/env bash
# Kit s98 (built by scripts/gpu_kit.sh s98; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s98_run.sh y
# Session 70: the sanitizer sweep's remainder (stop 69's note), the small suites first:
#   y  compute-sanitizer synccheck on the Engram, norm / RoPE and indexer GPU tests (each bounded)
# kit-target: kernels_engram_gpu_test kernels_norm_rope_gpu_test kernels_indexer_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s98*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    y)
      for b in engram norm_rope indexer; do
        timeout 70 $SAN --tool synccheck --print-limit 10 $K/kernels_${b}_gpu_test --gtest_brief=1 \
          > $OUT/${b}_sync.log 2>&1
        echo "$b synccheck rc $?: $(grep -E 'ERROR SUMMARY' $OUT/${b}_sync.log | tail -1)"
        grep -E "PASSED|FAILED" $OUT/${b}_sync.log | head -3
        grep -E "^========= (Invalid|Error|Barrier|Program hit)" $OUT/${b}_sync.log | sort | uniq -c | head -4
      done ;;
  esac
done
