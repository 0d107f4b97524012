#!/usr/bin/env bash
# Kit s117 (built by scripts/gpu_kit.sh s117; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s117_run.sh g x b d s
# Kit s116's modes (session 77's defaults, its two A/B flags) plus session 78's q_norm fused into
# wq_b (LinearCudaParams::x_norm, bench --wqb-qnorm) and the GPU tests it and session 77 added.
#   g  kernels_mhc_gpu_test: the small-batch mixes with a capped grid (small_batch_ctas), the
#      site boundary (session 78's cluster form);
#      kernels_attention_gpu_test: the combine forms (kWgmmaCombineBatch 8 -> 6 after kit s115)
#   x  bench_decoder_layer_step at 1 / 8 tokens, --mixes-ctas 0 / 40 / 20 alternated twice
#   b  bench_decoder_layer_step at 1 / 8 tokens, --branch-splits 0 / 2 / 4 alternated twice
#   d  bench_decoder_layer_step at 1 / 8 / 64 / 256 tokens with the defaults, twice
#   q  bench_decoder_layer_step at 1 / 8 tokens, --wqb-qnorm 0 / 1 alternated twice
#   p  bench_decoder_layer_step at 1 token, --float-pdl 0 / 3 (the gate's CUDA-core kernel alone
#      programmatic) alternated twice
#   c  bench_decoder_layer_step at 1 / 8 tokens, --boundary-cluster 1 / 8 / 4 alternated twice
#   r  a trace at 1 token with --wqb-qnorm 1 --boundary-cluster 8 (the trace file comes back)
# (kit s117g: the gemm GPU tests)
# kit-target: bench_decoder_layer_step kernels_mhc_gpu_test kernels_attention_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s117; mkdir -p $K; for t in "$(dirname "$0")"/s117.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
for mode in "$@"; do
  case $mode in
    g)
      timeout 200 $K/kernels_mhc_gpu_test --gtest_filter='MhcGpuTest.SmallBatch*:MhcGpuTest.HcPre*:MhcGpuTest.Launchers*:HcBoundaryGpuTest.*' \
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
    q)
      for round in 1 2; do
        for c in 0 1; do
          eval timeout 90 $B --tokens 1,8 --wqb-qnorm $c > $OUT/q_${c}_$round.log 2>&1
          echo "wqb-qnorm $c round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER|bit-identical" $OUT/q_${c}_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done
      rm -f $OUT/q_*.log ;;
    p)
      for round in 1 2; do
        for c in 0 3; do
          eval timeout 90 $B --tokens 1 --float-pdl $c > $OUT/p_${c}_$round.log 2>&1
          echo "float-pdl $c round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER|bit-identical" $OUT/p_${c}_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done
      rm -f $OUT/p_*.log ;;
    c)
      for round in 1 2; do
        for c in 1 8 4; do
          eval timeout 90 $B --tokens 1,8 --boundary-cluster $c > $OUT/c_${c}_$round.log 2>&1
          echo "boundary-cluster $c round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER|bit-identical" $OUT/c_${c}_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done
      rm -f $OUT/c_*.log ;;
    r)
      eval timeout 90 $B --tokens 1 --trace 1 --wqb-qnorm 1 --boundary-cluster 8 > $OUT/trace_q1.log 2>&1
      echo "trace wqb-qnorm 1 rc $?"; grep -E "Reuse layer" $OUT/trace_q1.log | head -3 ;;
  esac
done
