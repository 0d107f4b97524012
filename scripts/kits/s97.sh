#!/usr/bin/env bash
# Kit s97 (built by scripts/gpu_kit.sh s97; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s97_run.sh p w
# Session 70 (kernels/attention/wgmma_ws.md "Session 70"): the consumer-side decode probe
# (cuda/ws_probe.h) and the row form's producer on two warpgroups (FS_WS_ROWS_WIDE, the `_wide`
# binaries: sparse_attn_launch.cu rebuilt with the flag):
#   p  the probe's GPU tests (bit-identical to wgmma-ws, both placements), then
#      bench_sparse_attn --path probe (wgmma-ws, probe-1, probe-2, the row form's default kernel)
#   P  the probe's GPU tests under compute-sanitizer memcheck and synccheck
#   w  every attention GPU test on the wide build, then bench_sparse_attn --path rows on both
#      builds (wgmma-ws-rows: one producer warpgroup, then two) and --path ws on the wide one (the
#      bf16 form's cost of 512 threads and m64n128 halves)
#   W  the wide build's row-form and wgmma-ws tests under memcheck and synccheck
# kit-target: kernels_attention_gpu_test bench_sparse_attn
# kit-variant: kernels_attention_gpu_test wide kernels/attention/cuda/sparse_attn_launch.cu -DFS_WS_ROWS_WIDE=1
# kit-variant: bench_sparse_attn wide kernels/attention/cuda/sparse_attn_launch.cu -DFS_WS_ROWS_WIDE=1
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s97*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    p)
      timeout 60 $K/kernels_attention_gpu_test --gtest_filter='*WsProbe*' > $OUT/probe_test.log 2>&1
      echo "probe tests rc $?"; grep -E "FAILED|PASSED|Failure|Expected|Which|placement" $OUT/probe_test.log | head -20
      timeout 150 $K/bench_sparse_attn --path probe --tokens 128,256,1024,4096 --iters 30 \
        --warmup 5 > $OUT/probe_bench.log 2>&1
      echo "probe bench rc $?"; grep -vE "^$" $OUT/probe_bench.log | tail -22 ;;
    P)
      for tool in memcheck synccheck; do
        timeout 90 $SAN --tool $tool --print-limit 10 $K/kernels_attention_gpu_test --gtest_brief=1 \
          --gtest_filter='*WsProbe*' > $OUT/probe_$tool.log 2>&1
        echo "probe $tool rc $?: $(grep -E 'ERROR SUMMARY' $OUT/probe_$tool.log | tail -1)"
        grep -E "^========= (Invalid|Error|Barrier|Program hit)" $OUT/probe_$tool.log | sort | uniq -c | head -4
      done ;;
    w)
      timeout 200 $K/kernels_attention_gpu_test_wide --gtest_brief=1 > $OUT/wide_test.log 2>&1
      echo "wide tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/wide_test.log | head -20
      for b in bench_sparse_attn bench_sparse_attn_wide; do
        timeout 100 $K/$b --path rows --tokens 1,64,256,1024,4096 --iters 30 --warmup 5 --no-roofs \
          > $OUT/${b}_rows.log 2>&1
        echo "$b rows rc $?"; grep -E "^wgmma" $OUT/${b}_rows.log
      done
      timeout 100 $K/bench_sparse_attn_wide --path ws --tokens 1,64,256,1024,4096 --iters 30 \
        --warmup 5 --no-roofs > $OUT/wide_ws.log 2>&1
      echo "wide ws rc $?"; grep -E "^wgmma" $OUT/wide_ws.log ;;
    W)
      for tool in memcheck synccheck; do
        timeout 120 $SAN --tool $tool --print-limit 10 $K/kernels_attention_gpu_test_wide \
          --gtest_brief=1 --gtest_filter='*RowForm*:*WgmmaWs*:*ManyUnits*' > $OUT/wide_$tool.log 2>&1
        echo "wide $tool rc $?: $(grep -E 'ERROR SUMMARY' $OUT/wide_$tool.log | tail -1)"
        grep -E "^========= (Invalid|Error|Barrier|Program hit)" $OUT/wide_$tool.log | sort | uniq -c | head -4
      done ;;
  esac
done
