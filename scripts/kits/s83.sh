#!/usr/bin/env bash
# Kit s83 (built by scripts/gpu_kit.sh s83; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s83_run.sh f
#   f  bench_gemm_float_gpu: the bf16 Linears whose prefill plan splits K (the MoE gate, the
#      compressor's wkv, the ratio-2 pair) at the plan's splits against unsplit tiles of every
#      width — does the FP8 Linear's unsplit rule (session 67) hold for them?
# kit-target: bench_gemm_float_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s83*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    f)
      for s in 0 1; do
        $K/bench_gemm_float_gpu --iters 10 --warmup 2 --m 1024,2048,4096 --shapes gate,cmp_wkv_r1,cmp_r2_pair --split-k $s --ws-cols 0,128,160,192,256 > $OUT/float_$s.log 2>&1
        echo "float bench split-k $s rc $?"; grep -v "^#" $OUT/float_$s.log | tail -50
      done ;;
  esac
done
