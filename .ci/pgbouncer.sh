#!/usr/bin/env bash
# Installs Debian's pgbouncer if missing and makes sure one runs on
# 127.0.0.1:6432 in front of the PostgreSQL test database, for the store
# tests behind a pooler (see README, "Behind a pooler"). Idempotent: a
# PgBouncer already running there is given the current config (RELOAD).
#
# Databases (aliases) it serves, all pointing at 127.0.0.1:5432 and the
# database GATECOUNT_TEST_POSTGRES_URL names ("test" by default):
#   gatecount_tx          pool_mode=transaction
#   gatecount_session     pool_mode=session
#   gatecount_tx_scratch  pool_mode=transaction, search_path set to the
#                         schema gatecount_pgbouncer_scratch on each server
#                         connection (tests and benchmarks that need an
#                         empty schema behind the pooler recreate it)
#   gatecount_tx_bench    pool_mode=transaction, search_path
#                         gatecount_pgbouncer_bench and synchronous_commit
#                         off on each server connection (the benchmarks)
# and the admin console (database pgbouncer, user postgres), on which the
# tests send RECONNECT. Auth is trust, as the test server's.
set -euo pipefail

dir=${GATECOUNT_PGBOUNCER_DIR:-/tmp/gatecount-pgbouncer}
port=6432
url=${GATECOUNT_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
db=${url##*/}
db=${db%%\?*}

if ! command -v pgbouncer >/dev/null 2>&1 && ! test -x /usr/sbin/pgbouncer; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  # The package's own service, where an init system started it, holds the
  # port with the package's config: this script runs its own.
  if command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now pgbouncer >/dev/null 2>&1 || true
  fi
  service pgbouncer stop >/dev/null 2>&1 || true
fi
bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)

mkdir -p "$dir"
cat >"$dir/userlist.txt" <<EOF
"postgres" ""
EOF
cat >"$dir/pgbouncer.ini" <<EOF
[databases]
gatecount_tx = host=127.0.0.1 port=5432 dbname=$db pool_mode=transaction
gatecount_session = host=127.0.0.1 port=5432 dbname=$db pool_mode=session pool_size=20
gatecount_tx_scratch = host=127.0.0.1 port=5432 dbname=$db pool_mode=transaction connect_query='SET search_path = gatecount_pgbouncer_scratch'
gatecount_tx_bench = host=127.0.0.1 port=5432 dbname=$db pool_mode=transaction connect_query='SET search_path = gatecount_pgbouncer_bench; SET synchronous_commit = off'

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = 10
server_idle_timeout = 30
max_client_conn = 500
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
log_connections = 0
server_login_retry = 1
log_disconnections = 0
EOF
if [ "$(id -u)" = 0 ]; then
  chown -R postgres: "$dir"
fi

admin() { psql -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d pgbouncer -c "$1" >/dev/null 2>&1; }

if admin 'SHOW VERSION'; then
  admin 'RELOAD'
  echo "pgbouncer: running on 127.0.0.1:$port (config reloaded)"
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  "$bin" -d -u postgres "$dir/pgbouncer.ini"
else
  "$bin" -d "$dir/pgbouncer.ini"
fi
for _ in $(seq 30); do
  if admin 'SHOW VERSION'; then
    echo "pgbouncer: started on 127.0.0.1:$port for database $db"
    exit 0
  fi
  sleep 0.2
done
echo "pgbouncer: did not start; its log, $dir/pgbouncer.log:" >&2
tail -20 "$dir/pgbouncer.log" >&2 || true
exit 1
