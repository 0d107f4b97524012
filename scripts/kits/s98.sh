#!/usr/bin/env bash
# Kit s98 (built by scripts/gpu_kit.sh s98; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s98_run.sh y c g
# Session 70: the sanitizer sweep's remainder (stop 69's note), the small suites first; not run in
# session 70 (its device time ran out):
#   y  compute-sanitizer synccheck on the Engram, norm / RoPE and indexer GPU tests (each bounded)
#   c  synccheck on the compressor and GEMM GPU tests
#   g  memcheck on the GEMM GPU tests kit s93's 200 s bound did not reach: the last 7 in list order
# kit-target: kernels_engram_gpu_test kernels_norm_rope_gpu_test kernels_indexer_gpu_test
# kit-target: kernels_compressor_gpu_test kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s98*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
# synccheck SUITE SECONDS: kernels_SUITE_gpu_test under synccheck, bounded; its summary and errors.
synccheck() {
  timeout "$2" $SAN --tool synccheck --print-limit 10 $K/kernels_$1_gpu_test --gtest_brief=1 \
    > $OUT/$1_sync.log 2>&1
  echo "$1 synccheck rc $?: $(grep -E 'ERROR SUMMARY' $OUT/$1_sync.log | tail -1)"
  grep -E "PASSED|FAILED" $OUT/$1_sync.log | head -3
  grep -E "^========= (Invalid|Error|Barrier|Program hit)" $OUT/$1_sync.log | sort | uniq -c | head -4
}
for mode in "$@"; do
  case $mode in
    y) for b in engram norm_rope indexer; do synccheck $b 70; done ;;
    c) for b in compressor gemm; do synccheck $b 150; done ;;
    g)
      # The test names in list order ("Suite." lines, then indented test names).
      last=$($K/kernels_gemm_gpu_test --gtest_list_tests | awk '/^[^ ]/ { s = $1 } /^  / { print s $1 }' \
        | tail -7 | paste -sd: -)
      echo "gemm memcheck on: $last"
      timeout 240 $SAN --tool memcheck --print-limit 10 $K/kernels_gemm_gpu_test --gtest_brief=1 \
        --gtest_filter="$last" > $OUT/gemm_mem7.log 2>&1
      echo "gemm memcheck rc $?: $(grep -E 'ERROR SUMMARY' $OUT/gemm_mem7.log | tail -1)"
      grep -E "PASSED|FAILED" $OUT/gemm_mem7.log | head -3
      grep -E "^========= (Invalid|Error|Program hit)" $OUT/gemm_mem7.log | sort | uniq -c | head -4 ;;
  esac
done
