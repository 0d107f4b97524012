#!/usr/bin/env bash
# Kit s114 (built by scripts/gpu_kit.sh s114; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s114_run.sh g a t
# Session 76: the decode-size bf16 Linears as programmatic dependents (FloatLinearCudaParams::
# programmatic; bench --float-pdl): wo_a's swapped-role kernel requests its first ring of weights
# while the attention runs (the attention's combine now lets its dependent start), the gate's
# CUDA-core kernel its first weight chunks while the FFN boundary runs; and kit s113's unrun
# one-root layer-loop form; and the MoE front letting the up ring's CTAs start early
# (--moe-early-ring 1).
#   g  FloatLinearPdlTest (x written late by the kernel ahead) + FloatLinearGpuTest
#   q  the short form: FloatLinearPdlTest, then 1 token in six runs (000 010 011 110 000 011)
#   t  traces at 1 token: --float-pdl 1 --moe-early-ring 1 (layer-loop 0), then --layer-loop 1
#   a  (layer-loop, float-pdl, moe-early-ring) in (0,0,0) (0,1,0) (0,1,1) (1,1,0), twice, at
#      1 / 8 tokens
# kit-target: bench_decoder_layer_step kernels_gemm_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s114; mkdir -p $K; for t in "$(dirname "$0")"/s114*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
for mode in "$@"; do
  case $mode in
    g)
      timeout 300 $K/kernels_gemm_gpu_test --gtest_filter='FloatLinearPdl*:FloatLinearGpuTest.Graph*:FloatLinearGpuTest.ReleasedShapesDecodeBatchSwap' \
        > $OUT/gemm_test.log 2>&1
      echo "gemm test rc $?"
      grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|OK \]|differ|Failure" $OUT/gemm_test.log | tail -30 ;;
    q)  # the short form for a nearly spent budget: the PDL test, then 1 token only
      timeout 60 $K/kernels_gemm_gpu_test --gtest_filter='FloatLinearPdl*' > $OUT/pdl_test.log 2>&1
      echo "pdl test rc $?"
      grep -E "OK \]|FAILED|differ" $OUT/pdl_test.log | tail -5
      for cfg in "0 0 0" "0 1 0" "0 1 1" "1 1 0" "0 0 0" "0 1 1"; do
        set -- $cfg
        eval timeout 40 $B --tokens 1 --layer-loop $1 --float-pdl $2 --moe-early-ring $3 \
          > $OUT/q_$1$2$3.log 2>&1
        echo "loop $1 pdl $2 early-ring $3 rc $?"
        grep -E "Reuse layer|CHECK|DIFFER" $OUT/q_$1$2$3.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
      done ;;
    t)
      eval timeout 90 $B --tokens 1 --trace 1 --layer-loop 0 --float-pdl 1 --moe-early-ring 1 \
        > $OUT/trace_p1.log 2>&1
      echo "trace p1 rc $?"
      grep -vE "^\s*$" $OUT/trace_p1.log | tail -32
      eval timeout 90 $B --tokens 1 --trace 1 --layer-loop 1 --float-pdl 1 > $OUT/trace_l1.log 2>&1
      echo "trace l1 rc $?"
      grep -vE "^\s*$" $OUT/trace_l1.log | tail -32 ;;
    a)
      for round in 1 2; do
        for cfg in "0 0 0" "0 1 0" "0 1 1" "1 1 0"; do
          set -- $cfg
          eval timeout 90 $B --tokens 1,8 --layer-loop $1 --float-pdl $2 --moe-early-ring $3 \
            > $OUT/ab_$1$2$3_$round.log 2>&1
          echo "loop $1 pdl $2 early-ring $3 round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER" $OUT/ab_$1$2$3_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done ;;
  esac
done
