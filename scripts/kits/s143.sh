#!/usr/bin/env bash
# Kit s143 (built by scripts/gpu_kit.sh s143; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s143_run.sh o t a n f
# Session 83 (built; every device start after kit s142 was refused): the shared expert forked
# once the MoE's up stage is enqueued (kernels::MoeCudaParams::after_up, the step's --shared-at 1)
# against the default fork at the FFN boundary, and the 1-token attention's kernels.
#   o  the step at 1, 2, 8, 16 tokens: --shared-at 0 / 1, alternated twice (the step checks the
#      overlapped schedule bit-identical to the one-stream one before timing)
#   t  the 1-token kernel timeline (--trace 1) with --shared-at 1, then 0
#   a  bench_sparse_attn --path rows at 1 / 2 / 8 tokens with the fused RoPE
#   n  ncu (SpeedOfLight, WarpStateStats, LaunchStats) on the 1-token row form: the split
#      kernel (WgmmaRowsKernel) against the combine (WgmmaCombineKernel)
#   f  (session 84) the step at 8, 64, 128, 256 tokens with wo_a's FP8 form alone (--wo-a-fp8 7:
#      no bf16 weight; the FP8 kernel to 256 tokens) against the default 1, alternated twice
# The after_up GPU test (MoeGpuSharedTest.CallerForkedSharedExpertWithReadyEvent) is in kit s144
# (kernels_moe_gpu_test does not fit beside these two within 64 MiB).
# kit-target: bench_decoder_layer_step bench_sparse_attn
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s143; mkdir -p $K; tar xJf "$(dirname "$0")"/s143.tar.xz -C $K
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="$K/bench_decoder_layer_step --reindex-tokens '' --extra-tokens '' --iters 20 --warmup 3 --stages 0"
show() { grep -E "Reuse layer|DIFFER|differ|FAILED|rror|d2d" | sed -E 's/, [0-9.]+ MB.*roof/ roof/'; }
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for mode in "$@"; do
  case $mode in
    o)
      for r in 1 2; do
        for a in 0 1; do
          echo "[--shared-at $a]"; eval timeout 90 $B --tokens 1,2,8,16 --shared-at $a 2>&1 | show
        done
      done ;;
    t)
      for a in 1 0; do
        echo "[trace --shared-at $a]"
        eval timeout 90 $B --tokens 1 --shared-at $a --trace 1 2>&1 | grep -v "^ *$" |
          grep -E -A45 "Reuse layer" | head -50
      done ;;
    a)
      timeout 100 $K/bench_sparse_attn --path rows --tokens 1,2,8 --rope 1 --iters 30 --no-roofs 2>&1 |
        tail -8 ;;
    f)
      for r in 1 2; do
        for f in 1 7; do
          echo "[--wo-a-fp8 $f]"; eval timeout 100 $B --tokens 8,64,128,256 --wo-a-fp8 $f 2>&1 | show
        done
      done ;;
    n)
      [ -n "$NCU" ] && timeout 240 $NCU --section SpeedOfLight --section WarpStateStats \
        --section LaunchStats -k regex:'WgmmaRows|WgmmaCombine' $K/bench_sparse_attn --ncu \
        --path rows --tokens 1 --rope 1 2>&1 | grep -v "^==PROF==" |
        grep -E "Wgmma|Duration|Elapsed Cycles|Grid Size|Registers|Stall|Warp Cycles|Issued|Memory Throughput|DRAM" |
        head -50 ;;
  esac
done
