#!/usr/bin/env bash
# Kit s90 (built by scripts/gpu_kit.sh s90; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s90_run.sh a l
#   a  SparseAttnRopeGpuTest.ManyUnitsPerCtaBodiesAndFormsAgree: wgmma-ws against wgmma and the
#      row form against the bf16 form at 512 / 1,024 tokens (4-8 units per persistent CTA), with
#      and without the fused RoPE
#   l  bench_decoder_layer_step at 256 / 1,024 tokens (so 256 runs on a pool built for 1,024
#      sequences: kit s88's runs also had a 16x larger pool than the earlier <= 256-token ones),
#      one iteration, with and without the fused RoPE: where its two KV forms differ (kit s88:
#      DIFFER at 1,024 and 4,096 tokens) and whether the KV or the kernels differ
# kit-target: kernels_attention_gpu_test bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s90*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in "$@"; do
  case $mode in
    a)
      timeout 240 $K/kernels_attention_gpu_test --gtest_brief=1 --gtest_filter='SparseAttnRopeGpuTest.ManyUnits*' > $OUT/attn_test.log 2>&1
      echo "attention test rc $?"; grep -E "tokens, rope|FAILED|PASSED|Failure" $OUT/attn_test.log | head -20 ;;
    l)
      for rope in 1 0; do
        timeout 200 $K/bench_decoder_layer_step --tokens 256,1024 --reindex-tokens "" --extra-tokens "" --stages 0 --iters 1 --warmup 0 --fuse-rope $rope > $OUT/layer_rope$rope.log 2>&1
        echo "layer step (fuse-rope $rope) rc $?"; grep -E "tokens:|forms differ|window KV" $OUT/layer_rope$rope.log
      done ;;
  esac
done
