# shellcheck shell=bash disable=SC2154  # dir and the helpers: scripts/partition.sh
# The Sentinel set of scripts/partition.sh (sourced; bash): a master in
# namespace m, replicas in r1 and r2, and a sentinel beside each (so the
# master's side of a cut keeps one sentinel that still names it), with
# down-after-milliseconds 1000. repl-timeout is 10 s so that a cut longer
# than it stays short. Uses run, dir, addr, inns and bg from
# scripts/partition.sh.

sentinel_url() {
  echo "redis+sentinel://$(addr m):26379,$(addr r1):26379,$(addr r2):26379/mymaster"
}

sentinel_node_start() { # NODE: its Redis now, its sentinel's config
  local n=$1 a d=$dir/$1
  a=$(addr "$n")
  mkdir -p "$d"
  local extra=()
  [ "$n" = m ] || extra=(--replicaof "$(addr m)" 6379)
  bg "$n" redis-server --bind "$a" --port 6379 --save '' --appendonly no --protected-mode no \
    --repl-timeout 10 --repl-ping-replica-period 1 --dir "$d" --logfile "$d/redis.log" \
    "${extra[@]}"
  cat >"$d/sentinel.conf" <<EOF
port 26379
bind $a
protected-mode no
dir $d
logfile $d/sentinel.log
sentinel monitor mymaster $(addr m) 6379 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 6000
EOF
}

sentinel_field() { # NODE KEY: KEY of SENTINEL MASTER mymaster on NODE's sentinel
  inns "$1" redis-cli -h "$(addr "$1")" -p 26379 SENTINEL MASTER mymaster 2>/dev/null |
    awk -v k="$2" 'prev == k { print; exit } { prev = $0 }'
}

# Every sentinel knows both replicas and the two other sentinels.
sentinel_settled() {
  local deadline=$((SECONDS + 30)) n
  while [ $SECONDS -lt $deadline ]; do
    local ok=1
    for n in m r1 r2; do
      [ "$(sentinel_field "$n" num-slaves)" = 2 ] &&
        [ "$(sentinel_field "$n" num-other-sentinels)" = 2 ] || ok=0
    done
    [ $ok = 1 ] && return 0
    sleep 0.2
  done
  return 1
}

sentinel_start() {
  local n
  for n in m r1 r2; do sentinel_node_start "$n"; done
  sleep 0.5 # the replicas' first sync before the sentinels look
  for n in m r1 r2; do bg "$n" redis-server "$dir/$n/sentinel.conf" --sentinel; done
  sentinel_settled
}

# Switches a sentinel on the majority's side of every cut saw.
sentinel_failovers() { grep -c switch-master "$dir/r1/sentinel.log"; }
