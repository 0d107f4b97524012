#!/usr/bin/env bash
# scripts/gpu_bundle.sh [OUT_DIR]: builds the GPU test and bench binaries statically (make static)
# and copies them, stripped, into OUT_DIR (default build-gpu-bin/, git-ignored) together with a
# runner script. The folder is what travels to the GPU machine (the device tool's `carry`); there:
#   LD_LIBRARY_PATH=/usr/local/cuda/lib64 build-gpu-bin/run_gpu_tests.sh
set -euo pipefail
out=${1:-build-gpu-bin}
make static
rm -rf "$out"; mkdir -p "$out"
for f in build-static/tests/* build-static/bench/*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  # Only binaries that the gpu_tests target built (the static build builds nothing else).
  cp "$f" "$out/"
  strip "$out/$(basename "$f")"
done
cat > "$out/run_gpu_tests.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test binary in this folder (from the repository root), then every bench.
set -u
here=$(cd "$(dirname "$0")" && pwd)
status=0
for t in "$here"/*_test; do
  [ -x "$t" ] || continue
  echo "== $(basename "$t")"
  "$t" --gtest_brief=1 || status=1
done
for b in "$here"/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b" || status=1
done
exit $status
RUN
chmod +x "$out/run_gpu_tests.sh"
du -sh "$out"
