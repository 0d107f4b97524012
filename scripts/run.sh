#!/usr/bin/env bash
# scripts/run.sh BUILD_DIR: what `make run` starts. Today: the operator's view of the bundled tiny
# model (a real checkpoint load that checks every tensor) and of the released V4.1-Flash config.
# Later milestones start the whole stack on loopback here.
set -euo pipefail
dir=${1:-build}
echo "== flashctl checkpoint inspect tests/conformance/data/v41-tiny"
"$dir/bin/flashctl" checkpoint inspect tests/conformance/data/v41-tiny
echo
echo "== flashctl checkpoint inspect configs/deepseek-v41-flash/inference_config.json"
"$dir/bin/flashctl" checkpoint inspect configs/deepseek-v41-flash/inference_config.json
