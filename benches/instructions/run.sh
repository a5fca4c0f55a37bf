#!/usr/bin/env bash
# benches/instructions/run.sh — instructions per SendMessage of one or more server builds,
# counted by valgrind's callgrind: a count repeats where seconds do not, so two builds
# can be compared on a busy machine. Each build serves in turn under callgrind (auth off,
# a fresh SQLite data directory or Postgres database); the load generator sends
# --warmup sends uncounted, then --sends counted (instrumentation switched on and off
# around them with callgrind_control), and the server's instructions are divided by the
# sends. Postgres' own work is not counted (it runs in its own processes). The peers of
# benches/compare (--peer) are counted the same way, serving from memory, so that a build
# can be set against them in a count that holds still while the machine is busy.
#
#   benches/instructions/run.sh --bin OLD_compare_echo --bin NEW_compare_echo
#   benches/instructions/run.sh --bin target/release/examples/compare_echo --store postgres
#   benches/instructions/run.sh --bin BUILD --peer ceiling --peer a2a-rs --peer turul-a2a
#
# Needs valgrind (callgrind_control comes with it) and a built load generator
# (benches/load; built here when --load is not given); Postgres needs psql and a server
# at --pg-url that lets its user CREATE DATABASE.

set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$ROOT/benches/common.sh"

BINS=()
PEERS=()
LOAD=""
STORE=sqlite
SENDS=3000
WARMUP=500
CONNECTIONS=8
PORT=${INSTRUCTIONS_BENCH_PORT:-9457}
PG_URL=${INSTRUCTIONS_PG_URL:-postgres://postgres@127.0.0.1:5432}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    cat <<USAGE

Options:
  --bin PATH        a server build (repeat to compare; each is counted in turn)
  --peer NAME       a peer of benches/compare, counted after the builds: ceiling (the
                    bare actix-web handler), a2a-rs (the official Rust SDK) or turul-a2a;
                    built as benches/compare/run.sh builds them, into the same places
  --store NAME      sqlite (default) or postgres
  --sends N         counted sends (default $SENDS)
  --warmup N        uncounted sends first (default $WARMUP)
  --connections N   load generator connections (default $CONNECTIONS)
  --load PATH       a built load generator (default: build benches/load here)
  --pg-url URL      Postgres server without a database (default $PG_URL)
USAGE
}

while (($#)); do
    case "$1" in
        --bin) BINS+=("$2"); shift 2 ;;
        --peer) PEERS+=("$2"); shift 2 ;;
        --store) STORE="$2"; shift 2 ;;
        --sends) SENDS="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --load) LOAD="$2"; shift 2 ;;
        --pg-url) PG_URL="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
((${#BINS[@]} + ${#PEERS[@]})) || { echo "give at least one --bin or --peer" >&2; usage >&2; exit 2; }
for peer in "${PEERS[@]}"; do
    case "$peer" in
        ceiling | a2a-rs | turul-a2a) ;;
        *) echo "--peer $peer: one of ceiling, a2a-rs, turul-a2a" >&2; exit 2 ;;
    esac
done
for bin in "${BINS[@]}"; do
    [[ -x "$bin" ]] || { echo "--bin $bin: not an executable" >&2; exit 2; }
done
[[ "$STORE" == sqlite || "$STORE" == postgres ]] || { echo "--store: sqlite or postgres" >&2; exit 2; }
for n in "$SENDS" "$WARMUP" "$CONNECTIONS"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "not a positive integer: $n" >&2; exit 2; }
done
command -v callgrind_control >/dev/null || { echo "needs valgrind (callgrind_control)" >&2; exit 1; }
[[ -n "$LOAD" ]] || LOAD="$(build_load "$ROOT" "$TARGET_DIR")"

WORK="$(mktemp -d)"
PIDS=()
DATABASES=()
trap stop_and_clean EXIT
printf '[auth]\nenabled = false\n' >"$WORK/bench.toml"

# count LABEL PATH COMMAND...: serves COMMAND under callgrind (in the environment that
# SERVER_ENV sets: valgrind follows no exec), its JSON-RPC endpoint at PATH on $PORT, and
# prints its instructions per send.
count() {
    local label="$1" path="$2"; shift 2
    local run; run="$WORK/run-$(date +%s%N)"
    mkdir -p "$run"
    (cd "$run" && exec "${SERVER_ENV[@]}" valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$run/callgrind.out" "$@") >"$run/server.log" 2>&1 &
    local pid=$!
    PIDS=("$pid")
    for _ in $(seq 1 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || { echo "$label exited under valgrind (see $run/server.log)" >&2; exit 1; }
        sleep 0.2
    done
    local load=("$LOAD" --url "http://127.0.0.1:$PORT$path" --scenario send --dialect 1.0
        --connections "$CONNECTIONS" --warmup 0s --quiet)
    "${load[@]}" --requests "$WARMUP" >/dev/null
    callgrind_control --instr=on "$pid" >/dev/null 2>&1
    "${load[@]}" --requests "$SENDS" --json "$run/report.json" >/dev/null
    callgrind_control --instr=off "$pid" >/dev/null 2>&1
    callgrind_control --dump "$pid" >/dev/null 2>&1
    kill "$pid"; wait "$pid" 2>/dev/null || true
    PIDS=()
    python3 - "$run" "$label" <<'PY'
import glob, json, re, sys
run, label = sys.argv[1:]
counted = 0
for path in glob.glob(run + "/callgrind.out*"):
    for line in open(path, errors="replace"):
        m = re.match(r"^(?:summary|totals): (\d+)", line)
        if m:
            counted = max(counted, int(m.group(1)))
r = json.load(open(run + "/report.json"))
sends = r["succeeded"] + r["failed"]
print(f"{label}: {counted / max(sends, 1):,.0f} instructions per send "
      f"({counted:,} over {sends} sends, {r['failed']} failed)")
PY
}

echo "instructions per SendMessage ($STORE, c=$CONNECTIONS, $WARMUP uncounted then $SENDS counted)"
for bin in "${BINS[@]}"; do
    data="$WORK/data-$(date +%s%N)"
    mkdir -p "$data"
    SERVER_ENV=(env -u DATABASE_URL RUST_LOG=warn)
    if [[ "$STORE" == postgres ]]; then
        db="a2a_instructions_$$_${#DATABASES[@]}"
        new_database "$db"
        SERVER_ENV+=(DATABASE_URL="$PG_URL/$db")
    fi
    count "$bin" / "$bin" --config "$WORK/bench.toml" \
        --bind "127.0.0.1:$PORT" --grpc-bind "" --data-dir "$data"
done
for peer in "${PEERS[@]}"; do
    peer_bin="$(build_peer "$ROOT" "$TARGET_DIR" "$peer")"
    [[ -x "$peer_bin" ]] || { echo "--peer $peer: no build at $peer_bin" >&2; exit 1; }
    path=/
    [[ "$peer" == turul-a2a ]] && path=/jsonrpc
    SERVER_ENV=(env RUST_LOG=warn)
    count "$peer (in memory)" "$path" "$peer_bin" "127.0.0.1:$PORT"
done
