#!/usr/bin/env bash
# Build the Redis and Valkey servers Debian ships into private prefixes.
#
#   scripts/servers.sh [--force] [--debs] [--dir DIR] [SERVER...]
#
# SERVER is redis-8.0 or valkey-8.1 (Debian 13, "trixie"; the default is
# both) or valkey-9 (Debian unstable, "sid"). For each, the upstream tarball
# of the Debian source package is fetched from the machine's own Debian
# archive through a private apt state (scripts/debian_archive.sh), checked
# against the SHA256 of the archive's signed Sources index, and built with
# its bundled deps/ (jemalloc, Lua) and TLS: `make -j2`, a few minutes per
# server on two cores, one server at a time. Only the orig tarball is used
# (a point release's .dsc can be missing from the archive) and nothing is
# installed: each server lands in DIR/NAME-VERSION/bin (DIR defaults to
# build-servers), with redis-server, redis-cli and redis-sentinel (Valkey's
# build names them valkey-* and links the redis-* names to them).
#
# --debs unpacks Debian's binary packages instead, in under a minute
# (scripts/server_debs.sh says how): DIR/debs/NAME-VERSION/bin holds
# redis-server and redis-cli. CI takes these.
#
# Prints one bin directory per SERVER, in order, for the tests' hook
#   SLUICE_SERVER_DIR=<that directory> meson test -C BUILD --suite redis
# A server whose bin directory is complete is not built again (--force
# builds it again). Needs apt-get, dpkg, make, gcc and libssl-dev.
set -euo pipefail

force=0
debs=0
dir=
servers=()
while [ $# -gt 0 ]; do
  case $1 in
    --force) force=1 ;;
    --debs) debs=1 ;;
    --dir) dir=${2:?--dir needs a directory}; shift ;;
    -h | --help) sed -n '2,25s/^# \{0,1\}//p' "$0"; exit 0 ;;
    redis-8.0 | valkey-8.1 | valkey-9) servers+=("$1") ;;
    *) echo "servers.sh: unknown argument: $1 (servers: redis-8.0 valkey-8.1 valkey-9)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#servers[@]} -gt 0 ] || servers=(redis-8.0 valkey-8.1)
cd "$(dirname "$0")/.."
dir=${dir:-build-servers}
[ $debs = 0 ] || dir=$dir/debs
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# SERVER -> source package, suite and the upstream version it must have.
source_of() {
  case $1 in
    redis-8.0) echo "redis trixie 8.0." ;;
    valkey-8.1) echo "valkey trixie 8.1." ;;
    valkey-9) echo "valkey sid 9." ;;
  esac
}

# The built bin directory of SERVER, if there is one.
built() {
  local d
  for d in "$dir/$1".*/bin; do
    [ -f "$d/.complete" ] && [ -x "$d/redis-server" ] && { echo "$d"; return 0; }
  done
  return 1
}

todo=()
for s in "${servers[@]}"; do
  if [ $force = 1 ] || ! built "$s" >/dev/null; then todo+=("$s"); fi
done

if [ ${#todo[@]} -gt 0 ] && [ $debs = 1 ]; then
  . scripts/debian_archive.sh
  . scripts/server_debs.sh
  da_init servers.sh
  for s in "${todo[@]}"; do unpack "$s"; done
  todo=()
fi

if [ ${#todo[@]} -gt 0 ]; then
  for c in make gcc; do
    command -v $c >/dev/null 2>&1 || { echo "servers.sh: needs $c" >&2; exit 1; }
  done
  . scripts/debian_archive.sh
  da_init servers.sh
  suites=()
  for s in "${todo[@]}"; do
    read -r _ suite _ <<<"$(source_of "$s")"
    case " ${suites[*]-} " in *" deb-src $suite "*) ;; *) suites+=("deb-src $suite") ;; esac
  done
  da_apt "$dir" "${suites[@]}"
  echo "servers.sh: reading the sources of ${suites[*]#deb-src } from $da_uri" >&2
  da_update "$dir"
fi

# The "SHA256 SIZE NAME" line and the pool directory of the upstream tarball
# of package $1 at the newest version $3* that suite $2 lists (its own
# Sources index, which apt may keep compressed: apt-cache would mix suites).
orig_tarball() {
  local index='' f
  for f in "$dir"/apt/lists/*_dists_"$2"_main_source_Sources*; do
    [ -f "$f" ] && index=$f && break
  done
  [ -n "$index" ] || { echo "servers.sh: no Sources index of $2 in $dir/apt/lists" >&2; exit 1; }
  awk -v pkg_want="$1" -v want="$3" '
    function flush() {
      if (pkg != "" && index(up, want) == 1 && orig != "" && (best == "" || vcmp(up, best) > 0)) {
        best = up; line = orig; where = directory
      }
      pkg = up = orig = directory = ""; insha = 0
    }
    # Compare dotted upstream versions numerically.
    function vcmp(a, b,   x, y, i, n) {
      n = split(a, x, /[.+~-]/); split(b, y, /[.+~-]/)
      for (i = 1; i <= n; i++) if (x[i] + 0 != y[i] + 0) return x[i] + 0 - (y[i] + 0)
      return 0
    }
    /^Package:/ { flush(); if ($2 == pkg_want) pkg = $2 }
    /^Version:/ { v = $2; sub(/^[0-9]+:/, "", v); sub(/-[^-]*$/, "", v); sub(/\+dfsg.*/, "", v); up = v }
    /^Directory:/ { directory = $2 }
    /^Checksums-Sha256:/ { insha = 1; next }
    /^[^ ]/ { insha = 0 }
    insha && $3 ~ /\.orig\.tar\.(gz|xz)$/ { orig = $1 " " $2 " " $3 }
    END { flush(); if (best != "") print line, where }' <(/usr/lib/apt/apt-helper cat-file "$index")
}

build() {
  local s=$1 pkg suite want sha size name pool
  read -r pkg suite want <<<"$(source_of "$s")"
  read -r sha size name pool <<<"$(orig_tarball "$pkg" "$suite" "$want")"
  [ -n "${name:-}" ] || { echo "servers.sh: $suite lists no $pkg $want*" >&2; exit 1; }
  local version=${name#"${pkg}_"}
  version=${version%%.orig.tar.*}
  version=${version%%+dfsg*}
  # built() finds it by its name: redis-8.0.2 starts with redis-8.0.
  local prefix=$dir/$pkg-$version work=$dir/src/$s
  rm -rf "$work" "$prefix"
  mkdir -p "$work" "$dir/tarballs"
  if [ ! -f "$dir/tarballs/$name" ] || ! echo "$sha  $dir/tarballs/$name" | sha256sum -c --quiet - 2>/dev/null; then
    echo "servers.sh: fetching $pool/$name ($size bytes)" >&2
    /usr/lib/apt/apt-helper "${da_opts[@]}" download-file "$da_uri/$pool/$name" \
      "$dir/tarballs/$name" "SHA256:$sha" >&2
  fi
  tar -xf "$dir/tarballs/$name" -C "$work" --strip-components=1
  echo "servers.sh: building $pkg $version in $work (log: $work/build.log)" >&2
  local t0=$SECONDS
  # The version stamp asks git; keep it from finding a repository above.
  export GIT_CEILING_DIRECTORIES=$dir/src
  if ! make -C "$work" -j2 BUILD_TLS=yes >"$work/build.log" 2>&1 ||
    ! make -C "$work" install PREFIX="$prefix" >>"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    echo "servers.sh: building $pkg $version failed" >&2
    exit 1
  fi
  for p in redis-server redis-cli; do
    [ -x "$prefix/bin/$p" ] || { echo "servers.sh: $pkg $version installed no $p" >&2; exit 1; }
  done
  "$prefix/bin/redis-server" --version >&2
  echo "servers.sh: $pkg $version built in $((SECONDS - t0)) s" >&2
  touch "$prefix/bin/.complete"
  rm -rf "$work"
}

for s in "${todo[@]}"; do build "$s"; done
for s in "${servers[@]}"; do built "$s"; done
