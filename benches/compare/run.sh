#!/usr/bin/env bash
# benches/compare/run.sh — agent-a2a side by side with other A2A servers.
#
# Installs and starts, one after the other, echo agents that complete a task per
# SendMessage — the official Python SDK (a2a-sdk, uvicorn), the official JS SDK
# (@a2a-js/sdk, express), the official Rust SDK (a2a-server-lf, axum), turul-a2a
# (crates.io; in memory, and on its own Postgres store as turul-a2a-postgres),
# a2a-protocol-server (crates.io, on its Postgres store: a2a-protocol-postgres), a bare
# actix-web handler (the ceiling), and agent-a2a itself (release build, durable
# write-through to SQLite, then to Postgres)
# — and loads each with the same run of benches/load (send, closed loop). Each target
# runs --rounds times, the rounds interleaved; every run gets a fresh server (and a fresh
# data directory or database). The JSON reports, a summary table (summarize.py) and its
# JSON/Markdown go to --out. See benches/README.md, "Comparison".
#
#   benches/compare/run.sh                        # everything, 2 rounds of 10 s at c=64
#   benches/compare/run.sh --only ceiling,agent-a2a-sqlite --rounds 1 --duration 5s
#   benches/compare/run.sh --perf agent-a2a-sqlite   # also profile that server's runs
#
# Needs: Rust (cargo), curl, python3; apt-get (as root or through sudo) for what is
# missing of python3-venv, nodejs/npm, protobuf-compiler and, for --perf, linux-perf.
# The Postgres runs need a server at --pg-url (a superuser that may CREATE DATABASE);
# without one they are skipped with a note. Every server listens on 127.0.0.1 only.

set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

ALL_TARGETS="python-sdk js-sdk turul-a2a ceiling agent-a2a-sqlite agent-a2a-postgres a2a-rs turul-a2a-postgres a2a-protocol-postgres"
TARGETS="$ALL_TARGETS"
CONNECTIONS=64
DURATION=10s
WARMUP=2s
ROUNDS=2
PORT_BASE=${COMPARE_PORT_BASE:-9101}
PG_URL=${COMPARE_PG_URL:-postgres://postgres@127.0.0.1:5432}
WORK="$HERE/.work"
OUT=""
PERF_TARGET=""
SKIP_INSTALL=0
SCENARIO=send
TURNS=4

# How long each step may take, in seconds.
INSTALL_TIMEOUT=1200   # apt, pip, npm
BUILD_TIMEOUT=5400     # each cargo build (a cold release build is slow on 2 cores)
READY_TIMEOUT=60       # a server to accept connections
STOP_TIMEOUT=15        # a server to exit after SIGTERM, then SIGKILL

usage() {
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
    cat <<EOF

Options:
  --only LIST         comma-separated targets (default: all of: ${ALL_TARGETS// /,})
  --connections N     load generator connections (default $CONNECTIONS)
  --duration TIME     measured time per run (default $DURATION)
  --warmup TIME       warm-up per run (default $WARMUP)
  --rounds N          runs per target (default $ROUNDS)
  --port-base PORT    first of nine consecutive ports (default $PORT_BASE)
  --pg-url URL        Postgres server for the Postgres runs, without a database
                      (default $PG_URL)
  --work DIR          venv, build output of the fixtures, run data (default benches/compare/.work)
  --out DIR           reports and summary (default <work>/results-<UTC time>)
  --perf TARGET       perf record (DWARF call graphs) the server of TARGET during its runs;
                      its profile goes to <out>/<target>-<round>.perf.txt
  --skip-install      use what an earlier run installed and built
  --scenario NAME     send (default): every request a new conversation; stream: the same
                      as SendStreamingMessage, each stream read to its end (not the
                      ceiling, which has none); multi-turn:
                      conversations of --turns messages (default 4), and agent-a2a
                      keeps at most 16 threads in memory, so a follow-up mostly finds
                      its thread evicted and reloads it from the store
  --turns N           messages per conversation of multi-turn (default 4)
                      push: sends registering a push config whose receiver the load
                      generator runs; the events delivered there are measured (agent-a2a
                      only: no peer delivers durably; its loopback receivers allowed)
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --only) TARGETS="${2//,/ }"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --port-base) PORT_BASE="$2"; shift 2 ;;
        --pg-url) PG_URL="${2%/}"; shift 2 ;;
        --work) WORK="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --perf) PERF_TARGET="$2"; shift 2 ;;
        --skip-install) SKIP_INSTALL=1; shift ;;
        --scenario) SCENARIO="$2"; shift 2 ;;
        --turns) TURNS="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
for t in $TARGETS; do
    [[ " $ALL_TARGETS " == *" $t "* ]] || { echo "run.sh: unknown target $t" >&2; exit 2; }
done
case "$SCENARIO" in
    send | multi-turn | stream | push) ;;
    *) echo "run.sh: --scenario is send, multi-turn, stream or push" >&2; exit 2 ;;
esac
if [[ "$SCENARIO" == push ]]; then
    # Only agent-a2a delivers push notifications from a durable outbox.
    kept=""
    for t in $TARGETS; do [[ "$t" == agent-a2a-* ]] && kept+=" $t"; done
    [[ "$kept" != "$TARGETS" ]] && echo "run.sh: --scenario push runs agent-a2a only" >&2
    TARGETS="${kept# }"
    [[ -n "$TARGETS" ]] || { echo "run.sh: --scenario push needs an agent-a2a target" >&2; exit 2; }
fi
if [[ "$SCENARIO" == stream && " $TARGETS " == *" ceiling "* ]]; then
    # The bare handler answers one JSON body; it has no stream to measure.
    TARGETS="${TARGETS/ceiling/}"
    echo "run.sh: the ceiling has no stream; left out of --scenario stream" >&2
fi

mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
OUT="${OUT:-$WORK/results-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOGS="$OUT/logs"
mkdir -p "$LOGS"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

seconds() { # durations such as 2s, 500ms, 1m -> their sum in seconds
    python3 -c '
import re, sys
unit = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}
print(sum(float(n) * unit[u] for arg in sys.argv[1:]
          for n, u in re.findall(r"([0-9.]+)\s*([a-z]+)", arg)))' "$@"
}

cpu_ticks() { # pid -> user + system CPU time in clock ticks (fields 14 and 15 of stat)
    sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

postgres_ticks() { # CPU ticks of every process named postgres (the server and its backends)
    local total=0 pid t
    for pid in $(pgrep -x postgres || true); do
        t="$(cpu_ticks "$pid" 2>/dev/null || echo 0)"
        total=$((total + t))
    done
    echo "$total"
}

log() { printf '[compare %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------------------------------
# Clean-up: whatever server is running, a perf recorder, a database created for a run.

SERVER_PID=""
PERF_PID=""
LOAD_PID=""
PG_DB=""

stop_pid() { # pid: SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL
    local pid="$1" i
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    log "pid $pid did not stop in ${STOP_TIMEOUT}s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

drop_db() {
    [[ -n "$PG_DB" ]] || return 0
    timeout 30 psql -q -X "$PG_URL/postgres" -c "DROP DATABASE IF EXISTS \"$PG_DB\" WITH (FORCE)" \
        >/dev/null 2>&1 || log "could not drop database $PG_DB"
    PG_DB=""
}

cleanup() {
    stop_pid "$LOAD_PID"; LOAD_PID=""
    stop_pid "$PERF_PID"; PERF_PID=""
    stop_pid "$SERVER_PID"; SERVER_PID=""
    drop_db
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# ---------------------------------------------------------------------------------------
# Prerequisites

as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

APT_UPDATED=0
apt_install() {
    command -v apt-get >/dev/null || die "apt-get not found; install $* yourself"
    if [[ $APT_UPDATED -eq 0 ]]; then
        as_root timeout "$INSTALL_TIMEOUT" apt-get update -qq || die "apt-get update failed"
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive timeout "$INSTALL_TIMEOUT" \
        apt-get install -y -qq "$@" >"$LOGS/apt.log" 2>&1 \
        || die "apt-get install $* failed (see $LOGS/apt.log)"
}

wants() { [[ " $TARGETS " == *" $1 "* ]]; }

install_prerequisites() {
    command -v curl >/dev/null || apt_install curl
    command -v python3 >/dev/null || apt_install python3
    if wants python-sdk && ! python3 -m venv --help >/dev/null 2>&1; then
        apt_install python3-venv
    fi
    if wants js-sdk && ! { command -v node && command -v npm; } >/dev/null 2>&1; then
        apt_install nodejs npm
    fi
    if { wants turul-a2a || wants turul-a2a-postgres; } && ! command -v protoc >/dev/null; then
        apt_install protobuf-compiler
    fi
    if { wants agent-a2a-postgres || wants turul-a2a-postgres || wants a2a-protocol-postgres; } \
        && ! command -v psql >/dev/null; then
        apt_install postgresql-client
    fi
    if [[ -n "$PERF_TARGET" ]] && ! command -v perf >/dev/null; then
        apt_install linux-perf
    fi
}

# ---------------------------------------------------------------------------------------
# Builds and installs

LOAD_BIN=""
EXAMPLES="$CARGO_TARGET_DIR/release/examples"
TURUL_TARGET="$CARGO_TARGET_DIR/compare-turul"
TURUL_BIN="$TURUL_TARGET/release/compare-turul-echo"
A2A_RS_TARGET="$CARGO_TARGET_DIR/compare-a2a-rs"
A2A_RS_BIN="$A2A_RS_TARGET/release/compare-a2a-rs-echo"
A2A_PROTOCOL_TARGET="$CARGO_TARGET_DIR/compare-a2a-protocol"
A2A_PROTOCOL_BIN="$A2A_PROTOCOL_TARGET/release/compare-a2a-protocol-echo"
VENV="$WORK/venv"

build_load_generator() {
    log "building the load generator (cargo bench --bench load --no-run)"
    LOAD_BIN="$(cd "$ROOT" && timeout "$BUILD_TIMEOUT" cargo bench --locked --bench load --no-run \
        --message-format=json 2>"$LOGS/build-load.log" \
        | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "load" and m.get("executable"):
        print(m["executable"])')" || die "building the load generator failed (see $LOGS/build-load.log)"
    [[ -x "$LOAD_BIN" ]] || die "no load generator executable (see $LOGS/build-load.log)"
}

build_examples() {
    local args=()
    wants ceiling && args+=(--example compare_ceiling)
    if wants agent-a2a-sqlite || wants agent-a2a-postgres; then args+=(--example compare_echo); fi
    [[ ${#args[@]} -gt 0 ]] || return 0
    log "building ${args[*]} (release)"
    (cd "$ROOT" && timeout "$BUILD_TIMEOUT" cargo build --locked --release "${args[@]}") \
        >"$LOGS/build-examples.log" 2>&1 || die "cargo build failed (see $LOGS/build-examples.log)"
}

build_turul() {
    wants turul-a2a || wants turul-a2a-postgres || return 0
    log "building the turul-a2a fixture (release)"
    CARGO_TARGET_DIR="$TURUL_TARGET" timeout "$BUILD_TIMEOUT" cargo build --locked --release \
        --manifest-path "$HERE/turul/Cargo.toml" >"$LOGS/build-turul.log" 2>&1 \
        || die "building the turul-a2a fixture failed (see $LOGS/build-turul.log)"
}

build_a2a_rs() {
    wants a2a-rs || return 0
    log "building the a2a-server-lf fixture (release)"
    CARGO_TARGET_DIR="$A2A_RS_TARGET" timeout "$BUILD_TIMEOUT" cargo build --locked --release \
        --manifest-path "$HERE/a2a-rs/Cargo.toml" >"$LOGS/build-a2a-rs.log" 2>&1 \
        || die "building the a2a-server-lf fixture failed (see $LOGS/build-a2a-rs.log)"
}

build_a2a_protocol() {
    wants a2a-protocol-postgres || return 0
    log "building the a2a-protocol-server fixture (release)"
    CARGO_TARGET_DIR="$A2A_PROTOCOL_TARGET" timeout "$BUILD_TIMEOUT" cargo build --locked --release \
        --manifest-path "$HERE/a2a-protocol/Cargo.toml" >"$LOGS/build-a2a-protocol.log" 2>&1 \
        || die "building the a2a-protocol-server fixture failed (see $LOGS/build-a2a-protocol.log)"
}

install_python() {
    wants python-sdk || return 0
    log "installing a2a-sdk into $VENV"
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV" || die "python3 -m venv failed"
    timeout "$INSTALL_TIMEOUT" "$VENV/bin/pip" install -q --disable-pip-version-check \
        -r "$HERE/python/requirements.txt" >"$LOGS/pip.log" 2>&1 \
        || die "pip install failed (see $LOGS/pip.log)"
}

install_js() {
    wants js-sdk || return 0
    log "installing @a2a-js/sdk (npm ci)"
    (cd "$HERE/js" && timeout "$INSTALL_TIMEOUT" npm ci --no-audit --no-fund) \
        >"$LOGS/npm.log" 2>&1 || die "npm ci failed (see $LOGS/npm.log)"
}

# ---------------------------------------------------------------------------------------
# Servers

port_of() { # target -> its port
    local i=0 t
    for t in $ALL_TARGETS; do
        [[ "$t" == "$1" ]] && { echo $((PORT_BASE + i)); return; }
        i=$((i + 1))
    done
}

endpoint_of() { # target -> JSON-RPC URL
    local port; port="$(port_of "$1")"
    case "$1" in
        turul-a2a | turul-a2a-postgres) echo "http://127.0.0.1:$port/jsonrpc" ;;
        *) echo "http://127.0.0.1:$port/" ;;
    esac
}

# agent-a2a's settings for the benchmark: its defaults with auth off (rate limits apply
# per authenticated tenant, so they are off with it), as the peers have neither.
AGENT_CONFIG="$WORK/agent-a2a-bench.toml"
write_agent_config() {
    {
        echo "# benches/compare/run.sh: agent-a2a's defaults for the benchmark."
        printf '[auth]\nenabled = false\n'
        # multi-turn: follow-ups find their thread evicted (64 conversations, 16 in memory)
        # and reload it from the store, as on a node with more conversations than memory.
        if [[ "$SCENARIO" == multi-turn ]]; then
            printf '[threads]\nmax_resident_actors = 16\n'
        fi
        # push: the load generator's receivers listen on loopback.
        if [[ "$SCENARIO" == push ]]; then
            printf '[push]\nallow_loopback = true\n'
        fi
    } >"$AGENT_CONFIG"
}

start_server() { # target run-id: starts it in the background, sets SERVER_PID
    local target="$1" run="$2" port; port="$(port_of "$target")"
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "port $port is already in use (pick others with --port-base)"
    fi
    local logf="$LOGS/$run.server.log" clear=()
    mapfile -t clear < <(agent_env_cleared)
    case "$target" in
        python-sdk)
            "$VENV/bin/python" "$HERE/python/echo.py" --host 127.0.0.1 --port "$port" >"$logf" 2>&1 &
            ;;
        js-sdk)
            NODE_ENV=production node "$HERE/js/echo.mjs" --host 127.0.0.1 --port "$port" >"$logf" 2>&1 &
            ;;
        turul-a2a)
            "$TURUL_BIN" "127.0.0.1:$port" >"$logf" 2>&1 &
            ;;
        a2a-protocol-postgres)
            PG_DB="a2a_compare_${run//[^a-zA-Z0-9]/_}_$$"
            timeout 30 psql -q -X "$PG_URL/postgres" -c "CREATE DATABASE \"$PG_DB\"" \
                >/dev/null || die "could not create database $PG_DB at $PG_URL"
            "$A2A_PROTOCOL_BIN" "127.0.0.1:$port" "$PG_URL/$PG_DB" >"$logf" 2>&1 &
            ;;
        turul-a2a-postgres)
            PG_DB="a2a_compare_${run//[^a-zA-Z0-9]/_}_$$"
            timeout 30 psql -q -X "$PG_URL/postgres" -c "CREATE DATABASE \"$PG_DB\"" \
                >/dev/null || die "could not create database $PG_DB at $PG_URL"
            "$TURUL_BIN" "127.0.0.1:$port" "$PG_URL/$PG_DB" >"$logf" 2>&1 &
            ;;
        a2a-rs)
            "$A2A_RS_BIN" "127.0.0.1:$port" >"$logf" 2>&1 &
            ;;
        ceiling)
            "$EXAMPLES/compare_ceiling" "127.0.0.1:$port" >"$logf" 2>&1 &
            ;;
        agent-a2a-sqlite)
            local data="$WORK/data/$run"
            rm -rf "$data"; mkdir -p "$data"
            env "${clear[@]}" "$EXAMPLES/compare_echo" --config "$AGENT_CONFIG" \
                --bind "127.0.0.1:$port" --grpc-bind "" --data-dir "$data" >"$logf" 2>&1 &
            ;;
        agent-a2a-postgres)
            local data="$WORK/data/$run"
            rm -rf "$data"; mkdir -p "$data"
            PG_DB="a2a_compare_${run//[^a-zA-Z0-9]/_}_$$"
            timeout 30 psql -q -X "$PG_URL/postgres" -c "CREATE DATABASE \"$PG_DB\"" \
                >/dev/null || die "could not create database $PG_DB at $PG_URL"
            env "${clear[@]}" DATABASE_URL="$PG_URL/$PG_DB" "$EXAMPLES/compare_echo" \
                --config "$AGENT_CONFIG" --bind "127.0.0.1:$port" --grpc-bind "" --data-dir "$data" >"$logf" 2>&1 &
            ;;
    esac
    SERVER_PID=$!
    local i
    for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
        kill -0 "$SERVER_PID" 2>/dev/null || die "$target exited at start (see $logf)"
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    die "$target did not listen on port $port within ${READY_TIMEOUT}s (see $logf)"
}

agent_env_cleared() { # env's -u NAME, one per line, for what would change agent-a2a's settings
    local name
    for name in $(compgen -e); do
        case "$name" in AGENT_A2A__*|DATABASE_URL|RUST_LOG) printf -- '-u\n%s\n' "$name" ;; esac
    done
}

# One SendMessage by hand: which dialect the target answers, checked to complete a task.
# Prints 1.0 or 0.3.
probe_dialect() {
    local url="$1" out
    out="$(curl -sS -m 10 "$url" -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \
        -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"probe-1","role":"ROLE_USER","parts":[{"text":"probe"}]}}}' \
        || true)"
    if [[ "$out" == *'"TASK_STATE_COMPLETED"'* ]]; then echo 1.0; return; fi
    out="$(curl -sS -m 10 "$url" -H 'Content-Type: application/json' -H 'A2A-Version: 0.3' \
        -d '{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"probe-2","role":"user","parts":[{"kind":"text","text":"probe"}]}}}' \
        || true)"
    if [[ "$out" == *'"completed"'* ]]; then echo 0.3; return; fi
    echo "none"
}

# ---------------------------------------------------------------------------------------
# Runs

run_one() { # target round
    local target="$1" round="$2" run="$1-$2"
    log "$run: starting the server"
    start_server "$target" "$run"
    local url dialect; url="$(endpoint_of "$target")"
    dialect="$(probe_dialect "$url")"
    [[ "$dialect" != none ]] || die "$target did not complete a task for a SendMessage (see $LOGS/$run.server.log)"
    if [[ "$target" == "$PERF_TARGET" ]]; then
        # DWARF call graphs: the release build has no frame pointers.
        perf record -F 199 --call-graph dwarf,16384 -p "$SERVER_PID" -o "$OUT/$run.perf.data" \
            -- sleep "$(seconds "$WARMUP" "$DURATION")" >"$LOGS/$run.perf.log" 2>&1 &
        PERF_PID=$!
    fi
    log "$run: loading $url (dialect $dialect, c=$CONNECTIONS, $WARMUP warm-up, $DURATION)"
    # Other work on the machine skews a run; its load average says how busy it was.
    echo "$run before $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/loadavg.txt"
    local rc=0 cpu0 cpu1 pg0 pg1
    timeout 600 "$LOAD_BIN" --url "$url" --scenario "$SCENARIO" --turns "$TURNS" --dialect "$dialect" \
        --connections "$CONNECTIONS" --duration "$DURATION" --warmup "$WARMUP" --timeout 10s \
        --server-pid "$SERVER_PID" --format json --json "$OUT/$run.json" --quiet \
        >/dev/null 2>"$LOGS/$run.load.log" &
    LOAD_PID=$!
    # The server's CPU time over the measured window (from the end of the warm-up, as
    # timed here, to the end of the run): what a request costs, whatever else runs.
    sleep "$(seconds "$WARMUP")"
    cpu0="$(cpu_ticks "$SERVER_PID")"
    pg0="$(postgres_ticks)"
    wait "$LOAD_PID" || rc=$?
    LOAD_PID=""
    cpu1="$(cpu_ticks "$SERVER_PID")"
    pg1="$(postgres_ticks)"
    # The database's own CPU, beside the server's: on Postgres a request costs both. (Any
    # other client of the local Postgres in the window counts too.)
    local pg_ticks=0
    [[ "$target" == *postgres* ]] && pg_ticks=$((pg1 - pg0))
    echo "{\"cpu_ticks\": $((cpu1 - cpu0)), \"postgres_ticks\": $pg_ticks, \"clk_tck\": $(getconf CLK_TCK)}" >"$OUT/$run.cpu.json"
    [[ -s "$OUT/$run.json" ]] || die "$run: the load generator wrote no report (exit $rc, see $LOGS/$run.load.log)"
    echo "$run after $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/loadavg.txt"
    [[ $rc -eq 0 ]] || log "$run: the load generator exited with $rc (see $LOGS/$run.load.log)"
    if [[ -n "$PERF_PID" ]]; then
        wait "$PERF_PID" 2>/dev/null || true
        PERF_PID=""
        {
            echo "# self time"
            timeout 900 perf report -i "$OUT/$run.perf.data" --stdio --no-children --sort sym \
                -g none --percent-limit 0.5 2>/dev/null
            echo "# with callees"
            timeout 900 perf report -i "$OUT/$run.perf.data" --stdio --children --sort sym \
                -g none --percent-limit 2 2>/dev/null
        } >"$OUT/$run.perf.txt" || true
    fi
    stop_pid "$SERVER_PID"; SERVER_PID=""
    drop_db
    rm -rf "$WORK/data/$run"   # agent-a2a's store of the run: ~100 MB per 10 s
    python3 - "$OUT/$run.json" <<'EOF' >&2
import json, sys
r = json.load(open(sys.argv[1]))
lat = r["latencies"][0]
mem = r.get("memory") or {}
print(f"    {r['succeeded_per_sec']:.0f} ok/s, p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, "
      f"failed {r['failed']}, peak RSS {mem.get('rss_peak_kib', 0) / 1024:.1f} MiB")
EOF
}

postgres_reachable() {
    timeout 10 psql -q -X "$PG_URL/postgres" -c 'SELECT 1' >/dev/null 2>&1
}

main() {
    log "targets: $TARGETS; output: $OUT"
    if [[ $SKIP_INSTALL -eq 0 ]]; then
        install_prerequisites
        install_python
        install_js
        build_turul
        build_a2a_rs
        build_a2a_protocol
        build_examples
    fi
    build_load_generator   # quick when built: it also yields the executable's path
    write_agent_config

    if { wants agent-a2a-postgres || wants turul-a2a-postgres || wants a2a-protocol-postgres; } \
        && ! postgres_reachable; then
        log "no Postgres at $PG_URL: skipping the Postgres targets"
        echo "agent-a2a-postgres, turul-a2a-postgres, a2a-protocol-postgres skipped: no Postgres at $PG_URL" >>"$OUT/notes.txt"
        TARGETS="${TARGETS/a2a-protocol-postgres/}"
        TARGETS="${TARGETS/turul-a2a-postgres/}"
        TARGETS="${TARGETS/agent-a2a-postgres/}"
    fi

    {
        echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        echo "dirty=$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo yes || echo no)"
        echo "cpus=$(nproc)"
        echo "cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
        echo "kernel=$(uname -r)"
        echo "rustc=$(rustc --version)"
        echo "scenario=$SCENARIO"
        echo "turns=$TURNS"
        echo "connections=$CONNECTIONS"
        echo "duration=$DURATION"
        echo "warmup=$WARMUP"
        echo "rounds=$ROUNDS"
        echo "targets=$TARGETS"
        if wants python-sdk; then
            echo "python=$("$VENV/bin/python" --version 2>&1)"
            echo "a2a_sdk=$("$VENV/bin/python" -c 'from importlib.metadata import version as v; print(v("a2a-sdk"), "uvicorn", v("uvicorn"), "uvloop", v("uvloop"))')"
        fi
        if wants js-sdk; then
            echo "node=$(node --version)"
            echo "a2a_js_sdk=$(cd "$HERE/js" && node -p 'require("./node_modules/@a2a-js/sdk/package.json").version + " express " + require("./node_modules/express/package.json").version')"
        fi
        if wants turul-a2a || wants turul-a2a-postgres; then
            echo "turul_a2a=$(awk '/^name = "turul-a2a"$/ {getline; print $3}' "$HERE/turul/Cargo.lock" | tr -d '"')"
        fi
        if wants a2a-protocol-postgres; then
            echo "a2a_protocol_server=$(awk '/^name = "a2a-protocol-server"$/ {getline; print $3}' "$HERE/a2a-protocol/Cargo.lock" | tr -d '"')"
        fi
        if wants a2a-rs; then
            echo "a2a_server_lf=$(awk '/^name = "a2a-server-lf"$/ {getline; print $3}' "$HERE/a2a-rs/Cargo.lock" | tr -d '"')"
        fi
        if wants agent-a2a-postgres || wants turul-a2a-postgres || wants a2a-protocol-postgres; then
            echo "postgres=$(timeout 10 psql -X -At "$PG_URL/postgres" -c 'SHOW server_version' 2>/dev/null || echo unknown)"
        fi
    } >"$OUT/meta.txt"

    local round target
    for ((round = 1; round <= ROUNDS; round++)); do
        for target in $TARGETS; do
            run_one "$target" "$round"
        done
    done

    python3 "$HERE/summarize.py" "$OUT"
    log "reports, summary.json and summary.md in $OUT"
}

main
