#!/usr/bin/env bash
# Kit s136 (built by scripts/gpu_kit.sh s136; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s136_run.sh t g s
# Session 80, built after the device budget ended: wo_a's CUDA-core kernel in its wide geometry
# (FloatLinearCudaParams::gemv_wide: 8 weight rows per CTA, a warp per row — a quarter of the CTAs
# and of x's re-reads, which at 1 token equal the FP8 codes' 33.5 MB; room for wo_b's ring to be
# scheduled during wo_a again), and wo_b off the ring beside the FP8 wo_a.
#   t  kernels_gemm_gpu_test: FloatLinearFp8GpuTest.* (now with the wide geometry: bf16 and FP8
#      bit-equal, both within the float64 bound) and the released shapes (the default geometry's
#      bits are unchanged)
#   g  bench_gemm_float_gpu --shapes wo_a_fp8,wo_a --m 1,2,4: swap, gemv, gemv-wide
#   s  the step at 1 / 2 tokens: the defaults, --wo-a-wide 1, --wob-tma 0, --wo-a-wide 1 --wob-tma 0,
#      alternated twice; then the 1-token trace with --wo-a-wide 1
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s136; mkdir -p $K; for t in "$(dirname "$0")"/s136.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
for mode in "$@"; do
  case $mode in
    t)
      timeout 300 $K/kernels_gemm_gpu_test \
        --gtest_filter='FloatLinearFp8GpuTest.*:FloatLinearGpuTest.ReleasedShapes:FloatLinearGpuTest.OneHot*' \
        > $OUT/gemm_test.log 2>&1
      echo "gemm tests rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|output|float64" $OUT/gemm_test.log | head -30 ;;
    g)
      timeout 120 $K/bench_gemm_float_gpu --iters 20 --warmup 3 --shapes wo_a_fp8,wo_a --m 1,2,4 \
        --kernels auto,swap,gemv,gemv-wide > $OUT/gemm_bench.log 2>&1
      echo "gemm bench rc $?"; grep -E "^(wo_a|device|shape)" $OUT/gemm_bench.log | head -30 ;;
    s)
      for round in 1 2; do
        for f in "" "--wo-a-wide 1" "--wob-tma 0" "--wo-a-wide 1 --wob-tma 0"; do
          echo "[$f] round $round"; eval timeout 100 $B --tokens 1,2 $f 2>&1 | show
        done
      done
      eval timeout 120 $B --tokens 1 --trace 1 --wo-a-wide 1 > $OUT/trace_s136.log 2>&1
      echo "trace rc $?"; grep -iE "identical|differ|Gemv|Tma|span" $OUT/trace_s136.log ;;
  esac
done
