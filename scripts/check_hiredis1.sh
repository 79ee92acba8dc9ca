#!/usr/bin/env bash
# Compile every sluice source syntax-only against hiredis 1.x headers.
#
#   scripts/check_hiredis1.sh DIR
#
# DIR is either an install include dir (holding hiredis/hiredis.h, e.g.
# /opt/hiredis-1.2/include) or a hiredis source tree (holding hiredis.h and
# adapters/ at its top). Nothing is linked, so only the headers are needed.
# Each file in src/, src/cli/, test/, bench/ and examples/ is compiled with
# every compiler found among gcc and clang (or $CC), with the project's
# warnings as errors. SLUICE_HAVE_REDIS_ASYNC_TIMEOUT is defined when the
# headers declare redisAsyncSetTimeout, as meson would detect it.
# Not part of CI (CI has only Debian's hiredis 0.14). Exit status 1 if any
# file fails.
set -uo pipefail

if [ $# -ne 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,14s/^# \{0,1\}//p' "$0"
  [ $# -eq 1 ] && exit 0 || exit 2
fi
dir=$(cd "$1" 2>/dev/null && pwd) || { echo "check_hiredis1: no such directory: $1" >&2; exit 2; }

cd "$(dirname "$0")/.." || exit 2
root=$(pwd)
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

# Make <hiredis/hiredis.h> resolve whichever layout DIR has.
if [ -f "$dir/hiredis/hiredis.h" ]; then
  inc=$dir
elif [ -f "$dir/hiredis.h" ]; then
  mkdir "$tmp/inc" && ln -s "$dir" "$tmp/inc/hiredis"
  inc=$tmp/inc
else
  echo "check_hiredis1: neither $dir/hiredis/hiredis.h nor $dir/hiredis.h exists" >&2
  exit 2
fi
major=$(sed -n 's/^#define HIREDIS_MAJOR[[:space:]]*\([0-9]*\).*/\1/p' "$inc/hiredis/hiredis.h")
minor=$(sed -n 's/^#define HIREDIS_MINOR[[:space:]]*\([0-9]*\).*/\1/p' "$inc/hiredis/hiredis.h")
echo "hiredis headers: $inc/hiredis (version $major.$minor)"
[ "${major:-0}" -ge 1 ] || echo "check_hiredis1: warning: these are not 1.x headers" >&2

# The generated header the library includes.
mkdir "$tmp/gen" || exit 2
python3 scripts/embed_lua.py "$tmp/gen/lua_scripts.c" "$tmp/gen/lua_scripts.h" src/lua/*.lua || exit 2

defs=(-D_GNU_SOURCE -DSLUICE_BUILDING)
if grep -q 'redisAsyncSetTimeout' "$inc/hiredis/async.h"; then
  defs+=(-DSLUICE_HAVE_REDIS_ASYNC_TIMEOUT)
fi
warn=(-std=c11 -Wall -Wextra -Werror -Wstrict-prototypes -Wmissing-prototypes -Wshadow
  -Wwrite-strings -Wpointer-arith -Wno-unused-parameter)
incs=(-isystem "$inc" -isystem "$inc/hiredis" -Iinclude -Isrc -I"$tmp/gen")

if [ -n "${CC:-}" ]; then compilers=("$CC"); else compilers=(); fi
for c in gcc clang; do
  [ -n "${CC:-}" ] && break
  command -v "$c" >/dev/null && compilers+=("$c")
done
[ ${#compilers[@]} -gt 0 ] || { echo "check_hiredis1: no C compiler found" >&2; exit 2; }

fail=0 n=0
for cc in "${compilers[@]}"; do
  for f in src/*.c src/cli/*.c test/*.c bench/*.c examples/*.c; do
    [ -f "$f" ] || continue
    extra=(-I"$(dirname "$f")")
    case $f in bench/*) extra+=(-DBENCH_NODE_DIR="\"$root/bench/node\"") ;; esac
    n=$((n + 1))
    if ! out=$("$cc" "${warn[@]}" "${defs[@]}" "${incs[@]}" "${extra[@]}" -fsyntax-only "$f" 2>&1); then
      fail=$((fail + 1))
      echo "FAIL $cc $f"
      printf '%s\n' "$out"
    elif [ -n "$out" ]; then
      printf '%s\n' "$out"
    fi
  done
done
echo "$((n - fail)) of $n compiles passed (${compilers[*]})"
[ $fail -eq 0 ]
