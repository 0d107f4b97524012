#!/usr/bin/env bash
# Kit s62 (built by scripts/gpu_kit.sh s62; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s62_run.sh MODES   (letters, run in order)
#   i  the indexer GPU tests (the lean kernel's byte-for-byte checks among them)
#   r  one round of bench_indexer: HEAD (score_rows / score_rows_lean, batch_score /
#      batch_score_lean), c3 / c4 (the whole row-group kernel bounded to 3 / 4 CTAs per SM),
#      l4 (the lean kernel at 4 CTAs per SM)
#   t  every MoE GPU test, timed (the 80-row RS default of session 61)
#   l  Nsight of the lean kernel, 1 row x 2^20 keys (lean.ncu-rep, lean_sass.csv.xz in $OUT; read
#      with `python3 kernels/sass.py stalls CUBIN lean_sass.csv.xz`)
#   p  Nsight of the attention row form (WgmmaRowsKernel) at 256 tokens
#   g  the FP8 Linear's narrower warp-specialised tiles (ws_tile_cols, session 62): their GPU tests
#      (bit-identical to 256-column tiles), then bench_gemm_gpu at 0 / 256 / 128 / 160 / 192 (since
#      session 63 0 is the by-waves width and 256 the old default; session 63 ran it as -1 / 0)
# Calls (each under the 540 s the device allows; device time is short): `igr` first (the lean
# kernel's tests, the narrow GEMM tiles' tests and bench, one indexer round), then `tr` (the MoE
# suite, the second round), then `lp` if time is left.
# kit-target: kernels_indexer_gpu_test bench_indexer kernels_moe_gpu_test bench_moe
# kit-target: bench_sparse_attn kernels_gemm_gpu_test bench_gemm_gpu
# kit-variant: bench_indexer c3 kernels/indexer/cuda/indexer_launch.cu -DFS_INDEXER_I8_MIN_CTAS=3
# kit-variant: bench_indexer c4 kernels/indexer/cuda/indexer_launch.cu -DFS_INDEXER_I8_MIN_CTAS=4
# kit-variant: bench_indexer l4 kernels/indexer/cuda/indexer_launch.cu -DFS_INDEXER_I8_LEAN_MIN_CTAS=4
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s62*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-i}
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    i) $K/kernels_indexer_gpu_test --gtest_brief=1 > $OUT/idx_test.log 2>&1; echo "indexer tests rc $?"
       grep -E "FAILED|PASSED|tests ran" $OUT/idx_test.log | head -30 ;;
    r) for v in head c3 c4 l4; do
         b=$K/bench_indexer; [ $v = head ] || b=$K/bench_indexer_$v
         echo "== $v"; $b --iters 20 --warmup 3 > $OUT/v.log 2>&1; echo "rc $?"
         { echo "== $v"; cat $OUT/v.log; } >> $OUT/idx_round$n.log
         grep -E "^(score_rows|score_rows_lean|batch_score|batch_score_lean) |differ|deferred|mismatch|correctness" $OUT/v.log | head -24
       done; rm -f $OUT/v.log ;;
    t) $K/kernels_moe_gpu_test --gtest_brief=1 > $OUT/moe_test.log 2>&1; echo "moe tests rc $?"
       grep -E "FAILED|PASSED|tests ran" $OUT/moe_test.log | head -30 ;;
    g) $K/kernels_gemm_gpu_test --gtest_brief=1 \
         --gtest_filter='*NarrowTiles*:*WarpSpecialised*:*ExpandedWeights*' > $OUT/gemm_test.log 2>&1
       echo "gemm tests rc $?"; grep -E "FAILED|PASSED|tests ran|narrow ws" $OUT/gemm_test.log | head -20
       $K/bench_gemm_gpu --iters 10 --warmup 2 --m 1024,2048,4096 \
         --shapes wq_a,wkv,shared_w13,idx_wq_b,wo_b --ws-cols 0,256,128,160,192 > $OUT/gemm_bench$n.log 2>&1
       echo "bench rc $?"; grep -E "^roofs" $OUT/gemm_bench$n.log
       awk '$1 ~ /^(wq_a|wkv|shared_w13|idx_wq_b|wo_b)$/ {print $1, $4, $5, $7, $8, $14}' $OUT/gemm_bench$n.log
       # M = 1,024: the plan splits K (fp32 partials); narrower tiles unsplit instead?
       $K/bench_gemm_gpu --iters 10 --warmup 2 --m 1024 --shapes wq_a,shared_w13 --splits 1 \
         --ws-cols 256,128,160,192 > $OUT/v.log 2>&1; cat $OUT/v.log >> $OUT/gemm_bench$n.log
       awk '$1 ~ /^(wq_a|shared_w13)$/ {print $1, $4, $5, $7, $8, $14}' $OUT/v.log; rm -f $OUT/v.log ;;
    l) ncu --set full --import-source yes --kernel-name-base demangled \
         -k 'regex:Int8Kernel<false, false, (\(int\))?1>' --launch-skip 2 --launch-count 1 \
         -o $OUT/lean -f $K/bench_indexer --iters 2 --warmup 1 > $OUT/ncu_lean.log 2>&1
       echo "ncu rc $?"; tail -3 $OUT/ncu_lean.log
       ncu -i $OUT/lean.ncu-rep --page source --csv --print-source sass | xz -T0 > $OUT/lean_sass.csv.xz
       ncu -i $OUT/lean.ncu-rep --page details | grep -E "Duration|Registers|Eligible|Active Warps|Issued Ipc|No Eligible|Theoretical Occ|Achieved Occ|Spill|Local" | head -20 ;;
    p) ncu --set full --import-source yes -k regex:WgmmaRowsKernel --launch-skip 3 --launch-count 1 \
         -o $OUT/rows -f $K/bench_sparse_attn --path rows --tokens 256 --iters 3 --warmup 1 --no-roofs > $OUT/ncu_rows.log 2>&1
       echo "ncu rc $?"; tail -3 $OUT/ncu_rows.log
       ncu -i $OUT/rows.ncu-rep --page source --csv --print-source sass | xz -T0 > $OUT/rows_sass.csv.xz
       ncu -i $OUT/rows.ncu-rep --page details | grep -E "Duration|Registers|Eligible|Active Warps|Issued Ipc|No Eligible|Theoretical Occ|Achieved Occ" | head -20 ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
