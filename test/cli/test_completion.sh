#!/usr/bin/env bash
# The bash completion of `sluice` (src/cli/completion.bash), driven as bash
# drives it (COMP_WORDS, COMP_CWORD, then the function `complete` names)
# against the built tool, whose --help it reads.
#
#   test_completion.sh COMPLETION.bash SLUICE
#
# Prints TAP; needs no Redis.
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 COMPLETION.bash SLUICE" >&2
  exit 2
fi
# shellcheck source=/dev/null
source "$1" || { echo "Bail out! cannot source $1"; exit 1; }
tool=$2

n=0 status=0
# offers "WORDS..." EXPECTED...: completing the last word offers every
# EXPECTED word (and, with EXPECTED "-", nothing at all).
offers() {
  local words=$1 want
  shift
  read -r -a COMP_WORDS <<<"$tool $words"
  [[ $words == *" " || -z $words ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  _sluice
  local got=" ${COMPREPLY[*]} " missing=()
  if [ "$1" = - ]; then
    [ ${#COMPREPLY[@]} -eq 0 ] || missing=("nothing, but got:$got")
  else
    for want in "$@"; do [[ $got == *" $want "* ]] || missing+=("$want"); done
  fi
  n=$((n + 1))
  if [ ${#missing[@]} -eq 0 ]; then
    echo "ok $n - sluice $words<TAB> offers $*"
  else
    echo "not ok $n - sluice $words<TAB> offers $*"
    echo "#   missing: ${missing[*]}; offered:$got" | tee /dev/stderr
    status=1
  fi
}

n=1
if [ "$(complete -p sluice 2>/dev/null)" = "complete -F _sluice sluice" ]; then
  echo "ok 1 - complete -F _sluice sluice"
else
  echo "not ok 1 - complete -F _sluice sluice"
  status=1
fi
offers "" sem rl dq top --help --version
offers "sem " run status release
offers "dq " push consume status schedule
offers "dq schedule " set list remove next
offers "dq schedule set q t @daily --" --payload --run
offers "sem run lock --" --ttl --wait --no-wait --fair --permits --redis --prefix
offers "sem run lock -" -n
offers "dq consume jobs -" -j --concurrency --visibility --timeout --max-attempts --retry-delay --count
offers "top --" --once --interval --redis
offers "rl check api k --algo " fixed sliding-log sliding-counter gcra
offers "rl wait api k --algo sl" sliding-log sliding-counter
offers "sem run lock --ttl " -
offers "sem status lock --redis red" redis:// rediss:// redis+sentinel:// redis+cluster://
offers "sem run lock -n 2 -- ech" echo
offers "dq push jobs " -
echo "1..$n"
exit $status
