#!/usr/bin/env bash
# Header test: every public header compiles on its own and all of them
# together, as C99 with -pedantic and as C11, with gcc and clang, warnings
# as errors. Users compile our headers with their flags, not ours: a typedef
# repeated in two headers, for one, is legal C11 but an error in C99.
#
#   test_headers.sh INCLUDE_DIR HEADER...
#
# Prints TAP, one case per compiler, standard and translation unit. A missing
# compiler is skipped (at least one must exist). Needs no Redis.
set -u

if [ $# -lt 2 ]; then
  echo "usage: $0 INCLUDE_DIR HEADER..." >&2
  exit 2
fi
inc=$1
shift
names=()
for h in "$@"; do names+=("$(basename "$h")"); done

compilers=()
for c in gcc clang; do command -v "$c" >/dev/null 2>&1 && compilers+=("$c"); done
if [ ${#compilers[@]} -eq 0 ]; then
  echo "1..0 # SKIP neither gcc nor clang found"
  exit 77
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# One translation unit per header, then one with all of them (in both
# orders, so no header relies on another having come first).
units=()
for n in "${names[@]}"; do
  printf '#include <sluice/%s>\nint main(void) { return 0; }\n' "$n" >"$tmp/alone_${n%.h}.c"
  units+=("alone_${n%.h}")
done
{ for n in "${names[@]}"; do echo "#include <sluice/$n>"; done
  echo 'int main(void) { return 0; }'; } >"$tmp/all.c"
{ for ((i = ${#names[@]} - 1; i >= 0; i--)); do echo "#include <sluice/${names[$i]}>"; done
  echo 'int main(void) { return 0; }'; } >"$tmp/all_reversed.c"
units+=(all all_reversed)

stds=("-std=c99 -pedantic" "-std=c11 -pedantic" "-std=c11")
echo "1..$(( ${#compilers[@]} * ${#stds[@]} * ${#units[@]} ))"
n=0 status=0
for cc in "${compilers[@]}"; do
  for std in "${stds[@]}"; do
    for u in "${units[@]}"; do
      n=$((n + 1))
      # shellcheck disable=SC2086
      if "$cc" $std -Wall -Wextra -Werror -fsyntax-only -I"$inc" "$tmp/$u.c" \
          >"$tmp/out" 2>&1; then
        echo "ok $n - $cc $std: $u"
      else
        echo "not ok $n - $cc $std: $u"
        sed 's/^/#   /' "$tmp/out" | tee /dev/stderr
        status=1
      fi
    done
  done
done
exit $status
