#!/usr/bin/env bash
# Kit s66 (built by scripts/gpu_kit.sh s66; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s66_run.sh MODES   (letters, run in order)
#   g  the whole GEMM GPU suite under the session-64 defaults (the bf16 Linear's by-waves width now
#      runs in every FloatLinear test; kit s64 stopped it at 240 s before them): no timeout short
#      of the call's
#   w  a wave's time at 256 columns, full against partial, and a wave of K-split tiles: wq_a at
#      M = 640 (25 tiles), 3,328 (130: one full wave), 4,096 (160), unsplit and in 4 splits;
#      shared w1|w3 at 384 (27 tiles), 1,792 (126), 2,048 (144), 4,096 (288), unsplit and in 5 / 8
#      splits — whether a partial wave runs its tiles faster than a full one (stream_k_tail.md)
# One call: `wg` (w about 1 minute; g about 5 minutes).
# kit-target: kernels_gemm_gpu_test bench_gemm_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s66*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-wg}
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    g) $K/kernels_gemm_gpu_test --gtest_brief=1 > $OUT/gemm_test.log 2>&1
       echo "gemm tests rc $?"; grep -E "FAILED|PASSED|tests ran|bit-identical" $OUT/gemm_test.log | head -30 ;;
    w) B="$K/bench_gemm_gpu --iters 10 --warmup 2 --kernels wgmma-ws --ws-cols 256"
       $B --m 640,3328,4096 --shapes wq_a --splits 1,4 > $OUT/wave_wq_a.log 2>&1
       $B --m 384,1792,2048,4096 --shapes shared_w13 --splits 1,5,8 > $OUT/wave_w13.log 2>&1
       grep -h -E "^roofs" $OUT/wave_wq_a.log
       awk '$1 ~ /^(wq_a|shared_w13)$/ {print $1, $4, $5, $6, $7, $8, $14}' $OUT/wave_wq_a.log $OUT/wave_w13.log ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
