#!/usr/bin/env bash
# scripts/run.sh BUILD_DIR: what `make run` starts — whatever of the stack exists, on loopback,
# with the bundled tiny model:
#   1. flashctl checkpoint inspect on the tiny model (a real load that checks every tensor) and on
#      the released V4.1-Flash config;
#   2. flashserve generate on the tiny model: a text prompt, and the fixture's image prompt
#      (random weights: the text is gibberish; the timings and the mechanism are the point);
#   3. the cache service (`flashserve cache`) on 127.0.0.1:8100 (gRPC) and :8101 (/metrics,
#      /health), data in BUILD_DIR/run/cache, and `flashctl cache stats` against it.
# Then it keeps the cache service in the foreground until Ctrl-C (SIGTERM/SIGINT drain it).
# RUN_ONCE=1 stops the service after the checks instead (scripted use).
set -euo pipefail
dir=${1:-build}
echo "== flashctl checkpoint inspect tests/conformance/data/v41-tiny"
"$dir/bin/flashctl" checkpoint inspect tests/conformance/data/v41-tiny
echo
echo "== flashctl checkpoint inspect configs/deepseek-v41-flash/inference_config.json"
"$dir/bin/flashctl" checkpoint inspect configs/deepseek-v41-flash/inference_config.json
echo

echo "== flashserve generate --model tests/conformance/data/v41-tiny --prompt ..."
"$dir/bin/flashserve" generate --model tests/conformance/data/v41-tiny \
  --prompt "<｜User｜>Write a Python function that adds two numbers.<｜Assistant｜></think>" \
  --max-tokens 32
echo "== flashserve generate ... --image tests/conformance/data/v41-tiny/image.png"
"$dir/bin/flashserve" generate --model tests/conformance/data/v41-tiny \
  --prompt "<｜User｜>Look at this picture: <｜deepseek_image｜>
What colors and shapes do you see in it?<｜Assistant｜></think>" \
  --image tests/conformance/data/v41-tiny/image.png --max-tokens 16 --temperature 0.8 --seed 1
echo

data="$dir/run/cache"
mkdir -p "$data"
echo "== flashserve cache (data in $data)"
fifo=$(mktemp -u); mkfifo "$fifo"
"$dir/bin/flashserve" cache --cache.data_dir="$data" --cache.listen=127.0.0.1:8100 \
  --cache.http_listen=127.0.0.1:8101 > "$fifo" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$fifo"' EXIT
exec 3<"$fifo"
if ! read -r -t 30 line <&3; then
  echo "flashserve cache did not come up within 30 s" >&2
  exit 1
fi
echo "$line"
cat <&3 >/dev/null &
"$dir/bin/flashctl" cache stats --address 127.0.0.1:8100
if [ "${RUN_ONCE:-0}" = "1" ]; then
  exit 0
fi
echo "cache service running: gRPC 127.0.0.1:8100, http://127.0.0.1:8101/metrics — Ctrl-C to stop"
wait $pid
