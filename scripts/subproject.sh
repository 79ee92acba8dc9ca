#!/usr/bin/env bash
# sluice as a meson subproject of another project, as its users take it.
#
#   scripts/subproject.sh
#
# In a temporary directory: a project whose meson.build asks for
# dependency('sluice'), a wrap file (subprojects/sluice.wrap) that provides
# "sluice" from the directory subprojects/sluice, which links to this
# source tree, and examples/mutex.c as the program. meson finds the
# dependency through the override sluice's meson.build declares; it builds
# without any download (--wrap-mode=nodownload), preferring the subproject
# over an installed sluice (--force-fallback-for). The program then holds
# and releases a permit on a private redis-server. Prints TAP.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
# shellcheck source=scripts/private_redis.sh
source scripts/private_redis.sh
# shellcheck source=scripts/tap.sh
source scripts/tap.sh

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-subproject-XXXXXX") || exit 1
trap 'private_redis_stop; rm -rf "$tmp"' EXIT
# not_ok DESCRIPTION: a failed case, with the end of the step's output.
not_ok() { tap_not_ok "$1" "$(tail -n 40 "$tmp/out")"; }

app=$tmp/app
mkdir -p "$app/subprojects"
ln -s "$root" "$app/subprojects/sluice"
cp examples/mutex.c "$app/"
cat >"$app/subprojects/sluice.wrap" <<'WRAP'
[wrap-file]
directory = sluice

[provide]
dependency_names = sluice
WRAP
cat >"$app/meson.build" <<'BUILD'
project('sluice-user', 'c', default_options: ['c_std=c11', 'warning_level=2', 'werror=true'])
executable('mutex', 'mutex.c', dependencies: dependency('sluice'))
BUILD

tap_plan 3
if meson setup "$app/build" "$app" --wrap-mode=nodownload --force-fallback-for=sluice \
     >"$tmp/out" 2>&1 && ninja -C "$app/build" >>"$tmp/out" 2>&1; then
  tap_ok "a project builds with dependency('sluice') from the subproject"
else
  not_ok "a project builds with dependency('sluice') from the subproject"
fi

ldd "$app/build/mutex" >"$tmp/out" 2>&1
if grep -q "libsluice\.so\.[0-9]* => $app/build/subprojects/sluice/" "$tmp/out"; then
  tap_ok "the program loads the subproject's libsluice"
else
  not_ok "the program loads the subproject's libsluice"
fi

if private_redis_start "$tmp" 2>"$tmp/out" &&
   timeout 60 "$app/build/mutex" "$private_redis_url" >"$tmp/out" 2>&1 &&
   grep -q '^holding permit ' "$tmp/out"; then
  tap_ok "the program holds and releases a permit on a private redis-server"
else
  not_ok "the program holds and releases a permit on a private redis-server"
fi
exit "$tap_status"
