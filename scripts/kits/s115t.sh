#!/usr/bin/env bash
# Kit s115t (built by scripts/gpu_kit.sh s115t; runs on the GPU machine from the repository root):
#   bash build-gpu-bin/s115t_run.sh g   (the benches: kit s115)
# Session 77: the MoE front's top-k by warp reductions (MoeCudaParams::route_redux; bench_moe
# --route-redux 0|1), the wgmma combine's shared form with its loads batched (same bits as the
# per-thread form: SparseAttnGpuTest.CombineFormsGiveTheSameBits), the PDL control test warmed
# up, --float-pdl 2 (wo_a programmatic, the gate's CUDA-core kernel plain), and the FFN hc_post in
# the MoE's combine (MoeCudaParams::hc_post; bench --moe-hc-post 1).
#   g  the tests: FloatLinearPdl*, MoeGpuFrontTest + the route stage tests, the combine forms and
#      the wgmma-ws / row-form attention tests, mhc's hc_post and boundary tests
# kit-target: kernels_gemm_gpu_test kernels_moe_gpu_test kernels_attention_gpu_test kernels_mhc_gpu_test
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
K=/tmp/kit_s115t; mkdir -p $K; for t in "$(dirname "$0")"/s115t.tar.xz; do tar xJf "$t" -C $K; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for mode in "$@"; do
  case $mode in
    g)
      timeout 120 $K/kernels_gemm_gpu_test --gtest_filter='FloatLinearPdl*' > $OUT/pdl_test.log 2>&1
      echo "pdl test rc $?"; grep -E "^\[  (PASSED|FAILED) |Failure|differ" $OUT/pdl_test.log | tail -6
      timeout 200 $K/kernels_moe_gpu_test --gtest_filter='MoeGpuFrontTest.*:MoeGpuStageTest.Route*:MoeGpuLayerTest.*:MoeGpuHcPost*:MoeGpuSharedTest.*' \
        > $OUT/moe_test.log 2>&1
      echo "moe test rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" $OUT/moe_test.log | tail -12
      timeout 300 $K/kernels_attention_gpu_test --gtest_filter='SparseAttnGpuTest.CombineForms*:SparseAttnGpuTest.WgmmaWsEqualsWgmma:SparseAttnGpuTest.MisalignedWorkspaceGivesTheSameBits:SparseAttnGpuTest.RowFormEqualsDecodedPoolAtReleasedDims:SparseAttnGpuTest.BothTensorPathsAtReleasedDims' \
        > $OUT/attn_test.log 2>&1
      echo "attention test rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|outputs differ" $OUT/attn_test.log | tail -12
      timeout 200 $K/kernels_mhc_gpu_test --gtest_filter='*Post*:*Boundary*' > $OUT/mhc_test.log 2>&1
      echo "mhc test rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" $OUT/mhc_test.log | tail -8 ;;
  esac
done
