#!/usr/bin/env bash
# Kit s69 (built by scripts/gpu_kit.sh s69; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s69_run.sh MODES   (letters, run in order)
#   c  cuBLAS's bf16 GEMM of each prefill shape beside the FP8 Linear on expanded weights (the
#      by-waves width and 256): what a vendor GEMM makes of the same tiles and waves
#   p  the SM clock and power while one shape runs for seconds: wq_a at M 3,328 (one full wave of
#      130 tiles at 256 columns), at M 640 (25 tiles), and cuBLAS on wq_a at 3,328 on random and
#      on constant operands, and wq_a at 3,328 on constant operands (--const-data 1) — whether a
#      full wave is slower per tile because the clock drops (kit s68: ~1.06 against ~0.69 µs per
#      K step)
# One call: `cp` (c ~1 min, p ~1 min).
# kit-target: bench_gemm_gpu
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s69*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader
modes=${1:-cp}
cols='$1 ~ /^(wq_a|wkv|wq_b|wo_b|shared_w13|shared_w2|idx_wq_b|engram_wkv|main_proj)$/'
# The clocks and power while "$@" runs: 20 ms samples, their 10 / 50 / 90 % quantiles.
sampled() {
  local name=$1; shift
  nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv,noheader,nounits \
    -lms 20 > $OUT/smi_$name.csv 2>&1 &
  local smi=$!
  "$@" > $OUT/run_$name.log 2>&1
  kill $smi; wait $smi 2>/dev/null
  awk "$cols"' {print "  ", $1, $4, $5, $8}' $OUT/run_$name.log
  for f in 1 2; do
    sort -t, -k$f -g $OUT/smi_$name.csv | awk -F, -v f=$f -v n=$name '{v[NR]=$f} END {
      printf "%s %s: n %d, q10 %s, q50 %s, q90 %s\n", n, (f==1?"SM MHz":"power W"), NR, v[int(NR*0.1)+1], v[int(NR*0.5)+1], v[int(NR*0.9)+1]}'
  done
  cut -d, -f3 $OUT/smi_$name.csv | sort | uniq -c | sort -rn | head -3
}
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    c) timeout 200 $K/bench_gemm_gpu --iters 10 --warmup 2 --m 640,1024,2048,3328,4096 \
         --shapes wq_a,wq_b,wo_b,shared_w13,shared_w2,idx_wq_b,engram_wkv,main_proj \
         --kernels wgmma-ws --ws-cols 0,256 --cublas 1 > $OUT/cublas.log 2>&1
       echo "bench rc $?"; grep -E "^roofs" $OUT/cublas.log
       awk "$cols"' {print $1, $4, $5, $8, $14}' $OUT/cublas.log ;;
    p) B="$K/bench_gemm_gpu --warmup 20 --shapes wq_a --m"
       sampled full timeout 60 $B 3328 --iters 40000 --kernels wgmma-ws --ws-cols 256
       sampled full_const timeout 60 $B 3328 --iters 40000 --kernels wgmma-ws --ws-cols 256 --const-data 1
       sampled part timeout 60 $B 640 --iters 40000 --kernels wgmma-ws --ws-cols 256
       sampled cublas_rand timeout 60 $B 3328 --iters 40000 --kernels none --cublas rand
       sampled cublas_const timeout 60 $B 3328 --iters 40000 --kernels none --cublas const ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
