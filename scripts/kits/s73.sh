#!/usr/bin/env bash
# Kit s73 (built by scripts/gpu_kit.sh s73; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s73_run.sh MODES
#   t  after the duplicates review moved the quad QDQ into quant::device::QdqFp8UnitOfQuad: the
#      norm/RoPE suite (out_qdq), the shared-expert tests (the QDQ'd SwiGLU) and the gemm bit tests
#      of x_qdq and the kept expansion
# One call: `t` (~1 min).
# kit-target: kernels_norm_rope_gpu_test kernels_moe_gpu_test kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s73*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-t}
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    t) timeout 200 $K/kernels_norm_rope_gpu_test --gtest_brief=1 > $OUT/norm_test.log 2>&1
       echo "norm tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/norm_test.log | head -10
       timeout 200 $K/kernels_moe_gpu_test --gtest_brief=1 --gtest_filter='MoeGpuSharedTest.*' > $OUT/moe_test.log 2>&1
       echo "moe shared tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/moe_test.log | head -10
       timeout 200 $K/kernels_gemm_gpu_test --gtest_brief=1 --gtest_filter='GemmGpuTest.PreQuant*:GemmGpuTest.KeptExp*' > $OUT/gemm_test.log 2>&1
       echo "gemm tests rc $?"; grep -E "FAILED|PASSED|Failure|pre-QDQ|kept" $OUT/gemm_test.log | head -10 ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
