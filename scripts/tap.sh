# TAP from the scripts that check things (abi.sh, deb.sh, subproject.sh).
# Sourced (bash):
#
#   tap_plan N
#   tap_ok DESCRIPTION
#   tap_not_ok DESCRIPTION [LINE...]   each LINE follows as a "#   " comment
#   tap_bail REASON [LINE...]          "Bail out!", the lines, then exit 1
#   exit "$tap_status"                 1 once a case failed
tap_n=0
# shellcheck disable=SC2034  # read by the script that sources this one
tap_status=0

tap_plan() { echo "1..$1"; }
tap_ok() {
  tap_n=$((tap_n + 1))
  echo "ok $tap_n - $1"
}
tap_comment() { [ $# -eq 0 ] || printf '%s\n' "$@" | sed 's/^/#   /'; }
tap_not_ok() {
  tap_n=$((tap_n + 1))
  echo "not ok $tap_n - $1"
  shift
  tap_comment "$@"
  # shellcheck disable=SC2034
  tap_status=1
}
tap_bail() {
  echo "Bail out! $1"
  shift
  tap_comment "$@"
  exit 1
}
