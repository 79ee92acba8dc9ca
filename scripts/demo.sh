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

# shellcheck source=scripts/private_redis.sh
source scripts/private_redis.sh
tmp=
cleanup() {
  private_redis_stop
  if [ -n "$tmp" ]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "$url" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-demo-XXXXXX")
  private_redis_start "$tmp" || { echo "demo.sh: no private redis-server" >&2; exit 1; }
  url=$private_redis_url
  echo "demo.sh: private redis-server (pid $private_redis_pid) at $url"
fi

"$demo" --redis "$url" "${demo_args[@]}"
