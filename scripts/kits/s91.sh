#!/usr/bin/env bash
# Kit s91 (built by scripts/gpu_kit.sh s91; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s91_run.sh a l
#   a  every attention GPU test, then SparseAttnRopeGpuTest.ManyUnits* five more times: the fix of
#      the wgmma-ws producer's wait before q's RoPE (cp.async.wait_all: its Q copies are never
#      committed, so wait_group 0 returned with them in flight; kit s90: 29,049 values differ at
#      1,024 tokens with the fused RoPE)
#   l  bench_decoder_layer_step at 256 / 1,024 / 4,096 tokens with the fused RoPE (kit s88 / s90:
#      DIFFER), one timed iteration
#   s  compute-sanitizer: racecheck and synccheck on the many-units test (this build, then kit s90's
#      unfixed binary where build-gpu-bin/s90a.tar.xz (its attention test alone) was carried too: does racecheck see the
#      race?), memcheck on every attention GPU test; each bounded by a timeout
# kit-target: kernels_attention_gpu_test bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s91*.tar.xz; do tar xJf "$t" -C $K; done
OLD=/tmp/kit_s90
if [ -f "$(dirname "$0")/s90a.tar.xz" ]; then mkdir -p $OLD; tar xJf "$(dirname "$0")/s90a.tar.xz" -C $OLD; fi
SAN=/usr/local/cuda/bin/compute-sanitizer
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    a)
      timeout 300 $K/kernels_attention_gpu_test --gtest_brief=1 > $OUT/attn_test.log 2>&1
      echo "attention tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/attn_test.log | head -20
      timeout 120 $K/kernels_attention_gpu_test --gtest_brief=1 --gtest_repeat=5 \
        --gtest_filter='SparseAttnRopeGpuTest.ManyUnits*' > $OUT/attn_repeat.log 2>&1
      echo "many-units x5 rc $?"; grep -cE "0 of [0-9]+ differ" $OUT/attn_repeat.log
      grep -E "[1-9][0-9]* of [0-9]+ differ|FAILED" $OUT/attn_repeat.log | head ;;
    l)
      timeout 300 $K/bench_decoder_layer_step --tokens 256,1024,4096 --reindex-tokens "" \
        --extra-tokens "" --stages 0 --iters 1 --warmup 0 --fuse-rope 1 > $OUT/layer.log 2>&1
      echo "layer step rc $?"; grep -E "tokens:|forms differ|window KV|Reuse layer" $OUT/layer.log ;;
    s)
      f='--gtest_filter=SparseAttnRopeGpuTest.ManyUnits*'
      for tool in racecheck synccheck; do
        timeout 120 $SAN --tool $tool --print-limit 20 $K/kernels_attention_gpu_test --gtest_brief=1 "$f" > $OUT/san_$tool.log 2>&1
        echo "$tool (fixed) rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Error" $OUT/san_$tool.log | head -5
      done
      if [ -x $OLD/kernels_attention_gpu_test ]; then
        timeout 120 $SAN --tool racecheck --print-limit 20 $OLD/kernels_attention_gpu_test --gtest_brief=1 "$f" > $OUT/san_racecheck_old.log 2>&1
        echo "racecheck (kit s90, unfixed) rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Error|differ" $OUT/san_racecheck_old.log | head -8
      fi
      timeout 200 $SAN --tool memcheck --print-limit 20 $K/kernels_attention_gpu_test --gtest_brief=1 > $OUT/san_memcheck.log 2>&1
      echo "memcheck (every attention test) rc $?"; grep -E "ERROR SUMMARY|FAILED|PASSED|Invalid" $OUT/san_memcheck.log | head -8 ;;
  esac
done
