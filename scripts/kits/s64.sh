#!/usr/bin/env bash
# Kit s64 (built by scripts/gpu_kit.sh s64; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s64_run.sh MODES   (letters, run in order)
#   g  every FP8 / bf16 Linear GPU test (the stream-K tail's bits against the split / whole plans;
#      ws_tile_cols 0 is the by-waves width; the bf16 Linear's narrow tiles against its 256-column
#      tiles), then bench_gemm_gpu at the default width (0) against the old 256 and the stream-K
#      tail over the prefill shapes, and bench_gemm_float_gpu at 256 (its default) against 0 / 128
#      / 160 / 192 (the gate's N 384, the compressors' 512)
#   i  the indexer GPU tests (the lean kernel's assertion on deferred tiles dropped)
#   p  Nsight of the attention row form (WgmmaRowsKernel) at 256 tokens (kit s62's `p`, never run)
# One call: `igp` (about 2 minutes of run time plus the machine's start).
# kit-target: kernels_gemm_gpu_test bench_gemm_gpu bench_gemm_float_gpu kernels_indexer_gpu_test
# kit-target: bench_sparse_attn
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s64*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-g}
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    g) timeout 240 $K/kernels_gemm_gpu_test --gtest_brief=1 > $OUT/gemm_test.log 2>&1
       echo "gemm tests rc $?"; grep -E "FAILED|PASSED|tests ran|narrow ws|stream-K tail" $OUT/gemm_test.log | head -20
       timeout 150 $K/bench_gemm_gpu --iters 10 --warmup 2 --m 1024,2048,4096 \
         --shapes wq_a,wkv,wq_b,wo_b,shared_w13,shared_w2,idx_wq_b,engram_wkv --ws-cols 0,256 \
         --stream-k-tail 0,1 > $OUT/gemm_bench$n.log 2>&1
       echo "bench rc $?"; grep -E "^roofs" $OUT/gemm_bench$n.log
       awk '$1 ~ /^(wq_a|wkv|wq_b|wo_b|shared_w13|shared_w2|idx_wq_b|engram_wkv)$/ {print $1, $4, $5, $7, $8, $14}' $OUT/gemm_bench$n.log
       $K/bench_gemm_float_gpu --iters 10 --warmup 2 --m 1024,2048,4096 \
         --shapes gate,cmp_r2_pair,cmp_wkv_r1,wo_a --ws-cols 256,0,128,160,192 > $OUT/float_bench$n.log 2>&1
       echo "float bench rc $?"
       awk '$1 ~ /^(gate|cmp_r2_pair|cmp_wkv_r1|wo_a)$/ {print $1, $6, $7, $9, $10, $16}' $OUT/float_bench$n.log ;;
    i) $K/kernels_indexer_gpu_test --gtest_brief=1 > $OUT/idx_test.log 2>&1; echo "indexer tests rc $?"
       grep -E "FAILED|PASSED|tests ran" $OUT/idx_test.log | head -30 ;;
    p) ncu --set full --import-source yes -k regex:WgmmaRowsKernel --launch-skip 3 --launch-count 1 \
         -o $OUT/rows -f $K/bench_sparse_attn --path rows --tokens 256 --iters 3 --warmup 1 --no-roofs > $OUT/ncu_rows.log 2>&1
       echo "ncu rc $?"; tail -3 $OUT/ncu_rows.log
       ncu -i $OUT/rows.ncu-rep --page source --csv --print-source sass | xz -T0 > $OUT/rows_sass.csv.xz
       ncu -i $OUT/rows.ncu-rep --page details | grep -E "Duration|Registers|Eligible|Active Warps|Issued Ipc|No Eligible|Theoretical Occ|Achieved Occ" | head -20 ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
