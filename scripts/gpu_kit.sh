#!/usr/bin/env bash
# scripts/gpu_kit.sh KIT: builds a device session's kit from scripts/kits/KIT.sh, so that a fresh
# checkout (build folders are git-ignored and do not survive between sessions) gets from clone to
# its first device call in one command.
#
# The kit file is the runner that executes on the GPU machine; its header lines say what to build:
#   # kit-target: NAME...                      static test / bench targets (ninja names)
#   # kit-variant: TARGET SUFFIX TU FLAGS...   TARGET relinked as TARGET_SUFFIX with its object of
#                                              TU (a .cu / .cc path from the repo root) recompiled
#                                              with FLAGS (e.g. -DFS_INDEXER_I8_MIN_CTAS=3)
#   # kit-drop: NAME...                        built binaries left out of the kit (a target built
#                                              only as a variant's base), to stay within 64 MiB
# Output: build-gpu-bin/KIT.tar.xz (stripped binaries, xz; the device tool carries at most 64 MiB)
# and build-gpu-bin/KIT_run.sh (the kit file). The device call, from the repository root:
#   run(command="bash build-gpu-bin/KIT_run.sh MODES",
#       carry=["build-gpu-bin/KIT.tar.xz", "build-gpu-bin/KIT_run.sh"])
# A variant changes nothing but the one object: the rest of the link is the target's own, so a
# variant and its base differ only where FLAGS change that translation unit.
set -euo pipefail
kit=${1:?usage: scripts/gpu_kit.sh KIT (a file scripts/kits/KIT.sh)}
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/scripts/kits/$kit.sh
[ -f "$src" ] || { echo "gpu_kit: no kit file $src" >&2; exit 2; }
cd "$root"
mapfile -t targets < <(sed -n 's/^# kit-target: *//p' "$src" | tr ' ' '\n' | sed '/^$/d')
mapfile -t variants < <(sed -n 's/^# kit-variant: *//p' "$src")
mapfile -t drops < <(sed -n 's/^# kit-drop: *//p' "$src" | tr ' ' '\n' | sed '/^$/d')
[ ${#targets[@]} -gt 0 ] || { echo "gpu_kit: $src names no kit-target" >&2; exit 2; }

scripts/setup.sh
scripts/configure.sh build-static -DCMAKE_BUILD_TYPE=Release -DFLASHSERVE_STATIC=ON
ninja -C build-static "${targets[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
binary() {  # the built file of a ninja target
  local f
  for f in "build-static/bench/$1" "build-static/tests/$1"; do
    [ -x "$f" ] && { echo "$f"; return; }
  done
  echo "gpu_kit: no binary for target $1" >&2
  return 1
}
for t in "${targets[@]}"; do cp "$(binary "$t")" "$stage/"; done

for v in "${variants[@]}"; do
  read -r target suffix tu flags <<<"$v"
  out_name=${target}_$suffix
  work=$stage/.variant_$out_name
  mkdir -p "$work"
  # The target's compile command of TU and its link command, from ninja (run in build-static).
  compile=$(ninja -C build-static -t commands "$target" | grep -F -- "$root/$tu" | grep -F -- ' -c ' |
            head -1)
  [ -n "$compile" ] || { echo "gpu_kit: $target compiles no $tu" >&2; exit 1; }
  link=$(ninja -C build-static -t commands "$target" | tail -1)
  obj=$(sed -E 's/.* -o ([^ ]+).*/\1/' <<<"$compile")
  # CMake's object path: DIR/CMakeFiles/LIB.dir/... -> the archive DIR/libLIB.a.
  lib=$(sed -E 's#^(.*)/CMakeFiles/([^/]+)\.dir/.*#\1/lib\2.a#' <<<"$obj")
  [ -f "build-static/$lib" ] || { echo "gpu_kit: no archive build-static/$lib for $obj" >&2; exit 1; }
  new_obj=$work/$(basename "$obj")
  compile=$(sed -E 's/^ccache //; s/ -MD -MT [^ ]+ -MF [^ ]+//' <<<"$compile")
  (cd build-static && eval "${compile/ -o $obj/ -o $new_obj} $flags")
  cp "build-static/$lib" "$work/lib.a"
  ar r "$work/lib.a" "$new_obj"  # replaces the member of the same name
  relinked=${link//$lib/$work/lib.a}
  [ "$relinked" != "$link" ] || { echo "gpu_kit: $target does not link $lib" >&2; exit 1; }
  link=$relinked
  link=$(sed -E "s# -o [^ ]+# -o $stage/$out_name#" <<<"$link")
  (cd build-static && eval "$link")
  rm -rf "$work"
  echo "gpu_kit: built $out_name ($tu $flags)"
done

for d in "${drops[@]}"; do
  [ -f "$stage/$d" ] || { echo "gpu_kit: kit-drop names $d, which the kit does not build" >&2; exit 1; }
  rm -f "$stage/$d"
done
strip "$stage"/*
mkdir -p build-gpu-bin
# One xz stream whose dictionary spans the whole tar (up to 512 MiB), so that every binary's code
# is matched against the others' (they share most of it: CUDA runtime, Abseil, kernels) and a
# variant costs little beside its base. -9 with its 64 MiB dictionary took the s62 kit from 44.8
# MB (-6) to 23 MB; multi-threaded, it cut the tar into blocks that did not see each other (s146:
# 28.8 MB; one stream with the whole tar in its dictionary: 21.1 MB, ~2 minutes on one core).
# Unpacking needs the dictionary's size in memory.
stage_mib=$(( ($(du -sb "$stage" | cut -f1) >> 20) + 1 ))
dict_mib=$(( stage_mib < 64 ? 64 : stage_mib > 512 ? 512 : stage_mib ))
(cd "$stage" && tar cf - . |
   xz -T1 --lzma2=preset=9e,dict=${dict_mib}MiB > "$root/build-gpu-bin/$kit.tar.xz")
cp "$src" "build-gpu-bin/${kit}_run.sh"
ls -la "build-gpu-bin/$kit.tar.xz" "build-gpu-bin/${kit}_run.sh"
# The device tool carries the tracked tree and the kit together, at most 64 MiB.
tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
kit_bytes=$(stat -c %s "build-gpu-bin/$kit.tar.xz")
total=$((tree + kit_bytes))
echo "gpu_kit: tracked tree $((tree >> 20)) MiB + kit $((kit_bytes >> 20)) MiB = $((total >> 20)) MiB of 64"
if ((total > 62 << 20)); then
  echo "gpu_kit: too large to carry; drop targets from scripts/kits/$kit.sh or split the kit" >&2
  exit 1
fi
echo "device call: run(command=\"bash build-gpu-bin/${kit}_run.sh MODES\"," \
     "carry=[\"build-gpu-bin/$kit.tar.xz\", \"build-gpu-bin/${kit}_run.sh\"])"
