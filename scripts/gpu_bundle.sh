#!/usr/bin/env bash
# scripts/gpu_bundle.sh [OUT_DIR] [NAME...]: builds the GPU test and bench binaries statically
# (make static), strips them and packs them with a runner script into OUT_DIR/gpu-bundle.tar.xz
# (default OUT_DIR build-gpu-bin/, git-ignored). NAMEs (e.g. kernels_moe_gpu_test bench_moe)
# limit the bundle to those binaries; without them every GPU binary goes in. The device tool
# carries at most 64 MiB per call (working tree included), hence the compression: the whole set
# is ~150 MB stripped and ~40 MB packed. On the GPU machine, from the repository root:
#   tar xJf build-gpu-bin/gpu-bundle.tar.xz -C build-gpu-bin
#   LD_LIBRARY_PATH=/usr/local/cuda/lib64 build-gpu-bin/run_gpu_tests.sh
# (files unpacked there do not persist between device calls: unpack in every call).
set -euo pipefail
out=${1:-build-gpu-bin}
shift || true
make static
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for f in build-static/tests/* build-static/bench/*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  name=$(basename "$f")
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
  # Only binaries that the gpu_tests target built (the static build builds nothing else).
  cp "$f" "$stage/"
  strip "$stage/$name"
done
cat > "$stage/run_gpu_tests.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test binary in this folder (from the repository root: some tests read
# tests/conformance/data), then every bench. SANITIZE=memcheck|synccheck|racecheck|initcheck runs
# the tests under that compute-sanitizer tool instead (an error fails the test; benches skipped;
# each test bounded by SAN_TIMEOUT seconds, default 600: memcheck slows the GEMM tests >10x).
set -u
here=$(cd "$(dirname "$0")" && pwd)
status=0
san=()
if [ -n "${SANITIZE:-}" ]; then
  san=(timeout "${SAN_TIMEOUT:-600}" /usr/local/cuda/bin/compute-sanitizer --tool "$SANITIZE"
       --error-exitcode 1 --print-limit 20)
fi
for t in "$here"/*_test; do
  [ -x "$t" ] || continue
  echo "== $(basename "$t")"
  "${san[@]}" "$t" --gtest_brief=1 || status=1
done
[ -n "${SANITIZE:-}" ] && exit $status
for b in "$here"/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b" || status=1
done
exit $status
RUN
chmod +x "$stage/run_gpu_tests.sh"
rm -rf "$out"
mkdir -p "$out"
archive="$(cd "$out" && pwd)/gpu-bundle.tar.xz"
(cd "$stage" && tar cf - . | xz -T0 -6 > "$archive")
ls -la "$out/gpu-bundle.tar.xz"
