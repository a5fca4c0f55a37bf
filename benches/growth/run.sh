#!/usr/bin/env bash
# benches/growth/run.sh — how the server holds up as its store grows: back-to-back
# segments of `SendMessage` load (a new thread and task each), and after every segment
# the segment's throughput and latency, the server's RSS, the store's size and the tasks
# it holds. With --retention the janitor deletes what is past it meanwhile, and the
# store's size should level off.
#
#   benches/growth/run.sh --bin target/release/agent-a2a --store sqlite --segments 6
#   benches/growth/run.sh --bin target/release/agent-a2a --store postgres \
#       --segments 20 --segment 30s --rate 3000 --retention 60 --ttl 60
#
# The server runs with its defaults (auth off) in a fresh data directory or database.
# --retention sets `store.retention_secs`, --ttl `threads.thread_ttl_secs` (and the
# idempotency window to their sum, which configuration requires it to be at most), and
# the janitor runs every --janitor-every seconds. Postgres needs a server at --pg-url (a
# role that may CREATE DATABASE) and `psql`; SQLite needs the `sqlite3` shell. On SQLite
# each segment also shows the WAL file's size at its end and the checkpoints run in it;
# --keep-log keeps the server's log. Settings pass through the environment
# (AGENT_A2A__…).

set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$ROOT/benches/common.sh"

BIN=""
LOAD=""
STORE=sqlite
SEGMENTS=6
SEGMENT=30s
MESSAGE_IDS=random
CONNECTIONS=64
RATE=""
RETENTION=0
TTL=""
JANITOR_EVERY=10
KEEP_LOG=""
PORT=${GROWTH_BENCH_PORT:-9455}
PG_URL=${GROWTH_PG_URL:-postgres://postgres@127.0.0.1:5432}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

usage() {
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    cat <<USAGE

Options:
  --bin PATH            the server: a release agent-a2a (or --example compare_echo)
  --store NAME          sqlite or postgres (default $STORE)
  --segments N          segments of load (default $SEGMENTS)
  --segment TIME        each segment's length (default $SEGMENT)
  --connections N       load generator connections (default $CONNECTIONS)
  --rate N              sends per second at most (default: as fast as answered)
  --message-ids KIND    random (default) or time-ordered message ids (benches/load)
  --retention SECS      store.retention_secs (default 0: keep everything)
  --ttl SECS            threads.thread_ttl_secs (default: the server's, a day)
  --janitor-every SECS  threads.janitor_interval_secs (default $JANITOR_EVERY)
  --load PATH           a built load generator (default: build benches/load here)
  --pg-url URL          Postgres server without a database (default $PG_URL)
  --keep-log PATH       copy the server's log there at the end
USAGE
}

while (($#)); do
    case "$1" in
        --bin) BIN="$2"; shift 2 ;;
        --store) STORE="$2"; shift 2 ;;
        --segments) SEGMENTS="$2"; shift 2 ;;
        --segment) SEGMENT="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --rate) RATE="$2"; shift 2 ;;
        --message-ids) MESSAGE_IDS="$2"; shift 2 ;;
        --retention) RETENTION="$2"; shift 2 ;;
        --ttl) TTL="$2"; shift 2 ;;
        --janitor-every) JANITOR_EVERY="$2"; shift 2 ;;
        --load) LOAD="$2"; shift 2 ;;
        --pg-url) PG_URL="$2"; shift 2 ;;
        --keep-log) KEEP_LOG="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
[[ -x "$BIN" ]] || { echo "--bin must name an executable" >&2; usage >&2; exit 2; }
[[ "$STORE" == sqlite || "$STORE" == postgres ]] || { echo "--store: sqlite or postgres" >&2; exit 2; }
for n in "$SEGMENTS" "$CONNECTIONS" "$JANITOR_EVERY"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "not a positive integer: $n" >&2; exit 2; }
done
[[ "$RETENTION" =~ ^[0-9]+$ ]] || { echo "--retention: seconds" >&2; exit 2; }

[[ -n "$LOAD" ]] || LOAD="$(build_load "$ROOT" "$TARGET_DIR")"
[[ -x "$LOAD" ]] || { echo "no load generator in $TARGET_DIR" >&2; exit 1; }

WORK="$(mktemp -d)"
PIDS=()
DATABASES=()
finish() {
    [[ -n "$KEEP_LOG" && -f "$WORK/server.log" ]] && cp "$WORK/server.log" "$KEEP_LOG"
    stop_and_clean
}
trap finish EXIT
printf '[auth]\nenabled = false\n' >"$WORK/bench.toml"

url="http://127.0.0.1:$PORT"
env=(env -u DATABASE_URL RUST_LOG=warn
    AGENT_A2A__THREADS__JANITOR_INTERVAL_SECS="$JANITOR_EVERY"
    AGENT_A2A__STORE__RETENTION_SECS="$RETENTION")
if [[ -n "$TTL" ]]; then
    env+=(AGENT_A2A__THREADS__THREAD_TTL_SECS="$TTL"
        AGENT_A2A__IDEMPOTENCY__WINDOW_SECS="$((TTL + RETENTION))")
fi
mkdir -p "$WORK/data"
if [[ "$STORE" == postgres ]]; then
    db="a2a_growth_$$"
    psql -q -X "$PG_URL/postgres" -c "CREATE DATABASE \"$db\"" >/dev/null
    DATABASES+=("$db")
    env+=(DATABASE_URL="$PG_URL/$db")
fi
"${env[@]}" "$BIN" --config "$WORK/bench.toml" --bind "127.0.0.1:$PORT" --grpc-bind "" \
    --data-dir "$WORK/data" >"$WORK/server.log" 2>&1 &
PIDS=("$!")
wait_ready "$url"

# The store's size in bytes (SQLite: the database file and its WAL) and its tasks.
store_bytes() {
    if [[ "$STORE" == postgres ]]; then
        psql -qAtX "$PG_URL/$db" -c "SELECT pg_database_size(current_database())"
    else
        du -cb "$WORK/data"/agent-a2a.db* | tail -n 1 | cut -f1
    fi
}
store_tasks() {
    if [[ "$STORE" == postgres ]]; then
        psql -qAtX "$PG_URL/$db" -c "SELECT count(*) FROM tasks"
    else
        sqlite3 "file:$WORK/data/agent-a2a.db?mode=ro" "SELECT count(*) FROM tasks"
    fi
}
metric() { curl -sf "$url/metrics" | awk -v m="$1" '$1 == m {print $2}' | head -n 1; }
# SQLite: the WAL file's size in bytes, and the checkpoints run so far (by the checkpoint
# thread and by the writer).
sqlite_counters() {
    local wal="$WORK/data/agent-a2a.db-wal" runs
    runs=$(curl -sf "$url/metrics" | awk '$1 ~ /^agent_a2a_sqlite_checkpoint_duration_ms_count/ {n += $2} END {print n + 0}')
    echo "$(stat -c %s "$wal" 2>/dev/null || echo 0) $runs"
}
# Postgres' counters for the segment's costs, one line: CPU ticks of every postgres
# process, WAL bytes, full-page images, blocks read into shared buffers (misses), blocks
# written out by backends and the checkpointer, and checkpoints begun (a page is logged
# whole on its first change after each: their pace sets the full-page images).
pg_counters() {
    local t=0
    for pid in $(pgrep -x postgres || true); do
        t=$((t + $(ticks "$pid" 2>/dev/null || echo 0)))
    done
    echo "$t $(psql -qAtX -F ' ' "$PG_URL/$db" -c "SELECT w.wal_bytes, w.wal_fpi, d.blks_read,
        b.buffers_backend + b.buffers_checkpoint + b.buffers_clean,
        b.checkpoints_timed + b.checkpoints_req
        FROM pg_stat_wal w, pg_stat_database d, pg_stat_bgwriter b
        WHERE d.datname = current_database()")"
}

echo "growth: $STORE, $SEGMENTS segments of $SEGMENT at $CONNECTIONS connections" \
    "${RATE:+(at most $RATE/s) }retention ${RETENTION}s${TTL:+, ttl ${TTL}s}"
printf '%-8s %9s %9s %9s %9s %9s %10s %11s %9s %10s %7s' segment "ok/s" "p50 ms" "p99 ms" \
    failed "RSS MiB" "store MiB" "tasks held" "B/task" "deleted" "us/req"
if [[ "$STORE" == postgres ]]; then
    printf ' %7s %8s %7s %8s %8s %6s' "pg us" "WAL B" "FPI" "misses" "written" "ckpts"
else
    printf ' %8s %6s' "WAL MiB" "ckpts"
fi
printf '\n'
hz=$(getconf CLK_TCK)
for i in $(seq 1 "$SEGMENTS"); do
    cpu0=$(ticks "${PIDS[0]}")
    pg0=""
    [[ "$STORE" == postgres ]] && pg0="$(pg_counters)"
    [[ "$STORE" == sqlite ]] && pg0="$(sqlite_counters)"
    "$LOAD" --url "$url/" --scenario send --connections "$CONNECTIONS" --duration "$SEGMENT" \
        --warmup 0s ${RATE:+--rate "$RATE"} --message-ids "$MESSAGE_IDS" --quiet --json "$WORK/report.json" >/dev/null
    cpu1=$(ticks "${PIDS[0]}")
    pg1=""
    [[ "$STORE" == postgres ]] && pg1="$(pg_counters)"
    [[ "$STORE" == sqlite ]] && pg1="$(sqlite_counters)"
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/${PIDS[0]}/status")
    bytes=$(store_bytes)
    tasks=$(store_tasks)
    deleted=$(metric agent_a2a_janitor_threads_deleted_total)
    python3 - "$WORK/report.json" "$i" "$rss" "$bytes" "$tasks" "${deleted:-0}" \
        "$((cpu1 - cpu0))" "$hz" "$pg0" "$pg1" <<'PY'
import json, sys
report, seg, rss, size, tasks, deleted, ticks, hz, pg0, pg1 = sys.argv[1:]
r = json.load(open(report))
lat = r["latencies"][0]
tasks = int(tasks)
ops = max(r["succeeded"] + r["failed"], 1)
per = f"{int(size) / tasks:9.0f}" if tasks else f"{'-':>9}"
line = (f"{seg:<8} {r['succeeded_per_sec']:9.0f} {lat['p50_ms']:9.2f} {lat['p99_ms']:9.2f} "
        f"{r['failed']:9d} {int(rss) / 1024:9.0f} {int(size) / 2**20:10.0f} {tasks:11d} {per} "
        f"{float(deleted):10.0f} {int(ticks) / int(hz) * 1e6 / ops:7.0f}")
if pg0 and pg1 and len(pg1.split()) == 2:
    wal, runs = (int(v) for v in pg1.split())
    line += f" {wal / 2**20:8.0f} {runs - int(pg0.split()[1]):6d}"
elif pg0 and pg1:
    d = [int(b) - int(a) for a, b in zip(pg0.split(), pg1.split())]
    line += (f" {d[0] / int(hz) * 1e6 / ops:7.0f} {d[1] / ops:8.0f} {d[2] / ops:7.2f}"
             f" {d[3] / ops:8.2f} {d[4] / ops:8.2f} {d[5]:6d}")
print(line)
if r["failed"]:
    print(f"         failed: {r.get('errors', {})}")
PY
done
