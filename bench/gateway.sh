#!/usr/bin/env bash
# The evhttp gateway (examples/gateway.c) under wrk, with sluice on and off.
#
#   bench/gateway.sh [--duration S] [--conns "10 100"] [--modes "sluice no-sluice"]
#                    [--build DIR]
#   bench/run.sh gateway            (the same)
#
# Modes: sluice, sluice-fair (the semaphore fair: --fair), sluice-local
# (--local-handoff: a released permit goes straight to a request waiting in
# the same gateway), no-sluice.
# Builds the release build (build-bench/, as bench/run.sh does), starts a
# private redis-server on a unix socket in a temporary directory, and for
# each mode (sluice, no-sluice) and connection count runs the gateway and
# "wrk -t1 -cN -dS --latency" against it over loopback (default 10 s a cell).
# Pinning (bench/README.md): the gateway alone on the second CPU;
# redis-server and wrk share the first (in no-sluice mode Redis is idle).
# Prints one table row per cell:
#   req/s, p50/p99 latency     from wrk;
#   non-200                    wrk's "Non-2xx or 3xx responses";
#   Redis calls/req            INFO commandstats deltas of the commands the
#                              gateway sends (EVALSHA, EVAL, BRPOP, ...) over
#                              the requests the gateway counted (GET /stats);
#   + in scripts               the same with the commands the scripts run;
#   gateway CPU us/req         utime+stime of the gateway (/proc/PID/stat);
#   Redis CPU us/req           the same for redis-server.
# Gateway options: 16 permits, 1 ms of work, queue timeout 200 ms, GCRA at
# 1,000,000/s so every request passes the limiter (it still asks Redis),
# a follow-up job every 10 requests.
set -euo pipefail

cd "$(dirname "$0")/.."

duration=10
conns="10 100"
modes="sluice no-sluice"
build=build-bench
while [ $# -gt 0 ]; do
  case $1 in
    --duration) duration=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h | --help) sed -n '2,27s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "gateway.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

scripts/deps.sh --bench
command -v wrk >/dev/null 2>&1 || { echo "gateway.sh: wrk not found (scripts/deps.sh --bench)" >&2; exit 1; }

log=$(mktemp)
if [ -f "$build/meson-private/coredata.dat" ]; then
  ninja -C "$build" examples/gateway >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; exit 1; }
else
  rm -rf "$build"
  { meson setup "$build" -Dbuildtype=release -Dtests=false && ninja -C "$build" examples/gateway; } \
    >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; exit 1; }
fi
rm -f "$log"
gateway=$build/examples/gateway
[ -x "$gateway" ] || { echo "gateway.sh: $gateway was not built (libevent_extra missing?)" >&2; exit 1; }

read -r cpu0 cpu1 < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[1] if len(c) > 1 else "")')
pin_server=() pin_gw=()
if [ -n "$cpu1" ] && command -v taskset >/dev/null 2>&1; then
  pin_server=(taskset -c "$cpu0")
  pin_gw=(taskset -c "$cpu1")
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-gwbench-XXXXXX")
server_pid= gw_pid=
cleanup() {
  for p in $gw_pid $server_pid; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

sock=$tmp/redis.sock
"${pin_server[@]}" redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no \
  --dir "$tmp" --logfile "$tmp/redis.log" --daemonize no </dev/null >/dev/null 2>&1 &
server_pid=$!
for _ in $(seq 500); do
  [ "$(redis-cli -s "$sock" ping 2>/dev/null)" = PONG ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/redis.log" >&2; server_pid=; exit 1; }
  sleep 0.01
done

# Sum of INFO commandstats calls: $1 = "top" (commands a client sends) or "all".
redis_calls() {
  redis-cli -s "$sock" info commandstats | tr -d '\r' | awk -F'[:=,]' -v which="$1" '
    /^cmdstat_/ {
      name = substr($1, 9)
      if (name == "info") next
      if (which == "all" || name ~ /^(evalsha|evalsha_ro|eval|eval_ro|brpop|script|ping|auth|select|hello|client)$/ || name ~ /^script\|/ || name ~ /^client\|/)
        sum += $3
    }
    END { print sum + 0 }'
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
clk_tck=$(getconf CLK_TCK)
# One counter of the gateway's GET /stats (HTTP/1.0 over bash's /dev/tcp:
# the server closes after answering, and no HTTP client is needed).
stat_of() {
  local v
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET /stats HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  v=$(tr -d '\r' <&3 | awk -v k="$2" '$1 == k { print $2 }')
  exec 3<&-
  echo "$v"
}
# wrk prints 850.00us, 2.65ms, 1.03s: to ms.
to_ms() {
  awk -v v="$1" 'BEGIN {
    if (v ~ /us$/) { sub(/us$/, "", v); printf "%.2f", v / 1000 }
    else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.2f", v }
    else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.2f", v * 1000 }
    else print "?" }'
}

echo "gateway.sh: redis-server $(redis-server --version | cut -d' ' -f3) on a unix socket${pin_server[*]:+, CPU $cpu0 (with wrk); gateway on CPU $cpu1}"
echo "gateway.sh: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t1, ${duration} s per cell"
printf '\n%-11s %5s %9s %8s %8s %8s %10s %11s %12s %12s\n' mode conns 'req/s' 'p50 ms' 'p99 ms' non-200 \
  'Redis/req' '+in scripts' 'gw CPU us/r' 'Redis us/r'
printf '%-11s %5s %9s %8s %8s %8s %10s %11s %12s %12s\n' ----------- ----- --------- -------- -------- \
  -------- ---------- ----------- ------------ ------------

for mode in $modes; do
  for c in $conns; do
    args=(--redis "unix://$sock" --port 0 --quiet --permits 16 --work-ms 1 --queue-timeout 200
          --rate 1000000 --followup-every 10)
    case $mode in
      sluice) ;;
      sluice-fair) args+=(--fair) ;;
      sluice-local) args+=(--local-handoff) ;;
      no-sluice) args+=(--no-sluice) ;;
      *) echo "gateway.sh: unknown mode $mode" >&2; exit 2 ;;
    esac
    redis-cli -s "$sock" flushall >/dev/null
    "${pin_gw[@]}" "$gateway" "${args[@]}" >"$tmp/gw.out" 2>"$tmp/gw.err" &
    gw_pid=$!
    port=
    for _ in $(seq 500); do
      port=$(sed -n 's/^gateway listening on .*:\([0-9]*\) .*/\1/p' "$tmp/gw.out")
      [ -n "$port" ] && break
      sleep 0.01
    done
    [ -n "$port" ] || { cat "$tmp/gw.err" >&2; exit 1; }
    url=http://127.0.0.1:$port/
    # Warm-up: connections, scripts, the semaphore's keys.
    "${pin_server[@]}" wrk -t1 -c"$c" -d1s "$url" >/dev/null
    sleep 0.2
    r0=$(stat_of "$port" requests) top0=$(redis_calls top) all0=$(redis_calls all)
    g0=$(cpu_ticks "$gw_pid") s0=$(cpu_ticks "$server_pid")
    "${pin_server[@]}" wrk -t1 -c"$c" -d"${duration}s" --latency "$url" >"$tmp/wrk.out"
    g1=$(cpu_ticks "$gw_pid") s1=$(cpu_ticks "$server_pid")
    sleep 0.3  # the last requests and follow-ups settle before counting
    r1=$(stat_of "$port" requests) top1=$(redis_calls top) all1=$(redis_calls all)
    kill -TERM "$gw_pid"
    wait "$gw_pid" || { echo "gateway.sh: the gateway exited with $?" >&2; cat "$tmp/gw.err" >&2; exit 1; }
    gw_pid=
    rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$tmp/wrk.out")
    p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$tmp/wrk.out")")
    p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$tmp/wrk.out")")
    non200=$(awk '/Non-2xx/ { print $NF }' "$tmp/wrk.out")
    errs=$(awk '/Socket errors/ { print }' "$tmp/wrk.out")
    [ -n "$errs" ] && echo "gateway.sh: $mode c=$c: $errs" >&2
    n=$((r1 - r0))
    [ "$n" -gt 0 ] || { echo "gateway.sh: no requests counted" >&2; cat "$tmp/wrk.out" >&2; exit 1; }
    # The gateway does not count its own GET /stats in "requests".
    printf '%-11s %5d %9s %8s %8s %8s %10.2f %11.2f %12.1f %12.1f\n' "$mode" "$c" "$rps" "$p50" "$p99" \
      "${non200:-0}" \
      "$(awk -v a="$top0" -v b="$top1" -v n="$n" 'BEGIN { print (b - a) / n }')" \
      "$(awk -v a="$all0" -v b="$all1" -v n="$n" 'BEGIN { print (b - a) / n }')" \
      "$(awk -v a="$g0" -v b="$g1" -v n="$n" -v t="$clk_tck" 'BEGIN { print (b - a) / t * 1e6 / n }')" \
      "$(awk -v a="$s0" -v b="$s1" -v n="$n" -v t="$clk_tck" 'BEGIN { print (b - a) / t * 1e6 / n }')"
  done
done
