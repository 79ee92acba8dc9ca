#!/usr/bin/env bash
# Unpack the Redis and Valkey servers Debian ships, as binaries, into
# private prefixes: the seconds-long alternative to scripts/servers.sh's
# builds from source, for CI.
#
#   scripts/server_debs.sh [--force] [--dir DIR] [SERVER...]
#
# SERVER is redis-8.0 or valkey-8.1 (Debian 13, "trixie"; the default is
# both) or valkey-9 (Debian unstable, "sid"). The server's -tools package
# (which holds the binaries) and the libraries it links, down to the C
# library and its loader, are downloaded from the machine's own Debian
# archive through a private apt state (scripts/debian_archive.sh) and
# unpacked with dpkg -x; nothing is installed. Debian 12's C library is
# older than theirs, so each program runs under the unpacked loader with
# the unpacked libraries only: DIR/NAME-VERSION/bin holds redis-server and
# redis-cli as two-line wrappers that exec it (the process keeps the
# wrapper's pid and name, so the tests' kills and `--sentinel` work).
# DIR defaults to build-servers/debs.
#
# Prints one bin directory per SERVER, in order, for the tests' hook
#   SLUICE_SERVER_DIR=<that directory> meson test -C BUILD --suite redis
# A complete bin directory is reused (--force unpacks again). Needs
# apt-get and dpkg.
set -euo pipefail

force=0
dir=
servers=()
while [ $# -gt 0 ]; do
  case $1 in
    --force) force=1 ;;
    --dir) dir=${2:?--dir needs a directory}; shift ;;
    -h | --help) sed -n '2,23s/^# \{0,1\}//p' "$0"; exit 0 ;;
    redis-8.0 | valkey-8.1 | valkey-9) servers+=("$1") ;;
    *) echo "server_debs.sh: unknown argument: $1 (servers: redis-8.0 valkey-8.1 valkey-9)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#servers[@]} -gt 0 ] || servers=(redis-8.0 valkey-8.1)
cd "$(dirname "$0")/.."
dir=${dir:-build-servers/debs}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# SERVER -> package name stem (STEM-server links to the program in
# STEM-tools), suite, upstream version prefix, and the server's and the
# client's program names.
source_of() {
  case $1 in
    redis-8.0) echo "redis trixie 8.0. redis-server redis-cli" ;;
    valkey-8.1) echo "valkey trixie 8.1. valkey-server valkey-cli" ;;
    valkey-9) echo "valkey sid 9. valkey-server valkey-cli" ;;
  esac
}

built() {
  local d
  for d in "$dir/$1".*/bin; do
    [ -f "$d/.complete" ] && [ -x "$d/redis-server" ] && { echo "$d"; return 0; }
  done
  return 1
}

# Packages the programs need at run time: the given ones and, through
# Depends, every library package (lib*, zlib1g, gcc-N-base), first
# alternatives only; adduser and the like are the package's scripts' needs.
closure() {
  local -A seen=()
  local queue=("$@") p deps d
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    [ -n "${seen[$p]:-}" ] && continue
    seen[$p]=1
    echo "$p"
    deps=$(apt-cache "${da_opts[@]}" show --no-all-versions "$p" |
      sed -n 's/^\(Pre-\)\{0,1\}Depends: //p' | tr ',' '\n' |
      sed -e 's/|.*//' -e 's/(.*)//' -e 's/:any//' -e 's/[[:space:]]//g')
    for d in $deps; do
      case $d in lib* | zlib1g | gcc-*-base) queue+=("$d") ;; esac
    done
  done
}

unpack() {
  local s=$1 stem suite want server cli
  read -r stem suite want server cli <<<"$(source_of "$s")"
  local pkg=$stem-tools
  da_apt "$dir/$s" "deb $suite"
  echo "server_debs.sh: reading the $suite suite of $da_uri" >&2
  da_update "$dir/$s"
  local version
  version=$(apt-cache "${da_opts[@]}" show --no-all-versions "$pkg" | sed -n 's/^Version: //p')
  local up=${version#*:}
  up=${up%%+dfsg*}
  up=${up%-*}
  case $up in "$want"*) ;; *) echo "server_debs.sh: $suite has $pkg $version, not $want*" >&2; exit 1 ;; esac
  local prefix=$dir/$s.${up#"$want"} debs=$dir/$s/debs
  rm -rf "$prefix" "$debs"
  mkdir -p "$prefix/bin" "$prefix/root" "$debs"
  mapfile -t pkgs < <(closure "$stem-server" "$pkg")
  echo "server_debs.sh: fetching $stem $version and its libraries: ${pkgs[*]:2}" >&2
  (cd "$debs" && apt-get "${da_opts[@]}" download "${pkgs[@]}") >"$dir/$s/download.log" 2>&1 ||
    { cat "$dir/$s/download.log" >&2; exit 1; }
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$prefix/root"; done
  local loader
  loader=$(find "$prefix/root" -name 'ld-linux-x86-64.so.2' | head -n 1)
  [ -n "$loader" ] || { echo "server_debs.sh: no loader in the packages" >&2; exit 1; }
  local libs
  libs=$(find "$prefix/root" -name 'lib*.so*' -not -path '*/share/*' -printf '%h\n' | sort -u | paste -sd:)
  local name prog
  for name in redis-server redis-cli; do
    prog=$server
    [ $name = redis-cli ] && prog=$cli
    [ -x "$prefix/root/usr/bin/$prog" ] || { echo "server_debs.sh: $pkg has no $prog" >&2; exit 1; }
    printf '#!/bin/sh\nexec %s --library-path %s --argv0 "$0" %s "$@"\n' \
      "$loader" "$libs" "$prefix/root/usr/bin/$prog" >"$prefix/bin/$name"
    chmod +x "$prefix/bin/$name"
  done
  "$prefix/bin/redis-server" --version >&2
  touch "$prefix/bin/.complete"
  rm -rf "$debs"
}

all_built() {
  local s
  for s in "${servers[@]}"; do built "$s" >/dev/null || return 1; done
}

if [ $force = 1 ] || ! all_built; then
  . scripts/debian_archive.sh
  da_init server_debs.sh
  for s in "${servers[@]}"; do
    if [ $force = 1 ] || ! built "$s" >/dev/null; then unpack "$s"; fi
  done
fi
for s in "${servers[@]}"; do built "$s"; done
