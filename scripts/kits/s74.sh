#!/usr/bin/env bash
# Kit s74 (built by scripts/gpu_kit.sh s74; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s74_run.sh MODES
#   t  MoeGpuSharedTest (now also the shared expert on an x handed over QDQ'd, x_qdq)
#   p  bench_prefill_linears: a layer's FP8 Linears at prefill with their norms, default / x_qdq /
#      kept expansions / both, outputs compared byte for byte across variants, at 1,024 / 2,048 /
#      4,096 tokens, twice
# One call: `tp` (t ~15 s, p ~1 min).
# kit-target: kernels_moe_gpu_test bench_prefill_linears
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
K=/tmp/kit; mkdir -p $K; for t in "$(dirname "$0")"/s74*.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
modes=${1:-tp}
for ((n = 0; n < ${#modes}; n++)); do
  m=${modes:n:1}; s=$(date +%s)
  case $m in
    t) timeout 200 $K/kernels_moe_gpu_test --gtest_brief=1 --gtest_filter='MoeGpuSharedTest.*' > $OUT/moe_test.log 2>&1
       echo "moe shared tests rc $?"; grep -E "FAILED|PASSED|Failure" $OUT/moe_test.log | head -10 ;;
    p) for r in 1 2; do
         timeout 200 $K/bench_prefill_linears --iters 20 --warmup 3 --tokens 1024,2048,4096 > $OUT/prefill_$r.log 2>&1
         echo "prefill bench run $r rc $?"; cat $OUT/prefill_$r.log | grep -v "^command"
       done ;;
  esac
  echo "mode $m: $(( $(date +%s) - s )) s"
done
