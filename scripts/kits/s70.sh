#!/usr/bin/env bash
# Kit s70 (built by scripts/gpu_kit.sh s70; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s70_run.sh MODES   (letters, run in order)
#   t  the whole GEMM GPU suite, including the fused activation QDQ (LinearCudaParams::ws_fused_qdq: the producer warpgroup QDQs each
#      x stage in shared memory) against the separate pass, bit for bit; the pair bit test
#   f  bench_gemm_gpu with and without the fused QDQ on the prefill shapes at M 2,048 / 4,096
#      (the by-waves width), beside cuBLAS on random operands
#   n  Nsight Compute on the warp-specialised kernel: wq_a's one full wave (M 3,328, 130 tiles
#      at 256 columns) against a partial one (M 640, 25 tiles, --splits 1): the per-step rate
#      (~0.74 µs by session 65's byte estimate of the passes, cuBLAS ~0.70), stall reasons, L2
#      hit rate, throughputs; ncu's Duration is the GEMM alone, which checks that estimate
# One call: `tfn` (t ~15 s, f ~30 s, n ~2 min).
# kit-target: kernels_gemm_gpu_test bench_gemm_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s70*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-tfn}
cols='$1 ~ /^(wq_a|wkv|wq_b|wo_b|shared_w13|shared_w2|idx_wq_b|engram_wkv|main_proj)$/'
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    t) timeout 240 $K/kernels_gemm_gpu_test --gtest_brief=1 > $OUT/fused_test.log 2>&1
       echo "fused tests rc $?"; grep -E "FAILED|PASSED|tests ran|fused QDQ|pair multicast|Failure|rror" $OUT/fused_test.log | head -20 ;;
    f) timeout 150 $K/bench_gemm_gpu --iters 10 --warmup 2 --m 2048,4096 \
         --shapes wq_a,wq_b,wo_b,shared_w13,shared_w2,main_proj --fused-qdq 0,1 --cublas rand \
         > $OUT/fused_bench.log 2>&1
       echo "bench rc $?"; grep -E "^roofs|random operands" $OUT/fused_bench.log
       awk "$cols"' {print $1, $4, $5, $8, $14}' $OUT/fused_bench.log ;;
    n) for v in "full 3328" "part 640"; do
         set -- $v
         ncu --set full --kernel-name-base demangled -k regex:WgmmaWsKernel --launch-skip 2 \
           --launch-count 1 -o $OUT/ws_$1 -f $K/bench_gemm_gpu --iters 2 --warmup 1 --m $2 \
           --shapes wq_a --kernels wgmma-ws --ws-cols 256 --splits 1 > $OUT/ncu_$1.log 2>&1
         echo "ncu $1 rc $?"; tail -2 $OUT/ncu_$1.log
         ncu -i $OUT/ws_$1.ncu-rep --page details | grep -E "Duration|SM Frequency|Throughput|Hit Rate|Eligible|Issued Ipc|Active Warps|No Eligible|Stall|L2 Compression|Bank" | head -40
         ncu -i $OUT/ws_$1.ncu-rep --page raw --csv | xz -T0 > $OUT/ws_$1_raw.csv.xz
       done ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
