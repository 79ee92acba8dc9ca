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
# the system's. The source entry is the machine's own Debian archive (the
# URI its apt sources use for this release's main suite) with the suite
# replaced by trixie, checked against the machine's Debian archive keyring
# (debian-archive-keyring carries the trixie keys from its Debian 12 update
# 2023.3+deb12u2 on; an older one is upgraded from the machine's own
# sources first). The packages are unpacked with dpkg -x into DIR/prefix,
# nothing is installed, and the .pc files are rewritten to point there.
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
    -h | --help) sed -n '2,23s/^# \{0,1\}//p' "$0"; exit 0 ;;
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
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# Reuse a complete prefix whose .pc files still point at it.
if [ $force = 0 ] && [ -f "$stamp" ] && [ -f "$(cat "$stamp")/hiredis.pc" ] &&
  grep -qxF "prefix=$prefix/usr" "$(cat "$stamp")/hiredis.pc"; then
  cat "$stamp"
  exit 0
fi

for c in apt-get dpkg; do
  command -v $c >/dev/null 2>&1 || { echo "hiredis1.sh: needs $c (Debian)" >&2; exit 1; }
done
# The keyring must know the trixie signing keys; Debian 12 got them in an
# update of debian-archive-keyring, which a stale machine may lack.
keyring_version() { dpkg-query -W -f='${Version}' debian-archive-keyring 2>/dev/null || true; }
if ! dpkg --compare-versions "$(keyring_version)" ge 2023.3+deb12u2; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "hiredis1.sh: upgrading debian-archive-keyring for the $suite keys" >&2
    apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debian-archive-keyring >/dev/null
  fi
  dpkg --compare-versions "$(keyring_version)" ge 2023.3+deb12u2 ||
    { echo "hiredis1.sh: debian-archive-keyring $(keyring_version) lacks the $suite keys; upgrade it" >&2; exit 1; }
fi
[ -r "$keyring" ] || { echo "hiredis1.sh: no $keyring (package debian-archive-keyring)" >&2; exit 1; }

# The release this machine runs, e.g. bookworm.
codename=
if [ -r /etc/os-release ]; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
fi
[ -n "$codename" ] || { echo "hiredis1.sh: cannot tell this machine's Debian release" >&2; exit 1; }

# The archive URI the machine's apt uses for "$codename" itself (not
# -updates or -security), from one-line .list entries and deb822 .sources.
archive_uri() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    # deb [opts] URI SUITE COMPONENTS...
    awk -v s="$codename" '
      $1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == s) { print $i; exit }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v s="$codename" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled !~ /^[Nn][Oo]/ && (" " suites " ") ~ (" " s " ") && uris != "") {
          split(uris, u, " "); print u[1]; found = 1; exit
        }
        types = suites = uris = enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
      /^URIs:/ { sub(/^URIs:[ \t]*/, ""); uris = $0 }
      /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      /^Enabled:/ { sub(/^Enabled:[ \t]*/, ""); enabled = $0 }
      END { if (!found) flush() }' "$f"
  done
}
uri=$(archive_uri | head -n 1)
[ -n "$uri" ] || { echo "hiredis1.sh: no apt source for suite $codename found in /etc/apt" >&2; exit 1; }

apt=$dir/apt
rm -rf "$apt" "$prefix" "$dir/debs"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$dir/debs" "$prefix"
echo "deb [signed-by=$keyring] $uri $suite main" >"$apt/sources.list"
: >"$apt/preferences"
opts=(-q -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::Etc::Preferences=$apt/preferences" -o Dir::Etc::PreferencesParts=/dev/null
  -o "Dir::State=$apt" -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
  -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
# apt hands downloads to its unprivileged _apt user, who cannot write to a
# private directory; as root, download as root instead of warning about it.
[ "$(id -u)" -eq 0 ] && opts+=(-o APT::Sandbox::User=root)

echo "hiredis1.sh: fetching ${packages[*]} from the $suite suite of $uri" >&2
if ! apt-get "${opts[@]}" update >"$dir/apt-update.log" 2>&1; then
  cat "$dir/apt-update.log" >&2
  echo "hiredis1.sh: apt-get update failed (a NO_PUBKEY error means $keyring lacks the $suite keys: update debian-archive-keyring)" >&2
  exit 1
fi
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
