#!/usr/bin/env bash
# Fetch Debian 13's hiredis 1.x (with libhiredis_ssl) into a private prefix.
#
#   scripts/hiredis1.sh [--force] [DIR]
#
# Debian 12 ships hiredis 0.14; Debian 13 ("trixie") ships 1.2 in
# libhiredis-dev and libhiredis1.1.0 (libhiredis_ssl included), whose shared
# libraries need nothing newer than Debian 12's glibc and OpenSSL 3.0. This
# downloads those two packages with apt-get using a private apt state under
# DIR (default build-hiredis1): its own sources list, lists and cache, never
# the system's, on the machine's own Debian archive with the suite replaced
# by trixie (scripts/debian_archive.sh). The packages are unpacked with
# dpkg -x into DIR/prefix, nothing is installed, and the .pc files are
# rewritten to point there.
#
# Prints the pkg-config directory as its last line of output, for
#   meson setup BUILD -Dpkg_config_path=<that directory>
# Does nothing but print it when DIR/prefix is already complete (--force
# fetches again). Needs apt-get, dpkg and network access to the archive.
set -euo pipefail

force=0
dir=
for arg in "$@"; do
  case $arg in
    --force) force=1 ;;
    -h | --help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "hiredis1.sh: unknown option: $arg" >&2; exit 2 ;;
    *) dir=$arg ;;
  esac
done
cd "$(dirname "$0")/.."
dir=${dir:-build-hiredis1}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
prefix=$dir/prefix
stamp=$prefix/.complete
suite=trixie
packages=(libhiredis-dev libhiredis1.1.0)

# Reuse a complete prefix whose .pc files still point at it.
if [ $force = 0 ] && [ -f "$stamp" ] && [ -f "$(cat "$stamp")/hiredis.pc" ] &&
  grep -qxF "prefix=$prefix/usr" "$(cat "$stamp")/hiredis.pc"; then
  cat "$stamp"
  exit 0
fi

. scripts/debian_archive.sh
da_init hiredis1.sh
rm -rf "$prefix" "$dir/debs"
mkdir -p "$dir/debs" "$prefix"
da_apt "$dir" "deb $suite"
opts=("${da_opts[@]}")
uri=$da_uri

echo "hiredis1.sh: fetching ${packages[*]} from the $suite suite of $uri" >&2
da_update "$dir"
(cd "$dir/debs" && apt-get "${opts[@]}" download "${packages[@]}") >&2
for deb in "$dir"/debs/*.deb; do
  dpkg -x "$deb" "$prefix"
done

pc=$(find "$prefix" -name hiredis.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || { echo "hiredis1.sh: no hiredis.pc in the packages" >&2; exit 1; }
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")
# Debian's .pc files name /usr paths; point them at the private prefix.
for f in "$pcdir"/*.pc; do
  sed -i -e "s|^prefix=.*|prefix=$prefix/usr|" \
    -e "s|^libdir=.*|libdir=$libdir|" \
    -e 's|^includedir=.*|includedir=${prefix}/include|' \
    -e 's|^pkgincludedir=.*|pkgincludedir=${includedir}/hiredis|' "$f"
done
version=$(sed -n 's/^Version:[ \t]*//p' "$pc")
case $version in
  0.*) echo "hiredis1.sh: the $suite packages hold hiredis $version, not 1.x" >&2; exit 1 ;;
esac
[ -f "$pcdir/hiredis_ssl.pc" ] || echo "hiredis1.sh: warning: no hiredis_ssl.pc (no TLS)" >&2
echo "hiredis1.sh: hiredis $version in $prefix" >&2
echo "$pcdir" >"$stamp"
cat "$stamp"
