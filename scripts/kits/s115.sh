#!/usr/bin/env bash
# Kit s115 (built by scripts/gpu_kit.sh s115; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s115_run.sh m h a t   (the tests, g: kit s115t)
# Session 77: the MoE front's top-k by warp reductions (MoeCudaParams::route_redux; bench_moe
# --route-redux 0|1), the wgmma combine's shared form with its loads batched (same bits as the
# per-thread form: SparseAttnGpuTest.CombineFormsGiveTheSameBits), the PDL control test warmed
# up, --float-pdl 2 (wo_a programmatic, the gate's CUDA-core kernel plain), and the FFN hc_post in
# the MoE's combine (MoeCudaParams::hc_post; bench --moe-hc-post 1).
#   m  bench_moe at 1 / 2 / 4 / 8 tokens, --route-redux 1 / 0 alternated twice
#   a  bench_decoder_layer_step at 1 / 8 tokens, --float-pdl 0 / 1 / 2 alternated twice
#   h  bench_decoder_layer_step at 1 / 8 tokens, --moe-hc-post 0 / 1 alternated twice
#   t  traces at 1 token: --moe-hc-post 0, then 1
# kit-target: bench_decoder_layer_step bench_moe
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s115; mkdir -p $K; for t in "$(dirname "$0")"/s115.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
for mode in "$@"; do
  case $mode in
    m)
      for round in 1 2; do
        for r in 1 0; do
          timeout 120 $K/bench_moe --tokens 1,2,4,8 --shared 0 --iters 30 --warmup 3 --route-redux $r \
            > $OUT/moe_r${r}_$round.log 2>&1
          echo "bench_moe route-redux $r round $round rc $?"
          grep -A5 "tokens experts" $OUT/moe_r${r}_$round.log | cut -c1-140
        done
      done ;;
    h)
      for round in 1 2; do
        for f in 0 1; do
          eval timeout 90 $B --tokens 1,8 --moe-hc-post $f > $OUT/hc_${f}_$round.log 2>&1
          echo "moe-hc-post $f round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER" $OUT/hc_${f}_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done ;;
    a)
      for round in 1 2; do
        for f in 0 1 2; do
          eval timeout 90 $B --tokens 1,8 --float-pdl $f > $OUT/ab_f${f}_$round.log 2>&1
          echo "float-pdl $f round $round rc $?"
          grep -E "Reuse layer|CHECK|DIFFER" $OUT/ab_f${f}_$round.log | sed -E 's/, [0-9.]+ MB.*roof/ roof/'
        done
      done ;;
    t)
      for f in 0 1; do
        eval timeout 90 $B --tokens 1 --trace 1 --moe-hc-post $f > $OUT/trace_h$f.log 2>&1
        echo "trace moe-hc-post $f rc $?"
        grep -vE "^\s*$" $OUT/trace_h$f.log | tail -30
      done ;;
  esac
done
