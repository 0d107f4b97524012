#!/usr/bin/env bash
# Installs the Debian 12 packages FlashServe builds against. Idempotent: when everything is
# present it only runs dpkg queries (well under a second). CUDA comes from /usr/local/cuda when
# present; without it the build configures with -DFLASHSERVE_CUDA=OFF automatically.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev libucx-dev ucx-utils
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libxxhash-dev
  libpcre2-dev libicu-dev libboost-dev libopenblas-dev
  libpng-dev libjpeg62-turbo-dev libssl-dev libyaml-cpp-dev
  libzstd-dev liblz4-dev libsnappy-dev libbz2-dev zlib1g-dev libgflags-dev liburing-dev
  clang libclang-rt-14-dev

)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
