#!/usr/bin/env bash
# Build every benchmark (release, build-bench/) and run them one after the
# other against one private redis-server, printing their tables.
#
#   bench/run.sh [--no-node] [--no-cluster] [--replica] [--redis HOST:PORT]
#                [--results DIR] [bench_NAME... | gateway]
#
# The server is pinned to the first CPU, and each benchmark pins itself to
# the second (see bench/README.md). A private 3-master Redis Cluster (no
# replicas, bench/topology.sh, also on the first CPU) runs beside it for the
# benchmarks' cluster sections (SLUICE_BENCH_CLUSTER=host:port,...);
# --no-cluster skips it. --replica gives the private server a replica
# (also on the first CPU): grants and renewals then wait for its
# acknowledgement (docs/failures.md, "Partitions"). With node and npm on PATH the Node peer libraries
# of bench/node/package.json are installed first (--no-node skips them;
# scripts/deps.sh --bench installs Node.js). --redis shares a scratch server
# of yours instead (benchmarks write keys to it; only the private server is
# flushed between benchmarks). Names select benchmarks; by default every
# executable build-bench/bench/bench_* runs but bench_failover and
# bench_crash (minutes of failovers on topologies of their own). "gateway" runs
# bench/gateway.sh (wrk against examples/gateway, its own private Redis)
# after the benchmarks named with it; it is not part of the default set.
# --results DIR keeps each benchmark's output (DIR/bench_NAME.txt), its
# tables as tab-separated values (DIR/bench_NAME.tsv) and the machine and
# time of the run (DIR/machine.txt), for bench/charts.sh DIR.
set -euo pipefail

cd "$(dirname "$0")/.."

node=1
cluster=1
replica=0
shared=
results=
only=()
while [ $# -gt 0 ]; do
  case $1 in
    --no-node) node=0; shift ;;
    --no-cluster) cluster=0; shift ;;
    --replica) replica=1; shift ;;
    --redis)
      [ $# -ge 2 ] || { echo "run.sh: --redis needs HOST:PORT" >&2; exit 2; }
      shared=$2
      shift 2 ;;
    --results)
      [ $# -ge 2 ] || { echo "run.sh: --results needs DIR" >&2; exit 2; }
      results=$2
      shift 2 ;;
    -h | --help) sed -n '2,27s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown argument: $1" >&2; exit 2 ;;
    *) only+=("$1"); shift ;;
  esac
done

[ "$replica" = 0 ] || [ -z "$shared" ] ||
  { echo "run.sh: --replica is for the private server, not --redis" >&2; exit 2; }

gateway=0
if [ ${#only[@]} -gt 0 ] && printf '%s\n' "${only[@]}" | grep -qx gateway; then
  gateway=1
  rest=()
  for b in "${only[@]}"; do [ "$b" = gateway ] || rest+=("$b"); done
  only=("${rest[@]+"${rest[@]}"}")
  [ ${#only[@]} -eq 0 ] && exec bench/gateway.sh
fi

scripts/deps.sh

if [ "$node" = 1 ] && command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  echo "run.sh: installing Node peers (npm install --prefix bench/node)"
  npm install --prefix bench/node --no-audit --no-fund --no-package-lock --silent ||
    echo "run.sh: npm install failed; Node peer benchmarks will be skipped" >&2
fi

build=build-bench
log=$(mktemp)
if [ -f "$build/meson-private/coredata.dat" ]; then
  ok=1; ninja -C "$build" >"$log" 2>&1 || ok=0
else
  rm -rf "$build"
  ok=1
  { meson setup "$build" -Dbuildtype=release -Dtests=false && ninja -C "$build"; } >"$log" 2>&1 || ok=0
fi
if [ "$ok" = 0 ]; then
  cat "$log" >&2
  rm -f "$log"
  echo "run.sh: build failed" >&2
  exit 1
fi
rm -f "$log"

benches=()
for f in "$build"/bench/bench_*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  name=$(basename "$f")
  if [ ${#only[@]} -gt 0 ]; then
    printf '%s\n' "${only[@]}" | grep -qx "$name" || continue
  elif [ "$name" = bench_failover ] || [ "$name" = bench_crash ]; then
    continue # minutes of failovers: only when named
  fi
  benches+=("$f")
done
if [ ${#benches[@]} -eq 0 ]; then
  echo "run.sh: no benchmark selected" >&2
  exit 1
fi

# The CPUs we may use (a container may not start at 0).
read -r cpu0 cpu1 < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[1] if len(c) > 1 else "")')

server_pid=
replica_pid=
tmp=
cluster_dir=
cleanup() {
  if [ -n "$replica_pid" ]; then
    kill "$replica_pid" 2>/dev/null || true
    wait "$replica_pid" 2>/dev/null || true
  fi
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  [ -n "$cluster_dir" ] && bench/topology.sh stop "$cluster_dir"
  [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "$shared" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-XXXXXX")
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  pin=()
  [ -n "$cpu1" ] && command -v taskset >/dev/null 2>&1 && pin=(taskset -c "$cpu0")
  "${pin[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" --daemonize no </dev/null >/dev/null 2>&1 &
  server_pid=$!
  for _ in $(seq 500); do
    [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/redis.log" >&2; server_pid=; exit 1; }
    sleep 0.01
  done
  shared=127.0.0.1:$port
  echo "run.sh: private redis-server at $shared${pin:+ on CPU $cpu0}; $(redis-server --version | cut -d' ' -f3)"
  if [ "$replica" = 1 ]; then
    rport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$tmp/replica"
    "${pin[@]}" redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
      --replicaof 127.0.0.1 "$port" --dir "$tmp/replica" --logfile "$tmp/replica/redis.log" \
      --daemonize no </dev/null >/dev/null 2>&1 &
    replica_pid=$!
    for _ in $(seq 1000); do
      redis-cli -p "$port" info replication 2>/dev/null | grep -q 'slave0:.*state=online' && break
      kill -0 "$replica_pid" 2>/dev/null || { cat "$tmp/replica/redis.log" >&2; replica_pid=; exit 1; }
      sleep 0.01
    done
    echo "run.sh: its replica at 127.0.0.1:$rport${pin:+ on CPU $cpu0}"
  fi
fi
export SLUICE_BENCH_REDIS=$shared
host=${shared%:*}
port=${shared##*:}

seeds=
if [ "$cluster" = 1 ]; then
  cluster_dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-cluster-XXXXXX")
  seeds=$(bench/topology.sh cluster "$cluster_dir/c" 3 0)
  export SLUICE_BENCH_CLUSTER=$seeds
  echo "run.sh: private Redis Cluster (3 masters, no replicas) at $seeds${cpu1:+ on CPU $cpu0}"
fi
# FLUSHALL on every master of the cluster (keys live on all three).
flush_cluster() {
  local a
  for a in ${seeds//,/ }; do redis-cli -h "${a%:*}" -p "${a##*:}" flushall >/dev/null; done
}

if [ -n "$results" ]; then
  mkdir -p "$results"
  results=$(cd "$results" && pwd)
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cpus: $(nproc)"
    echo "cpu: $(sed -n 's/^model name[^:]*: //p;T;q' /proc/cpuinfo)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "redis: $(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/')"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  } >"$results/machine.txt"
fi

failed=0
for b in "${benches[@]}"; do
  name=$(basename "$b")
  printf '\n===== %s =====\n' "$name"
  [ -n "$server_pid" ] && redis-cli -h "$host" -p "$port" flushall >/dev/null
  [ -n "$seeds" ] && flush_cluster
  t=$SECONDS
  run=("$b")
  if [ -n "$results" ]; then
    rm -f "$results/$name.tsv"
    export SLUICE_BENCH_TSV=$results/$name.tsv
    run=(bash -c 'set -o pipefail; "$1" | tee "$2"' run "$b" "$results/$name.txt")
  fi
  if "${run[@]}"; then
    echo "($(basename "$b"): $((SECONDS - t)) s)"
  else
    echo "($(basename "$b") FAILED after $((SECONDS - t)) s)"
    failed=$((failed + 1))
  fi
done
if [ "$gateway" = 1 ]; then
  printf '\n===== gateway =====\n'
  bench/gateway.sh || failed=$((failed + 1))
fi
[ -n "$results" ] && echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$results/machine.txt"
[ "$failed" = 0 ] || { echo "run.sh: $failed benchmark(s) failed" >&2; exit 1; }
