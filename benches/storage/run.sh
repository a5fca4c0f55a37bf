#!/usr/bin/env bash
# benches/storage/run.sh — what the store keeps per task: bytes on disk per echo send,
# table by table, indexes included, on both stores, for one or two builds of the echo
# server (benches/compare/echo_agent.rs).
#
#   benches/storage/run.sh --bin /path/to/compare_echo
#   benches/storage/run.sh --bin BEFORE --bin AFTER --sends 20000 --stores sqlite
#
# Each build gets a fresh data directory or database, takes --sends `SendMessage`s (a new
# thread and task each, as the comparison's `send` scenario does; the bytes written to
# storage meanwhile are reported per send), and is stopped. Then:
# SQLite — `dbstat` after a full checkpoint: the pages of each table and index, and the
# bytes of their cells; Postgres — `pg_total_relation_size` after `VACUUM`, and the bytes
# of the rows (`pg_column_size`). The Postgres runs need a server at --pg-url (a role that
# may CREATE DATABASE) and the `psql` client; the SQLite runs the `sqlite3` shell.

set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$ROOT/benches/common.sh"

BINS=()
LOAD=""
STORES="sqlite postgres"
SENDS=10000
CONNECTIONS=16
PORT=${STORAGE_BENCH_PORT:-9453}
PG_URL=${STORAGE_PG_URL:-postgres://postgres@127.0.0.1:5432}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    cat <<USAGE

Options:
  --bin PATH        a release build of --example compare_echo (once or twice)
  --stores LIST     of: sqlite, postgres (default: both)
  --sends N         sends per build (default $SENDS)
  --connections N   load generator connections (default $CONNECTIONS)
  --load PATH       a built load generator (default: build benches/load here)
  --pg-url URL      Postgres server without a database (default $PG_URL)
USAGE
}

while (($#)); do
    case "$1" in
        --bin) BINS+=("$2"); shift 2 ;;
        --stores) STORES="${2//,/ }"; shift 2 ;;
        --sends) SENDS="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --load) LOAD="$2"; shift 2 ;;
        --pg-url) PG_URL="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
((${#BINS[@]} >= 1)) || { echo "--bin is required" >&2; usage >&2; exit 2; }
for bin in "${BINS[@]}"; do
    [[ -x "$bin" ]] || { echo "not an executable: $bin" >&2; exit 2; }
done
[[ "$SENDS" =~ ^[1-9][0-9]*$ ]] || { echo "--sends must be a positive integer" >&2; exit 2; }

[[ -n "$LOAD" ]] || LOAD="$(build_load "$ROOT" "$TARGET_DIR")"
[[ -x "$LOAD" ]] || { echo "no load generator in $TARGET_DIR" >&2; exit 1; }

WORK="$(mktemp -d)"
PIDS=()
DATABASES=()
trap stop_and_clean EXIT
printf '[auth]\nenabled = false\n' >"$WORK/bench.toml"

# Bytes process $1 has caused to be written to storage.
written() { awk '/^write_bytes/ {print $2}' "/proc/$1/io"; }

# The Postgres server's WAL position, in bytes.
wal_position() { psql -qAtX "$PG_URL/postgres" -c "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"; }

TABLES="threads messages tasks task_events idempotency_keys push_configs push_outbox"
# SQLite's claims keep their keys' index apart from the log (`store/sqlite_claims.rs`).
SQLITE_TABLES="$TABLES idempotency_key_index idempotency_index_state"

sqlite_report() { # database tasks
    local db="$1" tasks="$2"
    sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
    sqlite3 -separator ' ' "$db" "
        SELECT coalesce(s.tbl_name, d.name), d.name,
               sum(d.pgsize), sum(d.payload) + sum(d.ncell) * 0
        FROM dbstat AS d LEFT JOIN sqlite_schema AS s ON s.name = d.name
        GROUP BY d.name;" |
        python3 -c '
import sys
tasks = int(sys.argv[1]); tables = sys.argv[2].split()
by = {}
for line in sys.stdin:
    table, name, pages, cells = line.split()
    if table not in tables: continue
    t = by.setdefault(table, [0, 0, 0])
    t[0] += int(pages); t[1] += int(cells); t[2] += 1
total = [sum(v[0] for v in by.values()), sum(v[1] for v in by.values())]
label = "total"
for table in tables:
    if table in by:
        p, c, n = by[table]
        print(f"    {table:<17} {p / tasks:7.0f} B/task on disk  {c / tasks:7.0f} B/task in cells  ({n} b-trees)")
print(f"    {label:<17} {total[0] / tasks:7.0f} B/task on disk  {total[1] / tasks:7.0f} B/task in cells")
' "$tasks" "$SQLITE_TABLES"
}

postgres_report() { # url tasks
    local url="$1" tasks="$2" table
    psql -q -X "$url" -c "VACUUM" >/dev/null
    for table in $TABLES; do
        psql -qAtX -F ' ' "$url" -c "SELECT '$table', pg_total_relation_size('$table'),
            (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM $table AS t),
            (SELECT count(*) FROM pg_index WHERE indrelid = '$table'::regclass)"
    done | python3 -c '
import sys
tasks = int(sys.argv[1])
total = [0, 0]
label = "total"
for line in sys.stdin:
    table, size, rows, indexes = line.split()
    size, rows = int(size), int(rows)
    total[0] += size; total[1] += rows
    print(f"    {table:<17} {size / tasks:7.0f} B/task on disk  {rows / tasks:7.0f} B/task in rows  ({indexes} indexes)")
print(f"    {label:<17} {total[0] / tasks:7.0f} B/task on disk  {total[1] / tasks:7.0f} B/task in rows")
' "$tasks"
}

run_one() { # binary store index
    local bin="$1" store="$2" n="$3" url="http://127.0.0.1:$PORT"
    local env=(env -u DATABASE_URL RUST_LOG=warn) db="" tasks
    rm -rf "$WORK/data" && mkdir -p "$WORK/data"
    if [[ "$store" == postgres ]]; then
        db="a2a_storage_$$_$n"
        psql -q -X "$PG_URL/postgres" -c "CREATE DATABASE \"$db\"" >/dev/null
        DATABASES+=("$db")
        env+=(DATABASE_URL="$PG_URL/$db")
    fi
    "${env[@]}" "$bin" --config "$WORK/bench.toml" --bind "127.0.0.1:$PORT" --grpc-bind "" \
        --data-dir "$WORK/data" >"$WORK/server.log" 2>&1 &
    PIDS=("$!")
    wait_ready "$url"
    local w0 wal0=0 w wal=0
    if [[ "$store" == postgres ]]; then
        # Every run starts just after a checkpoint: the pages each first touches after
        # one are logged whole, whenever it came.
        psql -q -X "$PG_URL/postgres" -c "CHECKPOINT" >/dev/null
        wal0=$(wal_position)
    fi
    w0=$(written "${PIDS[0]}")
    "$LOAD" --url "$url/" --scenario send --connections "$CONNECTIONS" --requests "$SENDS" \
        --quiet --json "$WORK/report.json" >/dev/null
    w=$(($(written "${PIDS[0]}") - w0))
    [[ "$store" == postgres ]] && wal=$(wal_position)
    kill -TERM "${PIDS[0]}" 2>/dev/null || true
    wait "${PIDS[0]}" 2>/dev/null || true
    PIDS=()
    echo "$store: $bin"
    if [[ "$store" == postgres ]]; then
        echo "  written during the sends: $(((${wal%.*} - ${wal0%.*}) / SENDS)) B of WAL per send" \
            "(the server's WAL position before and after)"
    else
        echo "  written during the sends: $((w / SENDS)) B per send (the server's write_bytes: WAL and checkpoints)"
    fi
    if [[ "$store" == postgres ]]; then
        tasks=$(psql -qAtX "$PG_URL/$db" -c "SELECT count(*) FROM tasks")
        echo "  $tasks tasks"
        postgres_report "$PG_URL/$db" "$tasks"
    else
        local file="$WORK/data/agent-a2a.db"
        tasks=$(sqlite3 "$file" "SELECT count(*) FROM tasks")
        echo "  $tasks tasks"
        sqlite_report "$file" "$tasks"
    fi
}

echo "$SENDS sends per build"
for store in $STORES; do
    i=0
    for bin in "${BINS[@]}"; do
        run_one "$bin" "$store" "$i"
        i=$((i + 1))
    done
done
