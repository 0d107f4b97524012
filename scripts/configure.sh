#!/usr/bin/env bash
# scripts/configure.sh BUILD_DIR [cmake args...]: configures with Ninja, and with ccache when it
# is installed. Re-running on a configured directory is cheap (cmake only regenerates if needed).
set -euo pipefail
dir=$1; shift
args=(-G Ninja -S . -B "$dir")
if command -v ccache >/dev/null 2>&1; then
  args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
         -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if [ -f "$dir/CMakeCache.txt" ] && [ -f "$dir/build.ninja" ]; then
  cmake "$dir" "$@" >/dev/null
else
  cmake "${args[@]}" "$@"
fi
