#!/usr/bin/env bash
# A throwaway PostgreSQL server for Rewind's tests.
#
#   bash scripts/pg.sh start   # initdb + start on 127.0.0.1:${REWIND_PG_PORT:-55432}; prints the URL
#   bash scripts/pg.sh url     # prints the URL (postgresql://postgres@127.0.0.1:PORT/rewind_test)
#   bash scripts/pg.sh status  # exit 0 if it is accepting connections
#   bash scripts/pg.sh stop    # stops it and removes its data dir
#
#   export REWIND_TEST_PG_URL=$(bash scripts/pg.sh start)
#
# Installs nothing: it needs the PostgreSQL server binaries (apt package `postgresql`). The data
# dir is /tmp/rewind-pg-$PORT (override with REWIND_PG_DIR). initdb refuses to run as root, so
# as root every server command runs as the `postgres` user (runuser, else su). Authentication is
# `trust` on 127.0.0.1 only: this is a test server, never a real one. Idempotent: `start` on a
# running server prints its URL; `stop` on a stopped one succeeds.
set -euo pipefail

PORT="${REWIND_PG_PORT:-55432}"
DIR="${REWIND_PG_DIR:-/tmp/rewind-pg-$PORT}"
DB="rewind_test"
URL="postgresql://postgres@127.0.0.1:$PORT/$DB"
PGUSER_OS="postgres"

die() { echo "pg.sh: $*" >&2; exit 1; }

has_all() {
    local d="$1" b
    for b in initdb pg_ctl pg_isready psql; do [[ -x "$d/$b" ]] || return 1; done
}

find_bin() {
    if [[ -n "${PG_BIN:-}" ]]; then
        has_all "$PG_BIN" || die "PG_BIN=$PG_BIN lacks one of initdb, pg_ctl, pg_isready, psql"
        echo "$PG_BIN"; return
    fi
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if has_all "$d"; then echo "$d"; return; fi
    done
    # elsewhere (Homebrew, a source build): where pg_ctl really lives, symlinks resolved
    if command -v pg_ctl >/dev/null 2>&1; then
        d="$(dirname "$(readlink -f "$(command -v pg_ctl)")")"
        if has_all "$d"; then echo "$d"; return; fi
    fi
    die "PostgreSQL server binaries not found (initdb, pg_ctl, pg_isready, psql in /usr/lib/postgresql/*/bin or beside pg_ctl on PATH); install the apt package 'postgresql' or set PG_BIN"
}

# run a command as the postgres OS user when we are root; as ourselves otherwise
as_pg() {
    if [[ "$(id -u)" -eq 0 ]]; then
        id "$PGUSER_OS" >/dev/null 2>&1 || die "running as root but there is no '$PGUSER_OS' user to run the server as (initdb refuses root)"
        if command -v runuser >/dev/null 2>&1; then
            runuser -u "$PGUSER_OS" -- "$@"
        else
            local q; printf -v q '%q ' "$@"
            su -s /bin/sh "$PGUSER_OS" -c "$q"
        fi
    else
        "$@"
    fi
}

is_running() {
    [[ -f "$DIR/data/PG_VERSION" ]] || return 1
    as_pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1
}

ready() {
    "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U postgres >/dev/null 2>&1
}

psql_q() {
    "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d postgres "$@"
}

start() {
    if is_running; then
        ensure_db
        echo "$URL"
        return
    fi
    if ready; then
        die "something else is already listening on 127.0.0.1:$PORT; set REWIND_PG_PORT to a free port"
    fi
    mkdir -p "$DIR"
    if [[ "$(id -u)" -eq 0 ]]; then chown "$PGUSER_OS" "$DIR"; fi
    chmod 700 "$DIR"
    if [[ ! -f "$DIR/data/PG_VERSION" ]]; then
        rm -rf "$DIR/data"
        as_pg "$BIN/initdb" -D "$DIR/data" -U postgres --auth=trust --encoding=UTF8 \
            --locale=C >"$DIR/initdb.log" 2>&1 \
            || { cat "$DIR/initdb.log" >&2; die "initdb failed in $DIR/data (log above)"; }
    fi
    # fsync off: a throwaway test server; the socket dir is ours so /var/run need not exist
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$DIR -c fsync=off -c max_connections=200" \
        >/dev/null 2>&1 \
        || { tail -n 30 "$DIR/server.log" >&2 || true; die "the server did not start on port $PORT (server log above: $DIR/server.log)"; }
    local i
    for i in $(seq 1 100); do
        ready && break
        sleep 0.1
    done
    ready || die "the server started but does not accept connections on 127.0.0.1:$PORT"
    ensure_db
    echo "$URL"
}

ensure_db() {
    local exists
    exists="$(psql_q -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" \
        || die "cannot query the server on 127.0.0.1:$PORT"
    if [[ "$exists" != "1" ]]; then
        psql_q -c "CREATE DATABASE $DB" >/dev/null || die "cannot create database $DB"
    fi
}

stop() {
    if [[ -f "$DIR/data/PG_VERSION" ]]; then
        if is_running; then
            as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w -t 60 stop >/dev/null \
                || die "pg_ctl stop failed for $DIR/data"
        fi
    fi
    if [[ -d "$DIR" ]]; then
        case "$DIR" in
            /tmp/*|"${TMPDIR:-/tmp}"/*) rm -rf "$DIR" ;;
            *) die "refusing to remove $DIR (not under /tmp); remove it yourself" ;;
        esac
    fi
}

BIN="$(find_bin)"
case "${1:-}" in
    start) start ;;
    stop) stop ;;
    url) echo "$URL" ;;
    status)
        if is_running && ready; then echo "running: $URL"; else echo "stopped"; exit 1; fi ;;
    *) echo "usage: $0 start|stop|url|status   (port: REWIND_PG_PORT, default 55432)" >&2; exit 2 ;;
esac
