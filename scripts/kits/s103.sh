#!/usr/bin/env bash
# Kit s103 (built by scripts/gpu_kit.sh s103; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s103_run.sh s n m
# Session 73, where the decode-size layer step's time goes (the mHC collapse on wgmma by default):
#   s  bench_decoder_layer_step at 1 / 8 / 64 / 256 tokens, every stage alone and the graph
#   n  Nsight Systems (when the machine has nsys) on the step's graph at 1 and 8 tokens, node-level:
#      each kernel's start and end inside one replay (step{1,8}_trace.csv.xz in $OUT); else ncu's
#      per-kernel durations (serialised)
#   m  bench_moe at 1 / 8 / 64 tokens (the routed layer and its stages)
# kit-target: bench_decoder_layer_step bench_moe
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s103*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    s)
      timeout 240 $K/bench_decoder_layer_step --tokens 1,8,64,256 --reindex-tokens "" \
        --extra-tokens "" --stages 1 --iters 20 --warmup 3 > $OUT/step.log 2>&1
      echo "step rc $?"; grep -vE "^\s*$" $OUT/step.log | tail -80 ;;
    n)
      NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
        /usr/local/cuda/nsight-systems-*/bin/nsys 2>/dev/null | head -1)
      echo "nsys: ${NSYS:-none}"
      for b in 1 8; do
        if [ -n "$NSYS" ]; then
          timeout 150 $NSYS profile --cuda-graph-trace=node -t cuda -o $OUT/step$b -f true \
            $K/bench_decoder_layer_step --tokens $b --reindex-tokens "" --extra-tokens "" \
            --stages 0 --iters 5 --warmup 1 > $OUT/nsys$b.log 2>&1
          echo "nsys $b rc $?"
          timeout 120 $NSYS stats --report cuda_gpu_trace --format csv -o $OUT/step${b} \
            $OUT/step$b.nsys-rep > /dev/null 2>&1
          echo "stats rc $?"; ls $OUT | grep "step$b" | head
          for f in $OUT/step${b}*cuda_gpu_trace*.csv; do [ -f "$f" ] && xz -T0 "$f"; done
          rm -f $OUT/step$b.nsys-rep $OUT/step$b.sqlite
        else
          # Bounded: ncu replays every kernel; unbounded it ran past 200 s (session 73).
          timeout 200 ncu --metrics gpu__time_duration.sum --csv --launch-count 120 $K/bench_decoder_layer_step \
            --tokens $b --reindex-tokens "" --extra-tokens "" --stages 0 --iters 1 --warmup 0 \
            > $OUT/ncu_step$b.csv 2>&1
          echo "ncu $b rc $?"; xz -T0 $OUT/ncu_step$b.csv
        fi
      done ;;
    m)
      timeout 120 $K/bench_moe --tokens 1,8,64 --iters 20 --warmup 3 --shared 0 > $OUT/moe.log 2>&1
      echo "moe rc $?"; grep -vE "^\s*$" $OUT/moe.log | tail -40 ;;
  esac
done
