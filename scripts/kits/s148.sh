#!/usr/bin/env bash
# Kit s148 (built by scripts/gpu_kit.sh s148; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s148_run.sh t a o
# Session 85: the row kernel's split states merged inside thread-block clusters
# (sparse_attn_wgmma_cluster.cuh; SparseAttnCombineForm::kCluster) against the combine kernel.
#   t  kernels_attention_gpu_test: the row-form tests (cluster merge and combine kernel bit for
#      bit against the bf16 form; the cluster merge taken wherever 2-16 splits), the cluster
#      merge with the fused RoPE, the combine forms
#   T  the whole attention GPU test binary
#   a  bench_sparse_attn --path rows at 1, 2, 4, 8, 9, 12 tokens with the fused RoPE, the
#      cluster merge against the combine kernel (shared), run twice
#   o  the step at 1, 2, 8 tokens: --attn-combine cluster / shared, alternated twice (the step
#      checks the row form bit-identical to the bf16 form before timing)
# Run in session 85 when `auto` still took the cluster merge up to the device's capacity (4
# items on the H100); the modes below now name `cluster` (forced at every token count).
#   n  ncu on the 1-token row form with the cluster merge (one kernel now)
# kit-target: kernels_attention_gpu_test bench_sparse_attn bench_decoder_layer_step
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s148; mkdir -p $K; tar xJf "$(dirname "$0")"/s148.tar.xz -C $K
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|rror|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for mode in "$@"; do
  case $mode in
    t)
      timeout 300 $K/kernels_attention_gpu_test \
        --gtest_filter='*RowForm*:*Combine*:*Cluster*' > $OUT/attn_rows.log 2>&1
      echo "row-form tests rc $?"
      grep -E "^\[( +OK|  FAILED|  PASSED|==========)|Failure|Expected|differ|splits" \
        $OUT/attn_rows.log | grep -v " 0 of " | head -60 ;;
    T)
      timeout 280 $K/kernels_attention_gpu_test > $OUT/attn_all.log 2>&1
      echo "attention tests rc $?"
      grep -E "^\[(  FAILED|  PASSED|==========)|Failure" $OUT/attn_all.log | head -20 ;;
    a)
      for r in 1 2; do
        timeout 120 $K/bench_sparse_attn --path rows --tokens 1,2,4,8,9,12 --rope 1 --iters 30 \
          --no-roofs --combine cluster,shared 2>&1 | grep -E "^(wgmma|path|device)" | head -40
      done ;;
    o)
      for r in 1 2; do
        for c in cluster shared; do
          echo "[--attn-combine $c]"; eval timeout 90 $B --tokens 1,2,8 --attn-combine $c 2>&1 | show
        done
      done ;;
    n)
      [ -n "$NCU" ] && timeout 200 $NCU --section SpeedOfLight --section WarpStateStats \
        --section LaunchStats -k regex:'WgmmaRows|WgmmaCombine' $K/bench_sparse_attn --ncu \
        --path rows --tokens 1 --rope 1 --combine cluster,shared 2>&1 | grep -v "^==PROF==" |
        grep -E "Wgmma|Duration|Elapsed Cycles|Grid Size|Cluster|Registers|Warp Cycles|Memory Throughput" |
        head -50 ;;
  esac
done
