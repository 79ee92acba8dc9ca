# A redis-server of a script's own, on a unix socket, with nothing saved.
# Sourced (bash):
#
#   source scripts/private_redis.sh
#   private_redis_start DIR   # sets private_redis_url (unix://DIR/redis.sock)
#   ...                       # and private_redis_pid; returns 1, with the
#   private_redis_stop        # server's log on stderr, if it did not come up
#
# The caller stops it, also on its way out (trap ... EXIT).
private_redis_pid=
# shellcheck disable=SC2034  # read by the script that sources this one
private_redis_url=

private_redis_start() {
  local dir=$1 sock=$1/redis.sock
  redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 \
    --save '' --appendonly no --dir "$dir" --logfile "$dir/redis.log" \
    --daemonize no </dev/null >/dev/null 2>&1 &
  private_redis_pid=$!
  # Ready once it answers; bounded at 5 s.
  for _ in $(seq 500); do
    if [ "$(redis-cli -s "$sock" ping 2>/dev/null)" = PONG ]; then
      # shellcheck disable=SC2034
      private_redis_url=unix://$sock
      return 0
    fi
    kill -0 "$private_redis_pid" 2>/dev/null || break
    sleep 0.01
  done
  echo "redis-server did not come up; its log:" >&2
  cat "$dir/redis.log" >&2
  private_redis_stop
  return 1
}

private_redis_stop() {
  if [ -n "$private_redis_pid" ]; then
    kill "$private_redis_pid" 2>/dev/null
    wait "$private_redis_pid" 2>/dev/null
    private_redis_pid=
  fi
  return 0
}
