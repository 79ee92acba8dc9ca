#!/usr/bin/env bash
# Man page test: every page is clean and every public name has one.
#
#   test_man.sh MESON BUILD_DIR SLUICE_BIN SLUICE.sym CLI_DIR PAGE...
#
#   1. each page passes `mandoc -T lint -W warning` (mdoc errors, warnings);
#   2. each page renders with `man --warnings -l` without a warning;
#   3. every function of src/sluice.sym is named (.Nm) by a section 3 page,
#      and every name a page gives is a public function;
#   4. sluice(1) documents every option that `sluice ... --help` shows, every
#      environment variable the tool reads and every exit status it has;
#   5. installed (meson install --tags man into a temporary DESTDIR), `man`
#      finds a page for sluice(1) and for every public function.
# Prints TAP. Without mandoc or man it skips (exit 77), unless CI=true.
set -u

if [ $# -lt 6 ]; then
  echo "usage: $0 MESON BUILD_DIR SLUICE_BIN SLUICE.sym CLI_DIR PAGE..." >&2
  exit 2
fi
meson=$1 build=$2 sluice=$3 sym=$4 cli_dir=$5
shift 5
pages=("$@")

for tool in mandoc man; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    [ "${CI:-}" = true ] && { echo "Bail out! $tool not found (scripts/deps.sh installs it)"; exit 1; }
    echo "1..0 # SKIP $tool not found (scripts/deps.sh installs it)"
    exit 77
  fi
done

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

n=0 status=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
  n=$((n + 1))
  echo "not ok $n - $1"
  sed 's/^/#   /' "$tmp/out"
  status=1
}
check() {  # check DESCRIPTION: ok when $tmp/out is empty
  if [ -s "$tmp/out" ]; then not_ok "$1"; else ok "$1"; fi
}

# The public functions, and the names the section 3 pages give (.Nm lines).
sed -n 's/^[[:space:]]*\(sluice_[a-z0-9_]*\);.*/\1/p' "$sym" | sort -u >"$tmp/public"
man1=
for page in "${pages[@]}"; do
  case $page in */sluice.1) man1=$page ;; esac
done
for page in "${pages[@]}"; do
  case $page in *.3) sed -n 's/^\.Nm \([a-z0-9_]*\).*/\1/p' "$page" ;; esac
done | sort -u >"$tmp/named"

for page in "${pages[@]}"; do
  mandoc -T lint -W warning "$page" >"$tmp/out" 2>&1
  check "mandoc lint: ${page##*/}"
  MANWIDTH=80 man --warnings -l "$page" 2>"$tmp/out" >/dev/null
  check "man -l renders: ${page##*/}"
done

comm -23 "$tmp/public" "$tmp/named" >"$tmp/out"
check "every function of sluice.sym has a section 3 page"
comm -13 "$tmp/public" "$tmp/named" | grep -vx sluice >"$tmp/out"
check "every name of a section 3 page is a public function"

# sluice(1) against the tool itself: options from the help texts, variables
# from getenv, exit statuses from cli.h and the help.
{
  "$sluice" --help
  for cmd in "sem run" "rl check" "dq push" top agent; do
    # shellcheck disable=SC2086 # two words on purpose
    "$sluice" $cmd --help
  done
} >"$tmp/help" 2>&1
grep -o -- '--[a-z][a-z-]*' "$tmp/help" | sort -u | while read -r opt; do
  grep -q -- "^\.\(It \|Op \|\)Fl -${opt#--}\b\|Fl -${opt#--}\b" "$man1" || echo "option $opt"
done >"$tmp/out"
check "sluice(1) documents every option of the help texts"
# Variables the tool reads (getenv) or sets for CMD (quoted SLUICE_* names).
sed -n '/^\.Sh ENVIRONMENT/,/^\.Sh /p' "$man1" >"$tmp/env"
{ grep -ho 'getenv("[A-Z_]*")' "$cli_dir"/*.c | sed 's/getenv("\(.*\)")/\1/'
  grep -ho '"SLUICE_[A-Z_]*"' "$cli_dir"/*.c | tr -d '"'; } | sort -u |
  while read -r var; do
    grep -qw "$var" "$tmp/env" || echo "variable $var"
  done >"$tmp/out"
check "sluice(1) documents every environment variable of the tool"
{ sed -n 's/.*CLI_EXIT_[A-Z]* = \([0-9]*\).*/\1/p' "$cli_dir/cli.h"
  sed -n '/^Exit status/,$s/^  \([0-9][0-9]*\).*/\1/p' "$tmp/help"; } | sort -u |
  while read -r code; do
    sed -n '/^\.Sh EXIT STATUS/,/^\.Sh /p' "$man1" | grep -q "^\.It .*\b$code\b" ||
      echo "exit status $code"
  done >"$tmp/out"
check "sluice(1) documents every exit status of the tool"

# Installed: man finds every page by every name.
if "$meson" install -C "$build" --destdir "$tmp/root" --no-rebuild --tags man \
    >"$tmp/out" 2>&1; then
  mandir=$(find "$tmp/root" -type d -name man1 -path '*/man/man1' | head -n 1)
  mandir=${mandir%/man1}
  { echo sluice.1; sed 's/$/.3/' "$tmp/public"; } | while read -r name; do
    MANWIDTH=80 man -M "$mandir" "${name##*.}" "${name%.*}" 2>&1 >/dev/null ||
      echo "man ${name##*.} ${name%.*}: no page"
  done >"$tmp/out"
  check "installed, man finds sluice(1) and a page for every public function"
else
  not_ok "meson install --tags man"
fi

echo "1..$n"
exit $status
