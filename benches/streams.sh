#!/usr/bin/env bash
# benches/streams.sh — memory of idle event streams: starts a release server (SQLite in a
# fresh directory, defaults with auth off), opens --streams subscriptions on --tasks open
# tasks with the load generator's `subscribe` scenario, reads the server's resident set
# before and after, then sends one follow-up message per task and times its delivery to
# every stream. See benches/README.md ("Idle streams").
#
#   benches/streams.sh                                 # 16 000 SSE streams on 160 tasks
#   benches/streams.sh --streams 8000 --tasks 1
#   benches/streams.sh --binding grpc                  # the same over gRPC streams
#   benches/streams.sh --server PATH                   # another build of the server
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh

streams=16000
tasks=160
binding=jsonrpc
port=18480
grpc_port=18481
out=""
server=""
while [ $# -gt 0 ]; do
    case "$1" in
        --streams) streams="$2"; shift 2 ;;
        --tasks) tasks="$2"; shift 2 ;;
        --binding) binding="$2"; shift 2 ;;
        --port) port="$2"; grpc_port=$((port + 1)); shift 2 ;;
        --json) out="$2"; shift 2 ;;
        --server) server="$2"; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

# Both ends hold a socket per stream; each process may have the hard limit.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fds=$(ulimit -n)
# The server keeps server.reserved_fds (256) of its limit; with gRPC on, a quarter of the
# rest is gRPC's (and the load generator opens one HTTP/2 connection per stream).
if [ "$binding" = grpc ]; then
    grpc_bind="127.0.0.1:$grpc_port"
    fit=$(((fds - 256) / 4 - tasks - 16))
else
    grpc_bind=""
    fit=$((fds - 256 - tasks - 16))
fi
if [ "$streams" -gt "$fit" ]; then
    echo "--streams $streams does not fit the open-files limit of $fds (at most $fit)" >&2
    exit 2
fi
# One build for both (the server binary is built for the bench target, with the same
# features as the library the bench links).
[ -n "${SKIP_BUILD:-}" ] || cargo build --release --locked --bin agent-a2a --bench load
load=$(cargo bench --locked --bench load --no-run --message-format json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "load" and m.get("executable"):
        print(m["executable"])')
server=${server:-${CARGO_TARGET_DIR:-target}/release/agent-a2a}

data=$(mktemp -d)
report=${out:-$data/report.json}
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    cp "$data/server.log" "${TMPDIR:-/tmp}/streams-server.log" 2>/dev/null
    rm -rf "$data"
}
trap cleanup EXIT
env -u DATABASE_URL -u RUST_LOG \
    AGENT_A2A__AUTH__ENABLED=false \
    AGENT_A2A__SERVER__MAX_CONNECTIONS=$((fds - 256)) \
    AGENT_A2A__STREAMING__MAX_STREAMS=$((streams + 100)) \
    "$server" --config config.toml --data-dir "$data" \
    --bind "127.0.0.1:$port" --grpc-bind "$grpc_bind" >"$data/server.log" 2>&1 &
pid=$!
wait_ready "http://127.0.0.1:$port"

# One follow-up per task, all within the first second; --duration only bounds the wait.
"$load" --bench --url "http://127.0.0.1:$port/" --binding "$binding" \
    --scenario subscribe --connections "$streams" --tasks "$tasks" \
    --warmup 0s --requests "$tasks" --duration 60s --timeout 120s \
    --server-pid "$pid" --quiet --json "$report"

python3 - "$report" "$streams" "$tasks" "$binding" <<'PY'
import json, sys
report, streams, tasks, binding = sys.argv[1:]
r = json.load(open(report))
c = r["counters"]
lat = next(l for l in r["latencies"] if l["name"].startswith("delivery"))
print(f"{binding}: {c.get('subscribers attached', 0)}/{streams} streams on {tasks} tasks; "
      f"RSS {c['RSS before the attach (KiB)'] / 1024:.0f} -> "
      f"{c['RSS with the subscribers idle (KiB)'] / 1024:.0f} MiB, "
      f"{c['RSS per idle subscriber (bytes)']} B per idle stream; "
      f"open all {c['open all subscribers (ms)'] / 1000:.1f} s; delivery to all "
      f"p50 {lat['p50_ms']:.0f} ms p99 {lat['p99_ms']:.0f} ms max {lat['max_ms']:.0f} ms "
      f"({lat['count']} deliveries)")
PY
