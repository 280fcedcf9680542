#!/usr/bin/env bash
# Start (or reuse) a throw-away PostgreSQL server for the test suite, on loopback only.
# Prints the SQLAlchemy URL of its database. Usage: scripts/test-postgres.sh start|stop
set -euo pipefail
PGPORT="${C4_TEST_PG_PORT:-54329}"
PGDATA_DIR="${C4_TEST_PG_DIR:-/tmp/c4-test-pg}"
BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
[ -n "$BIN" ] || { echo "PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }
RUN=()
if [ "$(id -u)" = "0" ]; then RUN=(runuser -u postgres --); fi

case "${1:-start}" in
  start)
    if [ ! -f "$PGDATA_DIR/PG_VERSION" ]; then
      mkdir -p "$PGDATA_DIR"
      [ "$(id -u)" = "0" ] && chown postgres:postgres "$PGDATA_DIR"
      "${RUN[@]}" "$BIN/initdb" -D "$PGDATA_DIR" -A trust -U postgres >/dev/null
    fi
    if ! "${RUN[@]}" "$BIN/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1; then
      "${RUN[@]}" "$BIN/pg_ctl" -D "$PGDATA_DIR" -w -t 60 -l "$PGDATA_DIR/server.log" \
        -o "-p $PGPORT -k $PGDATA_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null
    fi
    "${RUN[@]}" "$BIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='c4test'" | grep -q 1 \
      || "${RUN[@]}" "$BIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -qc "CREATE DATABASE c4test" >/dev/null
    echo "postgresql+psycopg://postgres@127.0.0.1:$PGPORT/c4test"
    ;;
  stop)
    "${RUN[@]}" "$BIN/pg_ctl" -D "$PGDATA_DIR" -m fast stop >/dev/null 2>&1 || true
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
