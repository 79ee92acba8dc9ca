#!/usr/bin/env bash
# Network namespaces for the partition harness (scripts/partition.sh).
#
#   netns.sh up RUN                 create RUN's namespaces and bridge
#   netns.sh down [RUN]             remove RUN's namespaces; with no RUN,
#                                   every harness's whose creator is gone
#   netns.sh cut RUN NODE...        cut NODEs off from every other node
#   netns.sh heal RUN               undo every cut
#   netns.sh slow RUN NODE QUEUE    send NODE's traffic through NFQUEUE QUEUE
#   netns.sh fast RUN NODE          undo slow
#   netns.sh exec RUN NODE CMD...   run CMD inside NODE's namespace
#   netns.sh addr NODE              NODE's address (inside the namespaces)
#
# RUN names one run (scripts/partition.sh uses its PID), so two runs never
# share a namespace. Nodes: m r1 r2 (Redis, each with a sentinel beside it)
# and c1 c2 c3 (clients). Each node is a namespace with lo up and one veth
# into a bridge that lives in a namespace of its own, so nothing gets an
# address or an interface in the root namespace; 10.77.0.0/24 exists only
# inside. Faults are iptables rules in the nodes' own namespaces. Needs root.
set -euo pipefail

nodes=(m r1 r2 c1 c2 c3)
declare -A host=([m]=1 [r1]=2 [r2]=3 [c1]=11 [c2]=12 [c3]=13)
prefix=slp

ns_of() { echo "$prefix$1-$2"; }
addr_of() {
  [ -n "${host[$1]:-}" ] || { echo "netns.sh: unknown node: $1" >&2; exit 2; }
  echo "10.77.0.${host[$1]}"
}
nsx() {
  local ns=$1
  shift
  ip netns exec "$ns" "$@"
}

up() {
  local run=$1 br
  br=$(ns_of "$run" br)
  ip netns add "$br"
  nsx "$br" ip link set lo up
  nsx "$br" ip link add br0 type bridge
  nsx "$br" ip link set br0 up
  for n in "${nodes[@]}"; do
    local ns
    ns=$(ns_of "$run" "$n")
    ip netns add "$ns"
    nsx "$ns" ip link set lo up
    # Both ends are made inside the bridge's namespace, one moved at once:
    # the root namespace never sees them.
    ip -n "$br" link add "v-$n" type veth peer name eth0 netns "$ns"
    ip -n "$br" link set "v-$n" master br0 up
    nsx "$ns" ip addr add "$(addr_of "$n")/24" dev eth0
    nsx "$ns" ip link set eth0 up
  done
  # A bridge port starts forwarding at once (no STP); wait for the links.
  for n in "${nodes[@]}"; do
    local ns tries=0
    ns=$(ns_of "$run" "$n")
    until nsx "$ns" ip -o link show eth0 | grep -q 'state UP'; do
      tries=$((tries + 1))
      [ $tries -lt 100 ] || { echo "netns.sh: $ns: eth0 not up" >&2; exit 1; }
      sleep 0.05
    done
  done
}

# Every namespace named slp<RUN>-*: RUN's, or (no RUN) those of runs whose
# process is gone (RUN is the creator's PID).
down() {
  local run=${1:-} ns r
  for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}[0-9]*-" || true); do
    r=${ns#"$prefix"}
    r=${r%%-*}
    if [ -n "$run" ]; then
      [ "$r" = "$run" ] || continue
    elif kill -0 "$r" 2>/dev/null; then
      continue
    fi
    # Processes left in it would keep its sockets; end them first.
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
}

# One chain per kind of fault in each node, so heal and fast undo only theirs.
chain() {
  local ns=$1 name=$2
  nsx "$ns" iptables -w -N "$name" 2>/dev/null || true
  for hook in INPUT OUTPUT; do
    nsx "$ns" iptables -w -C "$hook" -j "$name" 2>/dev/null || nsx "$ns" iptables -w -A "$hook" -j "$name"
  done
}

cut() {
  local run=$1
  shift
  local -A inside=()
  for n in "$@"; do
    addr_of "$n" >/dev/null
    inside[$n]=1
  done
  for n in "$@"; do
    local ns
    ns=$(ns_of "$run" "$n")
    chain "$ns" CUT
    for o in "${nodes[@]}"; do
      [ -z "${inside[$o]:-}" ] || continue
      nsx "$ns" iptables -w -A CUT -s "$(addr_of "$o")" -j DROP
      nsx "$ns" iptables -w -A CUT -d "$(addr_of "$o")" -j DROP
    done
  done
}

heal() {
  local run=$1
  for n in "${nodes[@]}"; do
    nsx "$(ns_of "$run" "$n")" iptables -w -F CUT 2>/dev/null || true
  done
}

# --queue-bypass: while no program reads the queue, packets pass.
slow() {
  local run=$1 n=$2 q=$3 ns
  ns=$(ns_of "$run" "$n")
  chain "$ns" SLOW
  nsx "$ns" iptables -w -A SLOW -o eth0 -j NFQUEUE --queue-num "$q" --queue-bypass
  nsx "$ns" iptables -w -A SLOW -i eth0 -j NFQUEUE --queue-num "$q" --queue-bypass
}

fast() { nsx "$(ns_of "$1" "$2")" iptables -w -F SLOW 2>/dev/null || true; }

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  up) up "$1" ;;
  down) down "${1:-}" ;;
  cut) cut "$@" ;;
  heal) heal "$1" ;;
  slow) slow "$1" "$2" "$3" ;;
  fast) fast "$1" "$2" ;;
  exec)
    run=$1 n=$2
    shift 2
    addr_of "$n" >/dev/null
    exec ip netns exec "$(ns_of "$run" "$n")" "$@"
    ;;
  addr) addr_of "$1" ;;
  *) sed -n '2,12s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
