#!/usr/bin/env bash
# The partition harness: a Sentinel set or a Redis Cluster and three client
# processes, each in its own network namespace, under network faults;
# prints TAP, one case per scenario and property (test/partition/check.py
# names the properties).
#
#   scripts/partition.sh [--build DIR] [--scenario NAME]... [--assert S:P,P]...
#                        [--keep DIR] [--wrap 'CMD ARGS']
#
# Scenarios, on a Sentinel set (test/partition/sentinel_set.sh) and, as
# NAME@cluster, on a Redis Cluster (cluster_set.sh); all eight by default,
# each 35-50 s (all eight about 5 minutes), bounded, torn down after:
#   cut       the master and client c1 cut off from the rest for 8 s
#   cut-long  the same for 16 s: longer than repl-timeout, which the
#             harness sets to 10 s so the run is short (it stands for the
#             default 60 s and a 70 s partition)
#   isolate   client c1 cut off alone for 4 s
#   slow      200 ms delay and 20 % loss on the master's link for 6 s
# Clients (default options; redis+sentinel:// or redis+cluster:// URL): c1
# sem+push, c2 sem+consume, c3 sem. Properties not asserted print as
# "# TODO not yet asserted" cases with the measured figure; --assert
# cut:no_overlap,... adds to (S:none clears) the properties asserted by
# default: those the library promises (docs/failures.md, "Partitions") and
# that held in every run. --build: the
# meson build holding test/partition/ (default build-ci). --keep DIR: keep
# the logs there. --wrap: run each client under CMD ARGS (split on spaces),
# e.g. valgrind; its reports fail clean_exit.
# Needs root, ip, iptables, redis-server, redis-cli and (for slow) the
# nfq_delay stand-in for netem (libnetfilter-queue); without them it skips,
# or fails under CI=true.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
netns=$root/test/partition/netns.sh
# shellcheck source=scripts/tap.sh disable=SC1091
. "$root/scripts/tap.sh"

build=$root/build-ci keep='' scenarios=() wrap=()
declare -A asserted=(
  [cut]="no_overlap,fence_guards,fence_order,no_lost,regrant_1s,clean_exit"
  [cut-long]="no_overlap,fence_guards,fence_order,no_lost,regrant_1s,clean_exit"
  [isolate]="fence_guards,fence_order,no_lost,no_dup,regrant_1s,clean_exit"
  [slow]="no_overlap,fence_guards,fence_order,no_lost,clean_exit"
  [cut@cluster]="no_overlap,fence_guards,fence_order,no_lost,regrant_1s,clean_exit"
  [cut-long@cluster]="no_overlap,fence_guards,fence_order,no_lost,regrant_1s,clean_exit"
  [isolate@cluster]="fence_guards,fence_order,no_lost,no_dup,regrant_1s,clean_exit"
  [slow@cluster]="fence_order,no_lost,clean_exit"
)
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --scenario) scenarios+=("$2"); shift 2 ;;
    --assert)
      s=${2%%:*} p=${2#*:}
      if [ "$p" = none ]; then asserted[$s]=; else asserted[$s]=${asserted[$s]:+${asserted[$s]},}$p; fi
      shift 2
      ;;
    --keep) keep=$2; shift 2 ;;
    --wrap) read -ra wrap <<<"$2"; shift 2 ;;
    -h | --help) sed -n '2,30s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "partition.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ ${#scenarios[@]} -gt 0 ] ||
  scenarios=(cut cut-long isolate slow cut@cluster cut-long@cluster isolate@cluster slow@cluster)
for s in "${scenarios[@]}"; do
  [ -n "${asserted[$s]+x}" ] || { echo "partition.sh: unknown scenario: $s" >&2; exit 2; }
done

driver=$build/test/partition/partition_driver
nfq=$build/test/partition/nfq_delay
missing=()
[ "$(id -u)" = 0 ] || missing+=("root")
for c in ip iptables redis-server redis-cli python3; do
  command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
[ -x "$driver" ] || missing+=("$driver (build it)")
[[ " ${scenarios[*]} " != *" slow"[@\ ]* ]] || [ -x "$nfq" ] ||
  missing+=("$nfq (libnetfilter-queue-dev)")
if [ ${#missing[@]} -gt 0 ]; then
  [ "${CI:-}" = true ] && tap_bail "partition.sh: missing ${missing[*]}"
  echo "1..0 # SKIP missing ${missing[*]}"
  exit 0
fi

run=$$ work=$(mktemp -d /tmp/sluice-partition.XXXXXX) clients=()
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  # The namespaces, with every process inside them (all ours: netns.sh
  # ends them), then the files. No kill by a remembered pid: it may have
  # exited and been reused.
  "$netns" down "$run"
  if [ -n "$keep" ]; then
    mkdir -p "$keep" && cp -r "$work"/. "$keep"/
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2317  # also called from the sourced topology files
addr() { "$netns" addr "$1"; }
# shellcheck disable=SC2317
inns() {
  local n=$1
  shift
  "$netns" exec "$run" "$n" "$@"
}
note() { echo "$(date +%s%6N) runner $*" >>"$dir/runner.log"; }
bg() { # bg NODE CMD...: start CMD in NODE's namespace; its pid in last_pid
  local n=$1
  shift
  # netns.sh execs ip, which execs CMD: $! is CMD's pid.
  "$netns" exec "$run" "$n" "$@" >>"$dir/$n.out" 2>&1 &
  last_pid=$!
  disown $! # its end (often by netns.sh down) is no job notice
}

# shellcheck source=test/partition/sentinel_set.sh disable=SC1091
. "$root/test/partition/sentinel_set.sh"
# shellcheck source=test/partition/cluster_set.sh disable=SC1091
. "$root/test/partition/cluster_set.sh"

# start_clients SECONDS: c1 and c3 run SECONDS, c2 (the consumer) 6 s more
# to drain what was pushed.
start_clients() {
  local secs=$1 fence=$dir/fence
  : >"$fence"
  local -A modes=([c1]="sem,push" [c2]="sem,consume" [c3]="sem")
  local n
  for n in c1 c2 c3; do
    local s=$secs
    [ "$n" = c2 ] && s=$((secs + 6))
    bg "$n" "${wrap[@]}" "$driver" --url "$("${topo}_url")" --name "$n" --log "$dir/$n.log" --fence "$fence" \
      --modes "${modes[$n]}" --seconds "$s"
    clients+=("$last_pid")
  done
}

wait_clients() { # all gone, or a deadline (netns.sh down ends the rest)
  local deadline=$((SECONDS + $1)) p
  for p in "${clients[@]}"; do
    while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
  done
}

WARM=4 AFTER=12
fault() { # fault SCENARIO: make the fault, wait it out, heal; logged
  case $1 in
    cut) note cut m,c1; "$netns" cut "$run" m c1; sleep 8 ;;
    cut-long) note cut m,c1; "$netns" cut "$run" m c1; sleep 16 ;;
    isolate) note cut c1; "$netns" cut "$run" c1; sleep 4 ;;
    slow)
      bg m "$nfq" --queue 7 --delay-ms 200 --loss-pct 20 --seconds 10
      sleep 0.3
      note slow m
      "$netns" slow "$run" m 7
      sleep 6
      "$netns" fast "$run" m
      ;;
  esac
  "$netns" heal "$run"
  note heal
}
fault_secs() { case $1 in cut) echo 8 ;; cut-long) echo 16 ;; isolate) echo 4 ;; slow) echo 6 ;; esac; }

nprops=8
tap_plan $((nprops * ${#scenarios[@]}))
first=1
for s in "${scenarios[@]}"; do
  fault=${s%@*} topo=sentinel
  [ "$fault" = "$s" ] || topo=${s#*@}
  dir=$work/$s
  mkdir -p "$dir"
  t0=$SECONDS
  if "$netns" up "$run" && "${topo}_start"; then
    start_clients $((WARM + $(fault_secs "$fault") + AFTER))
    sleep $WARM
    fault "$fault"
    wait_clients $((AFTER + 20))
    clients=()
    "$netns" down "$run"
    outputs=()
    for n in c1 c2 c3; do outputs+=(--output "$dir/$n.out"); done
    python3 "$root/test/partition/check.py" --scenario "$s" --assert "${asserted[$s]}" \
      --tap-first "$first" "${outputs[@]}" "$dir"/c?.log "$dir/runner.log" || tap_status=1
    echo "# $s: failovers: $("${topo}_failovers"); $((SECONDS - t0)) s"
  else
    clients=()
    "$netns" down "$run"
    for ((i = 0; i < nprops; i++)); do tap_not_ok "$s: the $topo did not come up in time"; done
  fi
  first=$((first + nprops))
  # shellcheck disable=SC2034  # tap.sh's counter
  tap_n=$((first - 1))
done
exit "$tap_status"
