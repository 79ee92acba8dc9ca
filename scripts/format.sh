#!/usr/bin/env bash
# Check the C sources' layout against .clang-format (clang-format --dry-run
# --Werror) in src/ include/ test/ bench/ examples/.
#
#   scripts/format.sh          check; exit 1 if a checked file differs
#   scripts/format.sh --list   print the files that differ (all of them)
#
# Every file is checked: keep it so (clang-format -i FILE).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
command -v clang-format >/dev/null || { echo "format.sh: clang-format missing" >&2; exit 1; }
files=$(git ls-files 'src/*.[ch]' 'include/*.h' 'test/*.[ch]' 'bench/*.[ch]' 'examples/*.[ch]')
if [ "${1:-}" = --list ]; then
  for f in $files; do clang-format --dry-run --Werror "$f" 2>/dev/null || echo "$f"; done
  exit 0
fi
bad=0 checked=0
for f in $files; do
  checked=$((checked + 1))
  clang-format --dry-run --Werror "$f" || bad=$((bad + 1))
done
echo "format.sh: $checked files checked, $bad differ from .clang-format"
[ "$bad" -eq 0 ]
