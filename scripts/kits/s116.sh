#!/usr/bin/env bash
# Kit s116 (built by scripts/gpu_kit.sh s116; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s116_run.sh g x b d s
# Session 77's defaults (the route by warp reductions, the FFN hc_post in the MoE's combine,
# --float-pdl auto, the combine's batched loads) measured as the step's new figures.
#   g  kernels_mhc_gpu_test: the small-batch mixes with a capped grid (small_batch_ctas);
#      kernels_attention_gpu_test: the combine forms (kWgmmaCombineBatch 8 -> 6 after kit s115)
#   x  bench_decoder_layer_step at 1 / 8 tokens, --mixes-ctas 0 / 40 / 20 alternated twice
#   b  bench_decoder_layer_step at 1 / 8 tokens, --branch-splits 0 / 2 / 4 alternated twice
#   d  bench_decoder_layer_step at 1 / 8 / 64 / 256 tokens with the defaults, twice
#   s  bench_sparse_attn at 1 / 8 tokens: the wgmma-ws pool and the row form
# kit-target: bench_decoder_layer_step bench_sparse_attn kernels_mhc_gpu_test kernels_attention_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s116; mkdir -p $K; for t in "$(dirname "$0")"/s116.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
for mode in "$@"; do
  case $mode in
    g)
      timeout 200 $K/kernels_mhc_gpu_test --gtest_filter='MhcGpuTest.SmallBatch*:MhcGpuTest.HcPre*:MhcGpuTest.Launchers*' \
        > $OUT/mhc_test.log 2>&1
      echo "mhc test rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" $OUT/mhc_test.log | tail -8
      timeout 200 $K/kernels_attention_gpu_test --gtest_filter='SparseAttnGpuTest.CombineForms*:SparseAttnGpuTest.WgmmaWsEqualsWgmma' \
        > $OUT/attn_test.log 2>&1
      echo "attention test rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|differ" $OUT/attn_test.log | tail -8 ;;
    x)
      for round in 1 2; do
        for c in 0 40 20; do
          eval timeout 90 $B --tokens 1,8 --mixes-ctas $c > $OUT/x_${c}_$round.log 2>&1
          echo "mixes-ctas $c round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER" $OUT/x_${c}_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done
      rm -f $OUT/x_*.log ;;  # the device returns 8 files
    b)
      for round in 1 2; do
        for c in 0 2 4; do
          eval timeout 90 $B --tokens 1,8 --branch-splits $c > $OUT/b_${c}_$round.log 2>&1
          echo "branch-splits $c round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER" $OUT/b_${c}_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done
      rm -f $OUT/b_*.log ;;  # the device returns 8 files
    d)
      for round in 1 2; do
        eval timeout 200 $B --tokens 1,8,64,256 > $OUT/d_$round.log 2>&1
        echo "defaults round $round rc $?"
        grep -E "Reuse layer|CHECK|DIFFER|bit-identical" $OUT/d_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
      done ;;
    s)
      timeout 120 $K/bench_sparse_attn --path ws --tokens 1,8 --iters 30 --rope 1 > $OUT/s_ws.log 2>&1
      echo "sparse attn ws rc $?"; grep -vE "^\s*$" $OUT/s_ws.log | tail -8
      timeout 120 $K/bench_sparse_attn --path rows --tokens 1,8 --iters 30 --no-roofs > $OUT/s_rows.log 2>&1
      echo "sparse attn rows rc $?"; grep -vE "^\s*$" $OUT/s_rows.log | tail -8 ;;
  esac
done
