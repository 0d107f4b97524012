#!/usr/bin/env bash
# Kit s71 (built by scripts/gpu_kit.sh s71; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s71_run.sh MODES   (letters, run in order)
#   t  GPU tests: the pre-QDQ'd x (LinearCudaParams::x_qdq) and the kept bf16 expansion
#      (Fp8LinearDevice::expanded) bit tests, the other warp-specialised GEMM tests that kit s70's
#      timed-out suite run did not reach (FloatLinear's, TmaMap), and the whole norm/RoPE suite
#      (RmsNormParams::out_qdq against QdqCpu of the norm's own output)
#   f  bench_gemm_gpu: pre-QDQ'd x and kept expansion, each and both, on the prefill shapes at
#      M 2,048 / 4,096, beside cuBLAS on random operands
#   b  bench_norm_rope: the norm with its QDQ'd output against the norm and the QDQ pass
#   s  the shared expert: MoeGpuSharedTest (the SwiGLU's QDQ'd form, the same bytes with w2's
#      pass skipped); its bench (bench_moe with and without FS_MOE_SHARED_SWIGLU_QDQ) does not fit
#      the 64 MiB beside these binaries: kit s72
# One call: `tfbs` (t ~2 min, f ~40 s, b ~20 s, s ~1 min).
# kit-target: kernels_gemm_gpu_test bench_gemm_gpu kernels_norm_rope_gpu_test bench_norm_rope kernels_moe_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s71*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-tfbs}
cols='$1 ~ /^(wq_a|wkv|wq_b|wo_b|shared_w13|shared_w2|idx_wq_b|engram_wkv|main_proj)$/'
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    t) timeout 300 $K/kernels_gemm_gpu_test --gtest_brief=1 --gtest_filter='GemmGpuTest.PreQuant*:GemmGpuTest.KeptExp*:FloatLinearGpuTest.WarpSpecialised*:FloatLinearGpuTest.Graph*:FloatLinearGpuTest.ZeroRows*:TmaMapTest.*' > $OUT/gemm_test.log 2>&1
       echo "gemm tests rc $?"; grep -E "FAILED|tests ran|PASSED|pre-QDQ|kept expansion|Failure" $OUT/gemm_test.log | head -20
       timeout 200 $K/kernels_norm_rope_gpu_test --gtest_brief=1 > $OUT/norm_test.log 2>&1
       echo "norm tests rc $?"; grep -E "FAILED|tests ran|PASSED|Failure|out_qdq" $OUT/norm_test.log | head -20 ;;
    f) timeout 200 $K/bench_gemm_gpu --iters 10 --warmup 2 --m 2048,4096 \
         --shapes wq_a,wq_b,wo_b,shared_w13,shared_w2,main_proj,engram_wkv --x-qdq 0,1 \
         --kept-expansion 0,1 --cublas rand > $OUT/gemm_bench.log 2>&1
       echo "bench rc $?"; grep -E "^roofs|random operands" $OUT/gemm_bench.log
       awk "$cols"' {print $1, $4, $5, $8, $14}' $OUT/gemm_bench.log ;;
    b) timeout 120 $K/bench_norm_rope --iters 30 --warmup 5 > $OUT/norm_bench.log 2>&1
       echo "norm bench rc $?"; grep -E "rms_norm|copy|MISMATCH" $OUT/norm_bench.log | head -30 ;;
    s) timeout 200 $K/kernels_moe_gpu_test --gtest_brief=1 --gtest_filter='MoeGpuSharedTest.*' > $OUT/moe_test.log 2>&1
       echo "moe shared tests rc $?"; grep -E "FAILED|tests ran|PASSED|Failure" $OUT/moe_test.log | head -20 ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
