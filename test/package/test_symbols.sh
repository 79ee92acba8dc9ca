#!/usr/bin/env bash
# Symbol test: the shared library, src/sluice.sym and the public headers must
# agree on the public API.
#
#   test_symbols.sh LIBSLUICE.so SLUICE.sym HEADER...
#
# Three places name every public function:
#   - the headers, as "SLUICE_EXPORT <type> sluice_x(...)";
#   - src/sluice.sym, the linker version script (one "sluice_x;" a line);
#   - the built library's dynamic symbol table.
# A function declared SLUICE_EXPORT but missing from the .sym stays local (a
# link error for users); a .sym entry nobody defines or exports is a broken
# promise; a sluice_* export that is in neither is an accident. Prints TAP,
# naming every offending symbol. Exits 77 (skip) without readelf or nm.
set -u

if [ $# -lt 3 ]; then
  echo "usage: $0 LIBSLUICE.so SLUICE.sym HEADER..." >&2
  exit 2
fi
lib=$1 sym=$2
shift 2

if command -v readelf >/dev/null 2>&1; then
  # Defined (section index not UND), global, default-visibility dynamic symbols.
  exported() {
    readelf --dyn-syms -W "$lib" |
      awk '$5 == "GLOBAL" && $6 == "DEFAULT" && $7 != "UND" { sub(/@.*/, "", $8); print $8 }'
  }
elif command -v nm >/dev/null 2>&1; then
  exported() { nm -D --defined-only "$lib" | awk '{ sub(/@.*/, "", $3); print $3 }'; }
else
  echo "1..0 # SKIP neither readelf nor nm found"
  exit 77
fi

if [ ! -f "$lib" ] || [ ! -f "$sym" ]; then
  echo "Bail out! missing $lib or $sym"
  exit 1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

exported | grep '^sluice_' | sort -u >"$tmp/lib"
# "sluice_x;" entries of the version script, comments removed.
perl -0777 -pe 's{/\*.*?\*/}{}gs' "$sym" |
  grep -oE '\bsluice_[A-Za-z0-9_]+[[:space:]]*;' | tr -d ' \t;' | sort >"$tmp/sym"
# Functions declared SLUICE_EXPORT, with comments removed and declarations
# joined so a prototype split over lines still reads as one.
for h in "$@"; do
  perl -0777 -pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' "$h" | tr '\n' ' ' |
    grep -oE 'SLUICE_EXPORT[^;{}()]*\(' |
    grep -oE '\bsluice_[A-Za-z0-9_]+[[:space:]]*\($' | tr -d ' \t(' |
    sed "s|\$| $(basename "$h")|"
done | sort -u >"$tmp/hdr_where"
cut -d' ' -f1 "$tmp/hdr_where" | sort -u >"$tmp/hdr"

status=0
n=0
# check NAME DESCRIPTION FILE-OF-OFFENDERS HINT
check() {
  n=$((n + 1))
  if [ -s "$3" ]; then
    echo "not ok $n - $2"
    # On stdout for the TAP log, on stderr for meson's console report.
    while read -r s; do echo "#   $s${4:+: $4}"; done <"$3" | tee /dev/stderr
    status=1
  else
    echo "ok $n - $2"
  fi
}

echo "1..5"
dups=$(uniq -d "$tmp/sym")
printf '%s\n' "$dups" | sed '/^$/d' >"$tmp/dups"
check dups "src/sluice.sym lists each symbol once" "$tmp/dups" "listed more than once"

sort -u -o "$tmp/sym" "$tmp/sym"
comm -23 "$tmp/hdr" "$tmp/sym" >"$tmp/hdr_not_sym"
while read -r s; do
  grep "^$s " "$tmp/hdr_where" | head -n1 | cut -d' ' -f2 >"$tmp/where"
  echo "$s (declared in $(cat "$tmp/where")) is missing: add \"$s;\" under global: in src/sluice.sym"
done <"$tmp/hdr_not_sym" >"$tmp/a"
check a "every SLUICE_EXPORT function is in src/sluice.sym" "$tmp/a" ""

comm -13 "$tmp/hdr" "$tmp/sym" >"$tmp/b"
check b "every src/sluice.sym entry is declared SLUICE_EXPORT in a public header" "$tmp/b" \
  "declare it with SLUICE_EXPORT in include/sluice/*.h, or drop it from src/sluice.sym"

comm -23 "$tmp/sym" "$tmp/lib" >"$tmp/c"
check c "every src/sluice.sym entry is exported by $(basename "$lib")" "$tmp/c" \
  "not exported: define it (non-static) in src/ and give its prototype SLUICE_EXPORT"

comm -13 "$tmp/sym" "$tmp/lib" >"$tmp/d"
check d "every sluice_* export of $(basename "$lib") is in src/sluice.sym" "$tmp/d" \
  "exported but not listed: add it to src/sluice.sym, or make it static / sluice__ internal"

exit $status
