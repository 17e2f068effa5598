#!/usr/bin/env bash
# Starts a Redis Cluster of three masters, no replicas, on loopback ports
# (7000, 7001 and 7002 unless REDIS_CLUSTER_PORTS says otherwise), unless one
# is already running and healthy there. Idempotent: run it as often as you
# like. Nodes keep no data on disk (no RDB, no AOF); their cluster
# configuration lives in REDIS_CLUSTER_DIR (default /tmp/gatecount-redis-cluster).
#
# cluster-require-full-coverage no: a master that stops makes only its own
# slots fail, so the limiters on the other masters keep counting (the
# failover test of store/redis checks it).
set -euo pipefail

ports=(${REDIS_CLUSTER_PORTS:-7000 7001 7002})
dir=${REDIS_CLUSTER_DIR:-/tmp/gatecount-redis-cluster}
cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }

healthy() {
  for p in "${ports[@]}"; do
    info=$(cli "$p" cluster info 2>/dev/null) || return 1
    grep -q '^cluster_state:ok' <<<"$info" || return 1
    grep -q "^cluster_known_nodes:${#ports[@]}" <<<"$info" || return 1
    grep -q '^cluster_slots_assigned:16384' <<<"$info" || return 1
  done
}

if healthy; then
  echo "redis cluster: healthy on ${ports[*]}"
  exit 0
fi

command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }
mkdir -p "$dir"
for p in "${ports[@]}"; do
  if ! cli "$p" ping >/dev/null 2>&1; then
    redis-server --daemonize yes --bind 127.0.0.1 --port "$p" \
      --cluster-enabled yes --cluster-config-file "$dir/nodes-$p.conf" \
      --cluster-node-timeout 2000 --cluster-require-full-coverage no \
      --dir "$dir" --save "" --appendonly no \
      --logfile "$dir/redis-$p.log" --pidfile "$dir/redis-$p.pid"
  fi
done
for p in "${ports[@]}"; do
  for _ in $(seq 50); do cli "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  cli "$p" ping >/dev/null
done

# Nodes that came back with their configuration rejoin by themselves; give
# them a moment before starting over.
known=$(cli "${ports[0]}" cluster info | tr -d '\r' | sed -n 's/^cluster_known_nodes://p')
if [ "${known:-1}" -gt 1 ]; then
  for _ in $(seq 30); do healthy && { echo "redis cluster: rejoined on ${ports[*]}"; exit 0; }; sleep 0.2; done
fi

# Start over: empty every node and forget any earlier cluster, then create it.
for p in "${ports[@]}"; do
  cli "$p" flushall >/dev/null
  cli "$p" cluster reset hard >/dev/null
done
addrs=()
for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
for _ in $(seq 100); do healthy && { echo "redis cluster: created on ${ports[*]}"; exit 0; }; sleep 0.1; done
echo "redis cluster: not healthy after creation on ${ports[*]}" >&2
for p in "${ports[@]}"; do cli "$p" cluster info | head -3 >&2 || true; done
exit 1
