#!/usr/bin/env bash
# Build sluice's Debian packages, check them with lintian, and try them out
# as a user of the packages would.
#
#   scripts/deb.sh [--out DIR] [--no-install]
#
# 1. dpkg-buildpackage -us -uc -b on a copy of the source tree (the files
#    git tracks or would add), with debian/'s Build-Depends installed
#    (scripts/deps.sh --full); the packages go to DIR (default build-deb/);
# 2. lintian on them: an error fails, warnings are listed;
# 3. unless --no-install, as root (or through sudo): installs them with
#    apt-get, builds examples/mutex.c in a temporary directory with nothing
#    but "pkg-config --cflags --libs sluice", runs it against a private
#    redis-server, runs the installed sluice tool against it too, and
#    removes the packages again (apt-get purge; an older sluice package
#    installed here before is replaced and removed as well).
# Prints TAP.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
out=$root/build-deb
install=1
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --no-install) install=0; shift ;;
    -h | --help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "deb.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=scripts/private_redis.sh
source scripts/private_redis.sh
# shellcheck source=scripts/tap.sh
source scripts/tap.sh

mapfile -t packages < <(sed -n 's/^Package: //p' debian/control)
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=300)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-deb-XXXXXX") || exit 1
installed=0
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  private_redis_stop
  [ "$installed" = 1 ] && "${apt[@]}" purge "${packages[@]}" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

plan=8
[ $install = 1 ] || plan=3
# not_ok DESCRIPTION [N]: a failed case, with the last N (40) lines of the
# step's output.
not_ok() { tap_not_ok "$1" "$(tail -n "${2:-40}" "$tmp/out")"; }
tap_plan $plan

version=$(meson introspect --projectinfo meson.build |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
changelog=$(dpkg-parsechangelog -S Version)
if [ "$changelog" = "$version" ]; then
  tap_ok "debian/changelog's version is meson.build's ($version)"
else
  tap_not_ok "debian/changelog's version is meson.build's ($version)" \
    "debian/changelog has $changelog: add an entry for $version at its top"
fi

# 1. Build, on a copy: dpkg-buildpackage writes into the tree and its parent.
src=$tmp/src/sluice-$version
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard |
  xargs -0 cp --parents -t "$src" 2>"$tmp/out" || tap_bail "copying the source tree failed"
if (cd "$src" && dpkg-buildpackage -us -uc -b -j"$(nproc)") >"$tmp/out" 2>&1; then
  tap_ok "dpkg-buildpackage -us -uc -b"
  rm -rf "$out"
  mkdir -p "$out"
  cp "$tmp"/src/*.deb "$tmp"/src/*.changes "$tmp"/src/*.buildinfo "$out"/
else
  not_ok "dpkg-buildpackage -us -uc -b" 60
  tap_bail "no packages to check"
fi

# 2. lintian: errors fail; warnings and the rest are shown.
changes=$(ls "$out"/*.changes)
lintian --fail-on error --display-level '>=info' "$changes" >"$tmp/out" 2>&1
rc=$?
grep -v 'running with root privileges' "$tmp/out" | sed 's/^/#   /'
if [ $rc -eq 0 ]; then
  tap_ok "lintian finds no error ($(grep -c '^W: ' "$tmp/out") warnings)"
else
  not_ok "lintian finds no error" 0
fi
[ $install = 1 ] || exit "$tap_status"

# 3. Installed, used as a user would, removed.
debs=()
for p in "${packages[@]}"; do debs+=("$(ls "$out/${p}_"*.deb)"); done
if "${apt[@]}" install --reinstall "${debs[@]}" >"$tmp/out" 2>&1; then
  installed=1
  tap_ok "apt-get installs ${packages[*]}"
else
  not_ok "apt-get installs ${packages[*]}"
  tap_bail "not installed"
fi

app=$tmp/app
mkdir -p "$app"
cp examples/mutex.c "$app/"
# shellcheck disable=SC2046  # pkg-config's words are separate arguments
if (cd "$app" && cc -std=c11 -Wall -Wextra -Werror mutex.c -o mutex \
      $(pkg-config --cflags --libs sluice)) >"$tmp/out" 2>&1 &&
   ldd "$app/mutex" >>"$tmp/out" 2>&1 &&
   grep -qE 'libsluice\.so\.[0-9]+ => (/usr)?/lib/' "$tmp/out"; then
  tap_ok "a program builds with pkg-config --cflags --libs sluice and loads the package's library"
else
  not_ok "a program builds with pkg-config --cflags --libs sluice and loads the package's library"
fi

private_redis_start "$tmp" 2>"$tmp/out" || tap_bail "no private redis-server"
if timeout 60 "$app/mutex" "$private_redis_url" >"$tmp/out" 2>&1 &&
   grep -q '^holding permit ' "$tmp/out"; then
  tap_ok "the program holds and releases a permit on a private redis-server"
else
  not_ok "the program holds and releases a permit on a private redis-server"
fi

# The installed tool: its version, a command run under a permit, and its
# bash completion where bash-completion looks for it.
completion=/usr/share/bash-completion/completions/sluice
if [ "$(command -v sluice)" = /usr/bin/sluice ] &&
   [ "$(sluice --version)" = "sluice $version" ] &&
   timeout 60 sluice sem run deb-test -n 1 --ttl 5000 --redis "$private_redis_url" \
     -- sh -c 'echo held' >"$tmp/out" 2>&1 && grep -qx held "$tmp/out" &&
   bash -c "source $completion && complete -p sluice" >>"$tmp/out" 2>&1; then
  tap_ok "the installed sluice runs a command under a permit; its completion loads"
else
  not_ok "the installed sluice runs a command under a permit; its completion loads"
fi
private_redis_stop

if "${apt[@]}" purge "${packages[@]}" >"$tmp/out" 2>&1 && installed=0 &&
   ! dpkg-query -W -f='${Status}\n' "${packages[@]}" 2>/dev/null | grep -q 'ok installed' &&
   [ ! -e /usr/include/sluice ] && [ ! -e /usr/bin/sluice ]; then
  tap_ok "apt-get purge removes them"
else
  not_ok "apt-get purge removes them"
fi
exit "$tap_status"
