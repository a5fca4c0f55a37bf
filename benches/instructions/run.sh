#!/usr/bin/env bash
# benches/instructions/run.sh — instructions per SendMessage of one or more server builds,
# counted by valgrind's callgrind: a count repeats where seconds do not, so two builds
# can be compared on a busy machine. Each build serves in turn under callgrind (auth off,
# a fresh SQLite data directory or Postgres database); the load generator sends
# --warmup sends uncounted, then --sends counted (instrumentation switched on and off
# around them with callgrind_control), and the server's instructions are divided by the
# sends. Postgres' own work is not counted (it runs in its own processes).
#
#   benches/instructions/run.sh --bin OLD_compare_echo --bin NEW_compare_echo
#   benches/instructions/run.sh --bin target/release/examples/compare_echo --store postgres
#
# Needs valgrind (callgrind_control comes with it) and a built load generator
# (benches/load; built here when --load is not given); Postgres needs psql and a server
# at --pg-url that lets its user CREATE DATABASE.

set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$ROOT/benches/common.sh"

BINS=()
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
((${#BINS[@]})) || { echo "give at least one --bin" >&2; usage >&2; exit 2; }
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
url="http://127.0.0.1:$PORT"

echo "instructions per SendMessage ($STORE, c=$CONNECTIONS, $WARMUP uncounted then $SENDS counted)"
for bin in "${BINS[@]}"; do
    run="$WORK/run-$(date +%s%N)"
    mkdir -p "$run/data"
    env=(env -u DATABASE_URL RUST_LOG=warn)
    if [[ "$STORE" == postgres ]]; then
        db="a2a_instructions_$$_${#DATABASES[@]}"
        psql -q -X "$PG_URL/postgres" -c "CREATE DATABASE \"$db\"" >/dev/null
        DATABASES+=("$db")
        env+=(DATABASE_URL="$PG_URL/$db")
    fi
    (cd "$run" && exec "${env[@]}" valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$run/callgrind.out" "$bin" --config "$WORK/bench.toml" \
        --bind "127.0.0.1:$PORT" --grpc-bind "" --data-dir "$run/data") >"$run/server.log" 2>&1 &
    pid=$!
    PIDS=("$pid")
    for _ in $(seq 1 600); do
        curl -sf "$url/health/ready" >/dev/null && break
        kill -0 "$pid" 2>/dev/null || { echo "$bin exited under valgrind (see $run/server.log)" >&2; exit 1; }
        sleep 0.2
    done
    load=("$LOAD" --url "$url/" --scenario send --connections "$CONNECTIONS" --warmup 0s --quiet)
    "${load[@]}" --requests "$WARMUP" >/dev/null
    callgrind_control --instr=on "$pid" >/dev/null 2>&1
    "${load[@]}" --requests "$SENDS" --json "$run/report.json" >/dev/null
    callgrind_control --instr=off "$pid" >/dev/null 2>&1
    callgrind_control --dump "$pid" >/dev/null 2>&1
    kill "$pid"; wait "$pid" 2>/dev/null || true
    PIDS=()
    python3 - "$run" "$bin" <<'PY'
import glob, json, re, sys
run, binary = sys.argv[1:]
counted = 0
for path in glob.glob(run + "/callgrind.out*"):
    for line in open(path, errors="replace"):
        m = re.match(r"^(?:summary|totals): (\d+)", line)
        if m:
            counted = max(counted, int(m.group(1)))
r = json.load(open(run + "/report.json"))
sends = r["succeeded"] + r["failed"]
print(f"{binary}: {counted / max(sends, 1):,.0f} instructions per send "
      f"({counted:,} over {sends} sends, {r['failed']} failed)")
PY
done
