#!/usr/bin/env bash
# Kit s139 (built by scripts/gpu_kit.sh s139; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s139_run.sh r
# Session 81: E4m3PairScaled (kernels/gemm/cuda/e4m3_bf16_decode.cuh) in three instructions per
# code pair instead of four, the same bits (kit s137 ran the exact-decode tests). The FP8 Linear's
# register-sourced kernel is bound by its decode issue (rs_kernel.md): bench_gemm_gpu at decode
# batches, the new decode against the old one (bench_gemm_gpu_four: linear_fp8_launch.cu built
# with -DFS_E4M3_DECODE_FOUR_OPS), alternated twice.
# kit-target: bench_gemm_gpu
# kit-variant: bench_gemm_gpu four kernels/gemm/cuda/linear_fp8_launch.cu -DFS_E4M3_DECODE_FOUR_OPS
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit_s139; mkdir -p $K; for t in "$(dirname "$0")"/s139.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    r)
      for round in 1 2; do
        for b in bench_gemm_gpu bench_gemm_gpu_four; do
          echo "[$b] round $round"
          timeout 150 $K/$b --iters 20 --warmup 3 --m 16,64,128,256,512 --kernels auto --shapes wq_b,wo_b,engram_wkv,idx_wq_b \
            --peak-tflops 893 2>&1 | grep -E "^(wq_b|wo_b|engram_wkv|idx_wq_b|shape|device)" | head -30
        done
      done ;;
  esac
done
