#!/usr/bin/env bash
# The ABI of libsluice against the baseline kept in the repository.
#
#   scripts/abi.sh check [BUILD_DIR]    compare the built library with it
#   scripts/abi.sh update [BUILD_DIR]   rewrite it from the built library
#
# The baseline is two files, both written by "update":
#   src/sluice.abi               the ABI as abidw (abigail-tools) reads it
#                                from the library: the exported functions
#                                with their symbol versions, and the types
#                                they reach (line numbers left out)
#   debian/libsluiceN.symbols    the exported symbols for dpkg-shlibdeps,
#                                each with the first version that had it
# "check" prints TAP and fails when:
#   - the library's soname is not the baseline's: a bumped soname takes a
#     fresh baseline in the same commit ("update");
#   - abidiff finds a change beyond added functions: a function removed or
#     changed, or a public type whose size or layout changed (callers
#     allocate the options and metrics structs, so a field added even at
#     the end breaks them). Keep the ABI, or bump sluice_soversion in
#     src/meson.build, rename libsluiceN in debian/, and run "update";
#   - the baseline lacks added functions ("update" records them);
#   - debian/ does not package soname N as libsluiceN.
# Only types the public headers (include/sluice/) define count: the layout
# of the opaque handles and of anything private is free to change.
# Without BUILD_DIR it builds the library alone in build-abi, as CI's
# build-ci is built (gcc, debugoptimized). Needs abigail-tools.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
# shellcheck source=scripts/tap.sh
source scripts/tap.sh
baseline=src/sluice.abi

mode=${1:-}
build=${2:-}
case $mode in
  check | update) ;;
  -h | --help) sed -n '2,27s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "usage: $0 check|update [BUILD_DIR]" >&2; exit 2 ;;
esac
for tool in abidw abidiff readelf; do
  command -v "$tool" >/dev/null 2>&1 ||
    tap_bail "$tool not found (scripts/deps.sh --full installs abigail-tools)"
done

if [ -z "$build" ]; then
  build="build-abi"
  if [ ! -f "$build/meson-private/coredata.dat" ]; then
    meson setup "$build" -Dbuildtype=debugoptimized -Dtests=false >/dev/null ||
      tap_bail "meson setup $build failed"
  fi
  meson compile -C "$build" src/sluice:shared_library >/dev/null ||
    tap_bail "building the library in $build failed"
fi
lib=$(readlink -f "$build/src/libsluice.so")
[ -f "$lib" ] || tap_bail "no $build/src/libsluice.so"
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
major=${soname##*.so.}
package=libsluice$major
symbols=debian/$package.symbols

# The library's ABI as the baseline keeps it; type ids from hashes stay put
# when unrelated types come and go.
dump_abi() {
  abidw --no-comp-dir-path --no-corpus-path --type-id-style hash "$lib"
}

# abidiff BASELINE LIB [OPTIONS...]: only the types defined in the public
# headers count (a suppression keyed on the full path: abidiff's own
# --headers-dir matches base names, and src/sem/sem.h would pass for
# include/sluice/sem.h). --redundant reports every function a change
# reaches, not only the first one, which may be a private path.
compare() {
  printf '[suppress_type]\n  source_location_not_regexp = (^|/)include/sluice/[^/]*\\.h$\n' \
    >"$tmp/public.suppr"
  abidiff --redundant --suppressions "$tmp/public.suppr" "$@"
}

# Exported symbols as dpkg-gensymbols names them: name@VERSION (a version
# node's own symbol, which readelf shows bare, is NODE@NODE).
exported() {
  readelf --dyn-syms -W "$lib" | awk '$5 == "GLOBAL" && $7 != "UND" {
    if ($8 !~ /@/) $8 = $8 "@" $8
    sub(/@@/, "@", $8)
    print $8
  }' | sort -u
}

write_symbols() {
  local version old=$1
  version=$(meson introspect --projectinfo "$build" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])') || return 1
  {
    echo "$soname $package #MINVER#"
    echo "* Build-Depends-Package: libsluice-dev"
    # A symbol keeps the version that first had it.
    exported | while read -r s; do
      v=$(awk -v s="$s" '$1 == s { print $2 }' "$old" 2>/dev/null)
      echo " $s ${v:-$version}"
    done
  } >"$symbols.new" && mv "$symbols.new" "$symbols"
}

if [ "$mode" = update ]; then
  if ! dump_abi >"$baseline.new"; then
    echo "abi.sh: abidw failed" >&2
    rm -f "$baseline.new"
    exit 1
  fi
  mv "$baseline.new" "$baseline"
  old=$(mktemp)
  # A new soname starts its symbols afresh, at the current version.
  [ -f "$symbols" ] && cp "$symbols" "$old"
  write_symbols "$old" || { rm -f "$old"; exit 1; }
  rm -f "$old"
  for f in debian/libsluice*.symbols; do
    [ "$f" = "$symbols" ] || { git rm -q "$f" 2>/dev/null || rm -f "$f"; echo "abi.sh: removed $f"; }
  done
  echo "abi.sh: wrote $baseline and $symbols for $soname ($(exported | wc -l) symbols)"
  git -C "$root" status --short -- "$baseline" debian/ src/sluice.sym
  exit 0
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# report FILE: the functions abidiff names, then the first of its details.
report() {
  grep -E '^ +\[[ACD]\] ' "$1" | sed 's/ at [^ ]*:[0-9]*:[0-9]*//' | head -n 30
  echo "details (the first 40 lines):"
  grep -vE '^ +\[[ACD]\] |^$' "$1" | head -n 40
}

tap_plan 5
base_soname=$(sed -n "s/.*<abi-corpus [^>]* soname='\([^']*\)'.*/\1/p" "$baseline" 2>/dev/null | head -n1)
arch=$(sed -n "s/.*<abi-corpus [^>]* architecture='\([^']*\)'.*/\1/p" "$baseline" 2>/dev/null | head -n1)
dump_abi >"$tmp/now.abi"
now_arch=$(sed -n "s/.*<abi-corpus [^>]* architecture='\([^']*\)'.*/\1/p" "$tmp/now.abi" | head -n1)
if [ "$soname" = "$base_soname" ]; then
  tap_ok "$soname is the baseline's soname"
else
  tap_not_ok "$soname is the baseline's soname" \
    "$baseline is for '${base_soname:-nothing}'. A bumped soname takes a fresh baseline" \
    "in the same commit: scripts/abi.sh update"
fi

if [ "$arch" != "$now_arch" ]; then
  for what in "no incompatible change since the baseline" "the baseline has every exported function"; do
    tap_ok "$what # SKIP the baseline is for $arch, this library for $now_arch"
  done
else
  if compare --no-added-syms "$baseline" "$lib" >"$tmp/incompat" 2>&1; then
    tap_ok "no incompatible change since the baseline"
  else
    tap_not_ok "no incompatible change since the baseline" "$(report "$tmp/incompat")" \
      "This breaks programs built against $soname (docs/abi.md). Keep the ABI, or" \
      "bump sluice_soversion in src/meson.build, rename libsluice$major in debian/ and" \
      "run scripts/abi.sh update, all in one commit."
  fi
  compare "$baseline" "$lib" >"$tmp/all" 2>&1
  grep -E '^ +\[A\] ' "$tmp/all" | sed 's/ at [^ ]*:[0-9]*:[0-9]*//' | head -n 20 >"$tmp/added"
  if [ ! -s "$tmp/added" ]; then
    tap_ok "the baseline has every exported function"
  else
    tap_not_ok "the baseline has every exported function" "$(cat "$tmp/added")" \
      "Added functions are compatible: record them with scripts/abi.sh update (and give" \
      "them a new version node in src/sluice.sym if $soname was released without them)."
  fi
fi

if grep -qx "Package: $package" debian/control && [ -f "$symbols" ]; then
  tap_ok "debian/ packages $soname as $package"
else
  tap_not_ok "debian/ packages $soname as $package" \
    "debian/control needs 'Package: $package' (and its .install, .symbols and the -dev" \
    "package's Depends renamed); scripts/abi.sh update writes $symbols"
fi

exported >"$tmp/lib"
sed -n 's/^ \([^ ]*\) .*/\1/p' "$symbols" 2>/dev/null | sort -u >"$tmp/sym"
if [ -s "$tmp/lib" ] && cmp -s "$tmp/lib" "$tmp/sym"; then
  tap_ok "$symbols lists exactly the exported symbols"
else
  tap_not_ok "$symbols lists exactly the exported symbols" \
    "$(diff "$tmp/sym" "$tmp/lib" | sed -n 's/^< / not exported: /p; s/^> / not listed: /p')" \
    "scripts/abi.sh update rewrites it"
fi
exit "$tap_status"
