#!/usr/bin/env bash
# Build sluice and run its demo, installing what is missing first.
#
#   scripts/demo.sh [--redis URL] [-- DEMO-ARGS...]
#
# Without --redis it starts a private redis-server on a unix socket in a
# temporary directory and stops it when the demo ends. With --redis it uses
# that server (redis://[:password@]host:port[/db] or unix:///path).
# Builds in build-demo/ and runs build-demo/examples/demo --redis URL.
set -euo pipefail

cd "$(dirname "$0")/.."

url=
demo_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --redis)
      [ $# -ge 2 ] || { echo "demo.sh: --redis needs a URL" >&2; exit 2; }
      url=$2
      shift 2 ;;
    --redis=*) url=${1#--redis=}; shift ;;
    -h | --help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --) shift; demo_args=("$@"); break ;;
    *) echo "demo.sh: unknown argument: $1 (demo arguments go after --)" >&2; exit 2 ;;
  esac
done

scripts/deps.sh

build=build-demo
log=$(mktemp)
if [ -f "$build/meson-private/coredata.dat" ]; then
  cmd=(ninja -C "$build")
else
  rm -rf "$build"
  cmd=(sh -c "meson setup '$build' -Dbuildtype=debugoptimized -Dtests=false && ninja -C '$build'")
fi
if ! "${cmd[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  echo "demo.sh: build failed" >&2
  exit 1
fi
rm -f "$log"

demo=$build/examples/demo
if [ ! -x "$demo" ]; then
  echo "demo.sh: $demo was not built: examples/meson.build does not define the demo program (examples/demo.c)" >&2
  exit 1
fi

server_pid=
tmp=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [ -n "$tmp" ]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "$url" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-demo-XXXXXX")
  sock=$tmp/redis.sock
  redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 \
    --save '' --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" \
    --daemonize no </dev/null >/dev/null 2>&1 &
  server_pid=$!
  for _ in $(seq 500); do
    [ "$(redis-cli -s "$sock" ping 2>/dev/null)" = PONG ] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "demo.sh: redis-server exited:" >&2
      cat "$tmp/redis.log" >&2
      server_pid=
      exit 1
    fi
    sleep 0.01
  done
  [ "$(redis-cli -s "$sock" ping 2>/dev/null)" = PONG ] ||
    { echo "demo.sh: redis-server did not come up" >&2; exit 1; }
  url=unix://$sock
  echo "demo.sh: private redis-server (pid $server_pid) at $url"
fi

"$demo" --redis "$url" "${demo_args[@]}"
