#!/usr/bin/env bash
# scripts/fuzz.sh BUILD_DIR SECONDS: runs every libFuzzer binary in BUILD_DIR/fuzz for SECONDS
# each, with a corpus in fuzz-corpus/<name>/ (git-ignored) seeded from the conformance data.
# Exits non-zero if any fuzzer finds a crash (the crash input is left in fuzz-corpus/).
set -euo pipefail
dir=$1; seconds=${2:-180}
status=0
for bin in "$dir"/fuzz/*_fuzzer; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus=fuzz-corpus/$name
  mkdir -p "$corpus"
  cp -n tests/conformance/data/v41-tiny/quant_vectors.safetensors "$corpus/seed_quant_vectors" 2>/dev/null || true
  dict_args=()
  src_dict=$(find . -path ./build\* -prune -o -name "$name.dict" -print | head -1)
  [ -n "$src_dict" ] && dict_args=(-dict="$src_dict")
  echo "fuzz: $name for ${seconds}s"
  if ! "$bin" "$corpus" "${dict_args[@]}" -max_total_time="$seconds" -artifact_prefix="$corpus/" \
       -print_final_stats=1 2>&1 | tail -20; then
    status=1
  fi
done
exit $status
