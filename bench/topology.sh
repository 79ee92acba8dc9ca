#!/usr/bin/env bash
# Private Redis topologies for the benchmarks, each in a directory of its own,
# every server pinned to the first CPU (the client side pins itself to the
# second, see bench/README.md).
#
#   bench/topology.sh cluster DIR MASTERS REPLICAS  # prints the seeds, host:port,...
#   bench/topology.sh sentinel DIR NAME             # master + replica + 3 sentinels;
#                                                   # prints the sentinels, host:port,...
#   bench/topology.sh single DIR [bare]             # one Redis with appendfsync everysec
#                                                   # (bare: no persistence); prints host:port
#   bench/topology.sh restart NODE_DIR              # starts a killed server of a topology
#                                                   # again, as it was started (same files)
#   bench/topology.sh stop DIR                      # kills every server of DIR, removes it
#
# A cluster uses cluster-node-timeout 1000; a Sentinel set down-after 1000 ms,
# failover-timeout 5000 ms, quorum 2 and shortened INFO/hello periods, so a
# failover takes seconds, not tens of seconds. Servers run in the background
# (pid files DIR/*/redis.pid): stop them with "stop".
set -euo pipefail

die() { echo "topology.sh: $*" >&2; exit 1; }

cpu0=$(python3 -c 'import os; print(sorted(os.sched_getaffinity(0))[0])')
ncpu=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
pin=()
[ "$ncpu" -ge 2 ] && command -v taskset >/dev/null 2>&1 && pin=(taskset -c "$cpu0")

# A free port whose cluster bus port (+10000) is free too.
free_port() {
  python3 - <<'EOF'
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    if p + 10000 > 65535:
        s.close(); continue
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 10000))
    except OSError:
        s.close(); b.close(); continue
    b.close(); s.close(); print(p); break
EOF
}

wait_ping() { # port dir
  for _ in $(seq 500); do
    [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.02
  done
  tail -5 "$2/redis.log" >&2 || true
  die "server on port $1 did not start"
}

# start_server NAME-DIR PORT EXTRA-ARGS... (kept in NAME-DIR/args for restart)
start_server() {
  local d=$1 port=$2
  shift 2
  mkdir -p "$d"
  printf '%q ' "$port" "$@" >"$d/args"
  "${pin[@]}" setsid redis-server --port "$port" --bind 127.0.0.1 --dir "$d" --save '' \
    --appendonly no --daemonize no --logfile "$d/redis.log" --pidfile "$d/redis.pid" \
    --repl-diskless-sync-delay 0 "$@" </dev/null >/dev/null 2>&1 &
  echo $! >"$d/redis.pid"
  wait_ping "$port" "$d"
}

cluster() { # dir masters replicas
  local dir=$1 masters=$2 replicas=$3 addrs=() n=$(($2 * (1 + $3)))
  mkdir -p "$dir"
  for i in $(seq 0 $((n - 1))); do
    local port
    port=$(free_port)
    start_server "$dir/n$i" "$port" --cluster-enabled yes --cluster-config-file "$dir/n$i/nodes.conf" \
      --cluster-node-timeout 1000
    addrs+=("127.0.0.1:$port")
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes \
    >"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; die "redis-cli --cluster create failed"; }
  # Every node agrees the cluster is ok and knows every replica, and every
  # replica's link is up.
  local ok=0
  for _ in $(seq 600); do
    ok=1
    for a in "${addrs[@]}"; do
      local p=${a##*:}
      redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || { ok=0; break; }
      # ...and knows every replica (gossip spreads them after the create).
      [ "$(redis-cli -p "$p" cluster nodes 2>/dev/null | awk '$3 ~ /slave/' | wc -l)" = $((masters * replicas)) ] ||
        { ok=0; break; }
      if redis-cli -p "$p" role 2>/dev/null | head -1 | grep -q slave; then
        redis-cli -p "$p" role | sed -n 4p | grep -q '^connected' || { ok=0; break; }
      fi
    done
    [ "$ok" = 1 ] && break
    sleep 0.05
  done
  [ "$ok" = 1 ] || die "cluster in $dir not ok after 30 s"
  (IFS=,; echo "${addrs[*]}")
}

sentinel() { # dir name
  local dir=$1 name=$2 mport rport sents=()
  mkdir -p "$dir"
  mport=$(free_port)
  start_server "$dir/m" "$mport"
  rport=$(free_port)
  start_server "$dir/r" "$rport" --replicaof 127.0.0.1 "$mport"
  for i in 0 1 2; do
    local d=$dir/s$i port
    port=$(free_port)
    mkdir -p "$d"
    # Sentinel rewrites its config file: each one gets its own.
    cat >"$d/sentinel.conf" <<EOF
port $port
bind 127.0.0.1
daemonize no
dir $d
logfile $d/redis.log
pidfile $d/redis.pid
sentinel resolve-hostnames no
sentinel monitor $name 127.0.0.1 $mport 2
sentinel down-after-milliseconds $name 1000
sentinel failover-timeout $name 5000
sentinel parallel-syncs $name 1
EOF
    "${pin[@]}" setsid redis-server "$d/sentinel.conf" --sentinel </dev/null >/dev/null 2>&1 &
    echo $! >"$d/redis.pid"
    wait_ping "$port" "$d"
    redis-cli -p "$port" sentinel debug info-period 1000 publish-period 500 >/dev/null 2>&1 || true
    sents+=("127.0.0.1:$port")
  done
  # Every sentinel knows the replica and the two other sentinels.
  local ok=0
  for _ in $(seq 600); do
    ok=1
    for a in "${sents[@]}"; do
      local info
      info=$(redis-cli -p "${a##*:}" sentinel master "$name" 2>/dev/null | paste -sd' ')
      [[ $info == *"num-slaves 1 "* && $info == *"num-other-sentinels 2 "* ]] || { ok=0; break; }
    done
    [ "$ok" = 1 ] && break
    sleep 0.05
  done
  [ "$ok" = 1 ] || die "sentinels in $dir not ready after 30 s"
  (IFS=,; echo "${sents[*]}")
}

single() { # dir [bare]
  local dir=$1 port persist=(--appendonly yes --appendfsync everysec)
  [ "${2:-}" = bare ] && persist=()
  mkdir -p "$dir"
  port=$(free_port)
  start_server "$dir/n" "$port" "${persist[@]}"
  echo "127.0.0.1:$port"
}

restart() { # node dir
  local d=$1
  [ -f "$d/args" ] || die "$d: not a server of a topology"
  eval "set -- $(cat "$d/args")"
  start_server "$d" "$@"
}

stop() { # dir
  local dir=$1
  [ -d "$dir" ] || return 0
  local f
  # DIR may be a topology's directory or one holding several.
  for f in $(find "$dir" -name redis.pid); do
    local pid
    pid=$(cat "$f")
    kill -CONT "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}

case ${1:-} in
  cluster) [ $# -eq 4 ] || die "usage: cluster DIR MASTERS REPLICAS"; cluster "$2" "$3" "$4" ;;
  sentinel) [ $# -eq 3 ] || die "usage: sentinel DIR NAME"; sentinel "$2" "$3" ;;
  single) [ $# -eq 2 ] || [ "$#-${3:-}" = 3-bare ] || die "usage: single DIR [bare]"; single "$2" "${3:-}" ;;
  restart) [ $# -eq 2 ] || die "usage: restart NODE_DIR"; restart "$2" ;;
  stop) [ $# -eq 2 ] || die "usage: stop DIR"; stop "$2" ;;
  *) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 2 ;;
esac
