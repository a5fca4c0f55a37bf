#!/usr/bin/env bash
# benches/cluster/run.sh — what cluster mode costs: one node on Postgres without cluster
# mode, the same node in cluster mode (its lease checked by every commit, its commits
# notifying the other nodes), and three nodes behind HAProxy (a follow-up on another
# node's thread is forwarded to it). The `roll` setup is a deploy: three nodes behind
# HAProxy under load while each in turn is stopped by SIGTERM, restarted and ready
# again before the next; it prints what the clients saw (the load generator does not
# retry: every failure counted is a send a client saw fail) and each node's drain time.
#
# Every run gets a fresh database and fresh processes (release builds of agent-a2a and
# of benches/load). Rounds are interleaved. Each run prints the load generator's
# throughput and latency, and the CPU time and context switches of every server
# process (and HAProxy) per request, read from /proc.
#
#   benches/cluster/run.sh                                  # send and multi-turn, 2 rounds
#   benches/cluster/run.sh --scenarios send --rounds 3 --duration 10s
#   benches/cluster/run.sh --setups roll --scenarios multi-turn --rounds 2
#   benches/cluster/run.sh --setups single,cluster3 --scenarios push   # deliveries by node
#
# Needs: cargo, haproxy, psql, and a Postgres server at --pg-url whose user may
# CREATE DATABASE. Everything listens on 127.0.0.1.

set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=../common.sh
source "$ROOT/benches/common.sh"

SCENARIOS="send multi-turn"
SETUPS="single cluster1 cluster3"
CONNECTIONS=64
DURATION=10s
ROLL_DURATION=30s
WARMUP=2s
ROUNDS=2
PG_URL=${CLUSTER_BENCH_PG_URL:-postgres://postgres@127.0.0.1:5432}
PORT_BASE=${CLUSTER_BENCH_PORT_BASE:-9301}
OUT=""
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
SERVER_GIVEN=""

usage() {
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    cat <<EOF

Options:
  --scenarios LIST    load scenarios, space- or comma-separated (default: $SCENARIOS)
  --setups LIST       of: single, cluster1, cluster3, roll (default: all but roll)
  --connections N     load generator connections (default $CONNECTIONS)
  --duration TIME     measured time per run (default $DURATION)
  --roll-duration T   measured time of a roll run, long enough for three restarts
                      (default $ROLL_DURATION)
  --warmup TIME       warm-up per run (default $WARMUP)
  --rounds N          runs per setup and scenario (default $ROUNDS)
  --pg-url URL        Postgres server, without a database (default $PG_URL)
  --out DIR           also keep each run's JSON report there
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
        --roll-duration) ROLL_DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --pg-url) PG_URL="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --server) SERVER_GIVEN="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

command -v haproxy >/dev/null || { echo "haproxy is needed (apt-get install haproxy)" >&2; exit 1; }
command -v psql >/dev/null || { echo "psql is needed" >&2; exit 1; }

echo "building agent-a2a and the load generator (release) in $TARGET_DIR"
(cd "$ROOT" && CARGO_TARGET_DIR="$TARGET_DIR" cargo build --release --quiet)
(cd "$ROOT" && CARGO_TARGET_DIR="$TARGET_DIR" cargo bench --bench load --no-run --quiet)
SERVER="${SERVER_GIVEN:-$TARGET_DIR/release/agent-a2a}"
LOAD="$(find "$TARGET_DIR/release/deps" -maxdepth 1 -type f -executable -name 'load-*' -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2)"
[[ -x "$SERVER" && -x "$LOAD" ]] || { echo "build output not found" >&2; exit 1; }

WORK="$(mktemp -d)"
PIDS=()
# The database of the run in progress, dropped if the script ends before the run does.
DB_CURRENT=""
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [[ -n "$DB_CURRENT" ]] && psql "$PG_URL/postgres" -qc "DROP DATABASE IF EXISTS $DB_CURRENT WITH (FORCE)" >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

# start_node DB ID PORT CLUSTER(true|false)
start_node() {
    mkdir -p "$WORK/$2"
    DATABASE_URL="$1" RUST_LOG=warn \
        AGENT_A2A__AUTH__ENABLED=false AGENT_A2A__PUSH__ALLOW_LOOPBACK=true \
        AGENT_A2A__CLUSTER__ENABLED="$4" AGENT_A2A__CLUSTER__NODE_ID="$2" \
        AGENT_A2A__CLUSTER__SECRET=cluster-bench-secret-0123456789 \
        "$SERVER" serve --bind "127.0.0.1:$3" --grpc-bind "" --data-dir "$WORK/$2" \
        >"$WORK/$2.log" 2>&1 &
    PIDS+=("$!")
    wait_ready "http://127.0.0.1:$3"
}

# start_balancer PORT NODE_PORT...
start_balancer() {
    local port="$1" servers="" i=0
    shift
    for p in "$@"; do
        i=$((i + 1))
        servers+="    server n$i 127.0.0.1:$p check"$'\n'
    done
    cat >"$WORK/haproxy.cfg" <<EOF
global
    maxconn 4000
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response 503
frontend a2a
    bind 127.0.0.1:$port
    default_backend nodes
backend nodes
    balance roundrobin
    option httpchk GET /health/ready
    default-server inter 500ms fall 2 rise 1
$servers
EOF
    haproxy -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
    PIDS+=("$!")
    wait_ready "http://127.0.0.1:$port"
}

run_one() { # setup scenario round
    local setup="$1" scenario="$2" round="$3" db url
    db="cluster_bench_$(date +%s%N)"
    psql "$PG_URL/postgres" -qc "CREATE DATABASE $db" >/dev/null
    DB_CURRENT="$db"
    PIDS=()
    case "$setup" in
        single) start_node "$PG_URL/$db" n1 "$PORT_BASE" false; url="http://127.0.0.1:$PORT_BASE" ;;
        cluster1) start_node "$PG_URL/$db" n1 "$PORT_BASE" true; url="http://127.0.0.1:$PORT_BASE" ;;
        cluster3)
            for i in 1 2 3; do start_node "$PG_URL/$db" "n$i" $((PORT_BASE + i)) true; done
            start_balancer "$PORT_BASE" $((PORT_BASE + 1)) $((PORT_BASE + 2)) $((PORT_BASE + 3))
            url="http://127.0.0.1:$PORT_BASE"
            ;;
    esac
    local before_ticks=0 before_switches=0 after_ticks=0 after_switches=0 pid
    for pid in "${PIDS[@]}"; do
        before_ticks=$((before_ticks + $(ticks "$pid")))
        before_switches=$((before_switches + $(switches "$pid")))
    done
    local report="$WORK/report.json"
    "$LOAD" --url "$url/" --scenario "$scenario" --connections "$CONNECTIONS" \
        --duration "$DURATION" --warmup "$WARMUP" --quiet --json "$report" >/dev/null
    for pid in "${PIDS[@]}"; do
        after_ticks=$((after_ticks + $(ticks "$pid")))
        after_switches=$((after_switches + $(switches "$pid")))
    done
    [[ -n "$OUT" ]] && mkdir -p "$OUT" && cp "$report" "$OUT/$setup-$scenario-$round.json"
    report "$report" "$setup" "$scenario" "$round" $((after_ticks - before_ticks)) \
        $((after_switches - before_switches))
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
    psql "$PG_URL/postgres" -qc "DROP DATABASE IF EXISTS $db" >/dev/null
    DB_CURRENT=""
}

# A deploy under load: three nodes behind HAProxy (checks as in deploy/haproxy.cfg),
# the load running, each node stopped by SIGTERM, restarted and ready again in turn.
run_roll() { # scenario round
    local scenario="$1" round="$2" db url i t0 t1 drains="" report="$WORK/report.json"
    local -a node_pids=()
    db="cluster_bench_$(date +%s%N)"
    psql "$PG_URL/postgres" -qc "CREATE DATABASE $db" >/dev/null
    DB_CURRENT="$db"
    PIDS=()
    for i in 1 2 3; do
        start_node "$PG_URL/$db" "n$i" $((PORT_BASE + i)) true
        node_pids[i]="${PIDS[-1]}"
    done
    start_balancer "$PORT_BASE" $((PORT_BASE + 1)) $((PORT_BASE + 2)) $((PORT_BASE + 3))
    url="http://127.0.0.1:$PORT_BASE"
    "$LOAD" --url "$url/" --scenario "$scenario" --connections "$CONNECTIONS" \
        --duration "$ROLL_DURATION" --warmup "$WARMUP" --quiet --json "$report" >/dev/null &
    local load=$!
    sleep "$WARMUP"
    sleep 2
    for i in 1 2 3; do
        t0=$(date +%s%N)
        kill -TERM "${node_pids[i]}"
        wait "${node_pids[i]}" || true
        t1=$(date +%s%N)
        drains+=" n$i $(((t1 - t0) / 1000000)) ms"
        start_node "$PG_URL/$db" "n$i" $((PORT_BASE + i)) true
        node_pids[i]="${PIDS[-1]}"
        sleep 2
    done
    wait "$load" || true
    [[ -n "$OUT" ]] && mkdir -p "$OUT" && cp "$report" "$OUT/roll-$scenario-$round.json"
    python3 - "$report" "$scenario" "$round" "$drains" <<'PY'
import json, sys
report, scenario, rnd, drains = sys.argv[1:]
r = json.load(open(report))
lat = r["latencies"][0]
ops = r["succeeded"] + r["failed"]
errors = ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items())) or "none"
print(f"roll      {scenario:<11} round {rnd}: {r['succeeded_per_sec']:8.0f} ok/s  "
      f"failed {r['failed']} of {ops} ({100 * r['failed'] / max(ops, 1):.2f} %; {errors})  "
      f"p99 {lat['p99_ms']:.1f} ms  longest {lat['max_ms']:.0f} ms  drains:{drains}")
PY
    for i in "${PIDS[@]}"; do kill -TERM "$i" 2>/dev/null || true; done
    for i in "${PIDS[@]}"; do wait "$i" 2>/dev/null || true; done
    PIDS=()
    psql "$PG_URL/postgres" -qc "DROP DATABASE IF EXISTS $db" >/dev/null
    DB_CURRENT=""
}

echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); c=$CONNECTIONS, $DURATION per run"
for round in $(seq 1 "$ROUNDS"); do
    for scenario in $SCENARIOS; do
        for setup in $SETUPS; do
            case "$setup" in
                roll) run_roll "$scenario" "$round" ;;
                *) run_one "$setup" "$scenario" "$round" ;;
            esac
        done
    done
done
