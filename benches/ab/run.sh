#!/usr/bin/env bash
# benches/ab/run.sh — two builds of the echo server (benches/compare/echo_agent.rs) side
# by side, on both stores, rounds interleaved: the same-run ratio a change to the runtime
# or the store is judged by. For each run: throughput and latency from the load
# generator, and the CPU and thread hand-offs per request of the server and, on Postgres,
# of every `postgres` process (the database's own CPU per request).
#
#   benches/ab/run.sh --old /path/to/compare_echo-before --new /path/to/compare_echo-after
#   benches/ab/run.sh --old A --new B --stores postgres --scenarios send --rounds 5
#
# The builds are release builds of `--example compare_echo` made elsewhere (e.g. a git
# worktree of the commit before, built into a CARGO_TARGET_DIR of its own: cargo keys a
# workspace's own crate by name, not by path, so two checkouts sharing a target directory
# share its fingerprints, and the one built second can be handed the first one's
# artifact). Each run gets a fresh data directory or database. The
# Postgres runs need a server at --pg-url (a role that may CREATE DATABASE).

set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$ROOT/benches/common.sh"

OLD=""
NEW=""
STORES="sqlite postgres"
SCENARIOS="send"
CONNECTIONS=64
DURATION=10s
WARMUP=2s
ROUNDS=3
PORT=${AB_BENCH_PORT:-9451}
PG_URL=${AB_PG_URL:-postgres://postgres@127.0.0.1:5432}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
LOAD=""

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    cat <<USAGE

Options:
  --old PATH          the build before (required)
  --new PATH          the build after (required)
  --stores LIST       of: sqlite, postgres (default: both)
  --scenarios LIST    load scenarios (default: $SCENARIOS; see benches/load --help)
  --connections N     load generator connections (default $CONNECTIONS)
  --duration TIME     measured time per run (default $DURATION)
  --warmup TIME       warm-up per run (default $WARMUP)
  --rounds N          rounds, each running old then new (default $ROUNDS)
  --pg-url URL        Postgres server without a database (default $PG_URL)
  --load PATH         a built load generator (default: build benches/load here)
USAGE
}

while (($#)); do
    case "$1" in
        --old) OLD="$2"; shift 2 ;;
        --new) NEW="$2"; shift 2 ;;
        --stores) STORES="${2//,/ }"; shift 2 ;;
        --scenarios) SCENARIOS="${2//,/ }"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --pg-url) PG_URL="$2"; shift 2 ;;
        --load) LOAD="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
[[ -x "$OLD" && -x "$NEW" ]] || { echo "--old and --new must name executables" >&2; usage >&2; exit 2; }

[[ -n "$LOAD" ]] || LOAD="$(build_load "$ROOT" "$TARGET_DIR")"
[[ -x "$LOAD" ]] || { echo "no load generator in $TARGET_DIR" >&2; exit 1; }

WORK="$(mktemp -d)"
PIDS=()
DATABASES=()
trap stop_and_clean EXIT
printf '[auth]\nenabled = false\n' >"$WORK/bench.toml"
# multi-turn: follow-ups find their thread evicted and reload it from the store (as in
# benches/compare/run.sh: 16 threads in memory for the load's 64 conversations).
printf '[auth]\nenabled = false\n[threads]\nmax_resident_actors = 16\n' >"$WORK/bench-multi-turn.toml"
# push: the load generator's receivers listen on loopback.
printf '[auth]\nenabled = false\n[push]\nallow_loopback = true\n' >"$WORK/bench-push.toml"

run_one() { # build-label binary store scenario round
    local label="$1" bin="$2" store="$3" scenario="$4" round="$5" url="http://127.0.0.1:$PORT"
    local env=(env -u DATABASE_URL RUST_LOG=warn)
    rm -rf "$WORK/data" && mkdir -p "$WORK/data"
    if [[ "$store" == postgres ]]; then
        local db="a2a_ab_$$_${round}_${label}_${scenario//[^a-z]/_}"
        new_database "$db"
        env+=(DATABASE_URL="$PG_URL/$db")
    fi
    local config="$WORK/bench.toml"
    [[ "$scenario" == multi-turn ]] && config="$WORK/bench-multi-turn.toml"
    [[ "$scenario" == push ]] && config="$WORK/bench-push.toml"
    "${env[@]}" "$bin" --config "$config" --bind "127.0.0.1:$PORT" --grpc-bind "" \
        --data-dir "$WORK/data" >"$WORK/server.log" 2>&1 &
    PIDS=("$!")
    wait_ready "$url"
    local pid="${PIDS[0]}" t0 s0 p0
    t0=$(ticks "$pid"); s0=$(switches "$pid"); p0=$(postgres_ticks)
    "$LOAD" --url "$url/" --scenario "$scenario" --connections "$CONNECTIONS" \
        --duration "$DURATION" --warmup "$WARMUP" --quiet --json "$WORK/report.json" >/dev/null
    local t=$(($(ticks "$pid") - t0)) s=$(($(switches "$pid") - s0)) p=$(($(postgres_ticks) - p0))
    local line
    line="$(report "$WORK/report.json" "$label" "$store/$scenario" "$round" "$t" "$s")"
    if [[ "$store" == postgres ]]; then
        line+="$(postgres_per_request "$WORK/report.json" "$p")"
    fi
    echo "$line"
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    PIDS=()
}

echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); c=$CONNECTIONS, $DURATION per run"
echo "old: $OLD"
echo "new: $NEW"
for round in $(seq 1 "$ROUNDS"); do
    for store in $STORES; do
        for scenario in $SCENARIOS; do
            run_one old "$OLD" "$store" "$scenario" "$round"
            run_one new "$NEW" "$store" "$scenario" "$round"
        done
    done
done
