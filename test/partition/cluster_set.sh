# shellcheck shell=bash disable=SC2154  # dir and the helpers: scripts/partition.sh
# The Redis Cluster of scripts/partition.sh (sourced; bash). Each of the
# namespaces m, r1 and r2 runs a master on port 6379 and a replica on 6380:
# r1:6380 replicates m:6379, r2:6380 r1:6379 and m:6380 r2:6379, so the
# master cut off with m has its replica on the other side. m:6379 serves
# every slot but the last two (one each for the masters of r1 and r2: a
# master votes in failover elections only if it serves a slot), so the
# clients' keys live on the master that the faults cut off.
# cluster-node-timeout 1000 matches the sentinels' down-after-milliseconds.
# Uses run, dir, addr, inns and bg from scripts/partition.sh.

cluster_url() {
  echo "redis+cluster://$(addr m):6379,$(addr r1):6379,$(addr r2):6379"
}

cluster_cli() { # cluster_cli NODE PORT ARGS...
  local n=$1 p=$2
  shift 2
  inns "$n" redis-cli -h "$(addr "$n")" -p "$p" "$@" 2>/dev/null
}

cluster_node_start() { # NODE PORT
  local n=$1 p=$2 d=$dir/$1-$2
  mkdir -p "$d"
  bg "$n" redis-server --bind "$(addr "$n")" --port "$p" --save '' --appendonly no \
    --protected-mode no --repl-timeout 10 --repl-ping-replica-period 1 \
    --cluster-enabled yes --cluster-config-file "$d/nodes.conf" --cluster-node-timeout 1000 \
    --cluster-replica-validity-factor 0 --dir "$d" --logfile "$d/redis.log"
}

cluster_wait() { # cluster_wait SECONDS TEST...: until TEST succeeds
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

cluster_answers() { # every node answers PING
  local n p
  for n in m r1 r2; do
    for p in 6379 6380; do [ "$(cluster_cli "$n" "$p" PING)" = PONG ] || return 1; done
  done
}

cluster_all_known() { # every node knows the six
  local n p
  for n in m r1 r2; do
    for p in 6379 6380; do
      [ "$(cluster_cli "$n" "$p" CLUSTER NODES | grep -c .)" = 6 ] || return 1
    done
  done
}

cluster_healthy() { # state ok everywhere, each replica's link up
  local n p
  for n in m r1 r2; do
    for p in 6379 6380; do
      cluster_cli "$n" "$p" CLUSTER INFO | grep -q 'cluster_state:ok' || return 1
    done
    cluster_cli "$n" 6380 INFO replication | grep -q 'master_link_status:up' || return 1
  done
}

cluster_start() {
  local n
  for n in m r1 r2; do
    cluster_node_start "$n" 6379
    cluster_node_start "$n" 6380
  done
  cluster_wait 10 cluster_answers || return 1
  cluster_cli m 6379 CLUSTER ADDSLOTSRANGE 0 16381 >/dev/null
  cluster_cli r1 6379 CLUSTER ADDSLOTS 16382 >/dev/null
  cluster_cli r2 6379 CLUSTER ADDSLOTS 16383 >/dev/null
  for n in m r1 r2; do
    for p in 6379 6380; do cluster_cli "$n" "$p" CLUSTER MEET "$(addr m)" 6379 >/dev/null; done
  done
  cluster_wait 20 cluster_all_known || return 1
  local -A of=([r1]=m [r2]=r1 [m]=r2) # replica's namespace -> its master's
  for n in m r1 r2; do
    local id
    id=$(cluster_cli "${of[$n]}" 6379 CLUSTER MYID)
    cluster_cli "$n" 6380 CLUSTER REPLICATE "$id" >/dev/null
  done
  cluster_wait 30 cluster_healthy
}

# Promotions a node on the majority's side saw (r1's replica is the one
# that takes over from m's master).
cluster_failovers() { grep -c 'Failover election won' "$dir/r1-6380/redis.log"; }
