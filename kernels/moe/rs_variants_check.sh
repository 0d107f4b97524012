#!/usr/bin/env bash
# kernels_moe_rs_variants_test: the register-sourced MoE GEMM (cuda/moe_wgmma_rs_launch.cu)
# compiled for sm_90a in the landed configuration and with each of its experiment switches
# (FS_MOE_RS_* in cuda/moe_wgmma_rs_stage.cuh). ptxas must report no spill in the GEMM's kernels
# and no "Potential Performance Loss" note (C75xx: wgmma serialised for lack of registers, waits
# injected) anywhere in the translation unit — neither shows in a normal build, and the switches
# are off in it, so without this they could stop compiling clean unnoticed while they wait for
# the H200 (kernels/moe/wgmma_rs_gemm.md "Session 53").
# Usage: rs_variants_check.sh NVCC SOURCE_DIR BINARY_DIR
set -uo pipefail
nvcc=$1 src=$2 bin=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

check() {
  local name=$1
  shift
  local log=$tmp/$name.log
  if ! "$nvcc" -I"$src" -I"$bin" -O3 -DNDEBUG -arch=sm_90a -std=c++17 --expt-relaxed-constexpr \
      -Werror=all-warnings "$@" -x cu -cubin -Xptxas -v \
      "$src/kernels/moe/cuda/moe_wgmma_rs_launch.cu" -o "$tmp/$name.cubin" > "$log" 2>&1; then
    echo "FAIL $name: does not compile"
    tail -20 "$log"
    failed=1
    return
  fi
  local notes spills
  notes=$(grep "C75" "$log")
  # ptxas prints each kernel's "Compiling entry function" line before its spill counts.
  spills=$(awk '/Compiling entry function/ { kernel = $0 }
                /spill stores/ && !/ 0 bytes spill stores/ && kernel ~ /MoeExpertWgmmaRsKernel/ {
                  print kernel; print }' "$log")
  if [ -n "$notes" ] || [ -n "$spills" ]; then
    echo "FAIL $name"
    [ -n "$notes" ] && echo "$notes"
    [ -n "$spills" ] && echo "$spills"
    failed=1
    return
  fi
  echo "ok   $name ($(grep -c 'Compiling entry function' "$log") kernels)"
}

check landed
check width_sets -DFS_MOE_RS_WIDTH_SETS=1
check early_probe -DFS_MOE_RS_EARLY_PROBE=1
check paired_codes -DFS_MOE_RS_PAIRED_CODES=1
check deep_a -DFS_MOE_RS_DEEP_A=1
check combined -DFS_MOE_RS_WIDTH_SETS=1 -DFS_MOE_RS_EARLY_PROBE=1 -DFS_MOE_RS_PAIRED_CODES=1
exit $failed
