#!/usr/bin/env bash
# benches/bindings/run.sh — gRPC against JSON-RPC on one server, measured so that both
# bindings of a round meet the same server, machine and hour (the target is gRPC at
# ≥ 0.9× JSON-RPC's throughput). Each round starts each server fresh (a fresh data directory
# or database) and loads it over JSON-RPC and over gRPC in turn (the order alternating
# by round), then prints the two runs and their ratio. Servers: agent-a2a's echo build on
# either store, and turul-a2a (its fixture in benches/compare, serving gRPC with tonic
# beside JSON-RPC over one state) as a peer on the same HTTP/2 stack.
#
#   benches/bindings/run.sh --bin target/release/examples/compare_echo
#   benches/bindings/run.sh --bin BUILD --servers agent-a2a-sqlite,turul-a2a --rounds 5
#
# CPU per request is the server's over each whole run, warm-up included (as in
# benches/ab), and on Postgres also every `postgres` process's.

set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$ROOT/benches/common.sh"

BIN=""
SERVERS="agent-a2a-sqlite agent-a2a-postgres turul-a2a"
CONNECTIONS=64
DURATION=8s
WARMUP=2s
ROUNDS=3
PORT=${BINDINGS_BENCH_PORT:-9461}
GRPC_PORT=$((PORT + 1))
PG_URL=${BINDINGS_PG_URL:-postgres://postgres@127.0.0.1:5432}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
LOAD=""

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    cat <<USAGE

Options:
  --bin PATH          agent-a2a's release compare_echo (needed for agent-a2a-* servers)
  --servers LIST      of: agent-a2a-sqlite, agent-a2a-postgres, turul-a2a (default: all)
  --connections N     load generator connections (default $CONNECTIONS)
  --duration TIME     measured time per run (default $DURATION)
  --warmup TIME       warm-up per run (default $WARMUP)
  --rounds N          rounds (default $ROUNDS)
  --pg-url URL        Postgres server without a database (default $PG_URL)
  --load PATH         a built load generator (default: build benches/load here)
USAGE
}

while (($#)); do
    case "$1" in
        --bin) BIN="$2"; shift 2 ;;
        --servers) SERVERS="${2//,/ }"; shift 2 ;;
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
for server in $SERVERS; do
    case "$server" in
        agent-a2a-sqlite | agent-a2a-postgres)
            [[ -x "$BIN" ]] || { echo "$server needs --bin, an executable compare_echo" >&2; exit 2; } ;;
        turul-a2a) ;;
        *) echo "--servers: $server is none of agent-a2a-sqlite, agent-a2a-postgres, turul-a2a" >&2; exit 2 ;;
    esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "--rounds: a positive integer" >&2; exit 2; }

[[ -n "$LOAD" ]] || LOAD="$(build_load "$ROOT" "$TARGET_DIR")"
[[ -x "$LOAD" ]] || { echo "no load generator in $TARGET_DIR" >&2; exit 1; }
TURUL=""
[[ " $SERVERS " == *" turul-a2a "* ]] && TURUL="$(build_peer "$ROOT" "$TARGET_DIR" turul-a2a)"

WORK="$(mktemp -d)"
PIDS=()
DATABASES=()
trap stop_and_clean EXIT
printf '[auth]\nenabled = false\n' >"$WORK/bench.toml"

# start SERVER ROUND: starts it with JSON-RPC on $PORT and gRPC on $GRPC_PORT (its card
# lists both); sets PIDS and URL.
start() {
    local server="$1" round="$2" env=(env -u DATABASE_URL RUST_LOG=warn)
    rm -rf "$WORK/data" && mkdir -p "$WORK/data"
    case "$server" in
        agent-a2a-*)
            if [[ "$server" == agent-a2a-postgres ]]; then
                local db="a2a_bindings_$$_${round}"
                new_database "$db"
                env+=(DATABASE_URL="$PG_URL/$db")
            fi
            "${env[@]}" "$BIN" --config "$WORK/bench.toml" --bind "127.0.0.1:$PORT" \
                --grpc-bind "127.0.0.1:$GRPC_PORT" --data-dir "$WORK/data" >"$WORK/server.log" 2>&1 &
            PIDS=("$!")
            URL="http://127.0.0.1:$PORT/"
            wait_ready "http://127.0.0.1:$PORT"
            ;;
        turul-a2a)
            "$TURUL" "127.0.0.1:$PORT" --grpc "127.0.0.1:$GRPC_PORT" >"$WORK/server.log" 2>&1 &
            PIDS=("$!")
            URL="http://127.0.0.1:$PORT/jsonrpc"
            local _
            for _ in $(seq 1 200); do
                curl -sf "http://127.0.0.1:$PORT/.well-known/agent-card.json" >/dev/null && break
                sleep 0.1
            done
            ;;
    esac
    local _
    for _ in $(seq 1 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$GRPC_PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "$server serves no gRPC on $GRPC_PORT (see $WORK/server.log)" >&2
    return 1
}

# load SERVER ROUND BINDING: one run; prints its line and leaves its report in
# $WORK/BINDING.json.
load() {
    local server="$1" round="$2" binding="$3" pid="${PIDS[0]}" t0 s0 p0
    t0=$(ticks "$pid"); s0=$(switches "$pid"); p0=$(postgres_ticks)
    "$LOAD" --url "$URL" --scenario send --binding "$binding" --connections "$CONNECTIONS" \
        --duration "$DURATION" --warmup "$WARMUP" --quiet --json "$WORK/$binding.json" >/dev/null
    local t=$(($(ticks "$pid") - t0)) s=$(($(switches "$pid") - s0)) p=$(($(postgres_ticks) - p0))
    local line
    line="$(report "$WORK/$binding.json" "$binding" "$server" "$round" "$t" "$s")"
    if [[ "$server" == agent-a2a-postgres ]]; then
        line+="$(postgres_per_request "$WORK/$binding.json" "$p")"
    fi
    echo "$line"
}

echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); send at c=$CONNECTIONS, $WARMUP + $DURATION per run"
for round in $(seq 1 "$ROUNDS"); do
    for server in $SERVERS; do
        start "$server" "$round"
        if ((round % 2)); then order="jsonrpc grpc"; else order="grpc jsonrpc"; fi
        for binding in $order; do load "$server" "$round" "$binding"; done
        python3 - "$WORK" "$server" "$round" <<'PY'
import json, sys
work, server, rnd = sys.argv[1:]
ok = {b: json.load(open(f"{work}/{b}.json"))["succeeded_per_sec"] for b in ("jsonrpc", "grpc")}
print(f"{server} round {rnd}: gRPC ÷ JSON-RPC {ok['grpc'] / max(ok['jsonrpc'], 1e-9):.2f}")
PY
        kill -TERM "${PIDS[0]}" 2>/dev/null || true
        wait "${PIDS[0]}" 2>/dev/null || true
        PIDS=()
    done
done
