#!/usr/bin/env bash
# benches/traces/run.sh — what traces cost: one server on the embedded SQLite default
# with traces off (the default), exporting every trace (`sampling_ratio = 1`), and
# exporting a tenth of them (`0.1`), each to an OTLP/HTTP sink on loopback that accepts
# and discards what it gets.
#
# Every run gets a fresh data directory and a fresh process (release builds of agent-a2a
# and of benches/load). Rounds are interleaved. Each run prints the load generator's
# throughput and latency, and the server's CPU time and context switches per request,
# read from /proc (the sink is not counted).
#
#   benches/traces/run.sh                                   # send, 3 rounds
#   benches/traces/run.sh --scenarios send,multi-turn --rounds 2 --duration 10s
#
# Needs: cargo, curl, python3. Everything listens on 127.0.0.1.

set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=../common.sh
source "$ROOT/benches/common.sh"

SCENARIOS="send"
SETUPS="off on sampled"
CONNECTIONS=64
DURATION=10s
WARMUP=2s
ROUNDS=3
PORT=${TRACES_BENCH_PORT:-9401}
SINK_PORT=${TRACES_BENCH_SINK_PORT:-9418}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
SERVER_GIVEN=""

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    cat <<EOF

Options:
  --scenarios LIST    load scenarios, space- or comma-separated (default: $SCENARIOS)
  --setups LIST       of: off, on, sampled (default: all)
  --connections N     load generator connections (default $CONNECTIONS)
  --duration TIME     measured time per run (default $DURATION)
  --warmup TIME       warm-up per run (default $WARMUP)
  --rounds N          runs per setup and scenario (default $ROUNDS)
  --server PATH       the agent-a2a binary to run (default: a release build of this
                      checkout), e.g. another build for an A/B
EOF
}

while (($#)); do
    case "$1" in
        --scenarios) SCENARIOS="${2//,/ }"; shift 2 ;;
        --setups) SETUPS="${2//,/ }"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --server) SERVER_GIVEN="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

echo "building agent-a2a and the load generator (release) in $TARGET_DIR"
(cd "$ROOT" && CARGO_TARGET_DIR="$TARGET_DIR" cargo build --release --quiet)
(cd "$ROOT" && CARGO_TARGET_DIR="$TARGET_DIR" cargo bench --bench load --no-run --quiet)
SERVER="${SERVER_GIVEN:-$TARGET_DIR/release/agent-a2a}"
LOAD="$(find "$TARGET_DIR/release/deps" -maxdepth 1 -type f -executable -name 'load-*' -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2)"
[[ -x "$SERVER" && -x "$LOAD" ]] || { echo "build output not found" >&2; exit 1; }

WORK="$(mktemp -d)"
PIDS=()
SINK=""
cleanup() {
    for pid in "${PIDS[@]}" $SINK; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# The sink: answers every OTLP export 200 and counts the bytes it was sent.
python3 - "$SINK_PORT" "$WORK/sink-bytes" <<'PY' &
import http.server, socketserver, sys
port, out = int(sys.argv[1]), sys.argv[2]
total = 0
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global total
        total += len(self.rfile.read(int(self.headers.get("content-length", 0))))
        open(out, "w").write(str(total))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
Server(("127.0.0.1", port), Sink).serve_forever()
PY
SINK=$!

run_one() { # setup scenario round
    local setup="$1" scenario="$2" round="$3" url="http://127.0.0.1:$PORT" endpoint="" ratio=1
    case "$setup" in
        off) ;;
        on) endpoint="http://127.0.0.1:$SINK_PORT" ;;
        sampled) endpoint="http://127.0.0.1:$SINK_PORT"; ratio=0.1 ;;
    esac
    rm -rf "$WORK/data" && mkdir -p "$WORK/data"
    RUST_LOG=warn AGENT_A2A__AUTH__ENABLED=false \
        AGENT_A2A__TELEMETRY__OTLP_ENDPOINT="$endpoint" \
        AGENT_A2A__TELEMETRY__SAMPLING_RATIO="$ratio" \
        "$SERVER" serve --bind "127.0.0.1:$PORT" --grpc-bind "" --data-dir "$WORK/data" \
        >"$WORK/server.log" 2>&1 &
    PIDS=("$!")
    wait_ready "$url"
    local pid="${PIDS[0]}" before_ticks before_switches
    before_ticks=$(ticks "$pid")
    before_switches=$(switches "$pid")
    "$LOAD" --url "$url/" --scenario "$scenario" --connections "$CONNECTIONS" \
        --duration "$DURATION" --warmup "$WARMUP" --quiet --json "$WORK/report.json" >/dev/null
    report "$WORK/report.json" "$setup" "$scenario" "$round" \
        $(($(ticks "$pid") - before_ticks)) $(($(switches "$pid") - before_switches))
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    PIDS=()
}

echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); c=$CONNECTIONS, $DURATION per run"
for round in $(seq 1 "$ROUNDS"); do
    for scenario in $SCENARIOS; do
        for setup in $SETUPS; do
            run_one "$setup" "$scenario" "$round"
        done
    done
done
echo "the sink received $(cat "$WORK/sink-bytes" 2>/dev/null || echo 0) bytes of OTLP in all"
