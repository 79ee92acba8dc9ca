#!/usr/bin/env bash
# Fault soak: every primitive in several processes while redis-server is
# hurt (connections killed, SIGSTOP stalls, kill -9 restarts with AOF,
# SCRIPT FLUSH, DEBUG SLEEP) and semaphore client processes are killed and
# stopped; invariants checked, recovery times measured.
#
#   scripts/soak.sh [SECONDS] [-- soak options: --workers N --seed S --verbose]
#
# SECONDS defaults to 60. Builds test/soak in $SLUICE_SOAK_BUILD (default
# build-soak, debugoptimized, --werror) unless it is already built there,
# then runs it; the soak starts its own redis-server on a unix socket in a
# temporary directory (no TCP) and stops it. The last line is
# "soak: N faults, M operations, V violations (...)"; the exit status is 0
# only with no violation. Needs what scripts/deps.sh installs.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
seconds=60
if [ $# -gt 0 ] && [ "$1" != -- ]; then
  case $1 in
    -h | --help) sed -n '2,14s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *[!0-9]* | '') echo "soak.sh: SECONDS must be a number: $1" >&2; exit 2 ;;
  esac
  seconds=$1
  shift
fi
[ "${1:-}" = -- ] && shift

dir=${SLUICE_SOAK_BUILD:-build-soak}
if [ ! -f "$dir/meson-private/coredata.dat" ]; then
  meson setup "$dir" --werror -Dbuildtype=debugoptimized >/dev/null || exit 2
fi
ninja -C "$dir" test/soak >/dev/null || { echo "soak.sh: build failed (ninja -C $dir test/soak)" >&2; exit 2; }

# The whole run is bounded: the soak's own drain and reap limits are about
# 40 s past SECONDS; this is the backstop if the soak itself hangs (on
# SIGTERM it kills its redis-server; the workers follow their parent).
exec timeout --kill-after=10 $((seconds + 120)) "$dir/test/soak" --seconds "$seconds" "$@"
