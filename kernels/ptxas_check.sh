#!/usr/bin/env bash
# Compiles CUDA translation units for sm_90a with `-Xptxas -v` and checks what ptxas says of
# them, which a normal build does not print: no "Potential Performance Loss" note (C75xx: wgmma
# serialised for lack of registers or under a branch ptxas cannot prove uniform, a wait injected)
# unless the case allows it, and no spill in the kernels the case names. A serialised wgmma
# costs a kernel much of its speed and shows nowhere else (kernels/moe/wgmma_rs_gemm.md
# "Session 53"). Used by ctest: kernels_wgmma_notes_test, kernels_moe_rs_ptxas_test.
#
# Usage: ptxas_check.sh NVCC SOURCE_DIR BINARY_DIR CASES_FILE
# CASES_FILE: one case a line, fields separated by '|' (blanks around them ignored): a name, the
# translation unit (relative to SOURCE_DIR), -D flags, an awk regex of the kernels that must not
# spill (empty: none checked), a grep -E regex of the notes allowed (empty: none). Lines starting
# with '#' are comments.
set -uo pipefail
nvcc=$1 src=$2 bin=$3 cases=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0 n=0

trim() { sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' <<<"$1"; }

while IFS='|' read -r name tu defines no_spill allowed; do
  name=$(trim "$name")
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  tu=$(trim "$tu") defines=$(trim "$defines") no_spill=$(trim "$no_spill") allowed=$(trim "$allowed")
  n=$((n + 1))
  log=$tmp/$name.log
  # shellcheck disable=SC2086  # the -D flags are words
  if ! "$nvcc" -I"$src" -I"$bin" -O3 -DNDEBUG -arch=sm_90a -std=c++17 --expt-relaxed-constexpr \
      -Werror=all-warnings $defines -x cu -cubin -Xptxas -v "$src/$tu" -o "$tmp/$name.cubin" \
      > "$log" 2>&1; then
    echo "FAIL $name ($tu $defines): does not compile"
    tail -20 "$log"
    failed=1
    continue
  fi
  notes=$(grep "C75" "$log")
  if [ -n "$allowed" ] && [ -n "$notes" ]; then notes=$(grep -E -v "$allowed" <<<"$notes"); fi
  spills=""
  if [ -n "$no_spill" ]; then
    # ptxas prints each kernel's "Compiling entry function" line before its spill counts.
    spills=$(awk -v re="$no_spill" '/Compiling entry function/ { kernel = $0 }
        /spill stores/ && !/ 0 bytes spill stores/ && kernel ~ re { print kernel; print }' "$log")
  fi
  if [ -n "$notes" ] || [ -n "$spills" ]; then
    echo "FAIL $name ($tu $defines)"
    [ -n "$notes" ] && echo "$notes"
    [ -n "$spills" ] && echo "$spills"
    failed=1
    continue
  fi
  echo "ok   $name ($(grep -c 'Compiling entry function' "$log") kernels)"
done < "$cases"
[ "$n" -gt 0 ] || { echo "FAIL: no case in $cases"; exit 1; }
exit $failed
