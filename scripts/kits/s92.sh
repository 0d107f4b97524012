#!/usr/bin/env bash
# Kit s92 (built by scripts/gpu_kit.sh s92; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s92_run.sh m
#   m  compute-sanitizer memcheck on every GPU test binary but attention's (kit s91 ran it: 0
#      errors) and synccheck on gemm / moe / mhc, each bounded by a timeout (50 s); prints each
#      tool's ERROR SUMMARY and the tests' verdict
# kit-target: kernels_compressor_gpu_test kernels_engram_gpu_test kernels_gemm_gpu_test kernels_indexer_gpu_test kernels_mhc_gpu_test kernels_moe_gpu_test kernels_norm_rope_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s92*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    m)
      # memcheck on all seven (50 s each), synccheck on the ones with named barriers / mbarriers
      for bt in engram:memcheck norm_rope:memcheck mhc:memcheck compressor:memcheck \
                indexer:memcheck gemm:memcheck moe:memcheck gemm:synccheck moe:synccheck mhc:synccheck; do
        b=${bt%%:*}; tool=${bt##*:}
        {
          timeout ${SAN_TIMEOUT:-50} $SAN --tool $tool --print-limit 20 $K/kernels_${b}_gpu_test --gtest_brief=1 > $OUT/san_${b}_$tool.log 2>&1
          rc=$?
          echo "$b $tool rc $rc: $(grep -E 'ERROR SUMMARY' $OUT/san_${b}_$tool.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/san_${b}_$tool.log | tr '\n' ' ')"
          grep -E "^========= (Invalid|Error|Barrier|Uninit|Program hit)" $OUT/san_${b}_$tool.log | sort | uniq -c | head -4
        }
      done ;;
  esac
done
