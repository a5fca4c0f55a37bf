#!/usr/bin/env bash
# Interop test: builds the server (debug), starts it on a free loopback port with a fresh
# embedded SQLite data dir, waits for its agent card, and runs the official A2A Python
# SDK client tests (tests/interop/test_sdk_client.py) against it, over JSON-RPC, HTTP+JSON
# and gRPC (a second free port). Two more servers sign their cards (with the test-only
# keys of tests/fixtures and an API key), one with the 0.3 card fields and one without,
# for the SDK's card signing tests (tests/interop/test_card_signing.py). An agent on the
# SDK's own server (tests/interop/sdk_agent.py) is the remote agent a fourth server asks
# through its tool `ask_python` (tests/interop/test_remote_agent.py; one test starts,
# SIGKILLs and restarts a calling server of its own). The servers are always stopped,
# whatever happens.
#
# Usage: tests/interop/run.sh [pytest args...]
# Environment:
#   A2A_INTEROP_VENV   virtualenv to (re)use (default /var/tmp/a2a-interop-venv)
#   CARGO_TARGET_DIR   as for cargo (default ./target)
#   A2A_SERVER_BIN     the cargo binary to serve (default agent-a2a)
# The server gets no DATABASE_URL, so it always runs on its own throwaway SQLite file.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

venv="${A2A_INTEROP_VENV:-/var/tmp/a2a-interop-venv}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
bin_name="${A2A_SERVER_BIN:-agent-a2a}"

# --- Python side: a virtualenv with the pinned requirements (reinstalled when they change).
bash "$here/venv.sh" > /dev/null

# --- Rust side: a debug build of the server.
echo "interop: building $bin_name (debug)"
cargo build --locked --bin "$bin_name"
server="$target_dir/debug/$bin_name"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
port="$(free_port)"
grpc_port="$(free_port)"
work="$(mktemp -d /tmp/a2a-interop.XXXXXX)"
url="http://127.0.0.1:$port"
pids=()
logs=()

cleanup() {
    local status=$?
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -9 "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    if [[ $status -ne 0 ]]; then
        for log in "${logs[@]}"; do
            [[ -f "$log" ]] || continue
            echo "interop: $log (last 80 lines):"
            tail -n 80 "$log" || true
        done
    fi
    rm -rf "$work"
    exit $status
}
trap cleanup EXIT INT TERM

card_ready() {
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2).read()' \
        "$1/.well-known/agent-card.json" 2>/dev/null
}

# start NAME URL ARGS...: a server with its own data dir and log, waited for.
start() {
    local name="$1" at="$2"
    shift 2
    mkdir -p "$work/$name"
    logs+=("$work/$name/server.log")
    echo "interop: starting $name on $at"
    env -u DATABASE_URL -u TEST_DATABASE_URL \
        "$server" --data-dir "$work/$name" "$@" > "$work/$name/server.log" 2>&1 &
    pids+=("$!")
    for _ in $(seq 1 300); do
        if ! kill -0 "${pids[-1]}" 2>/dev/null; then
            echo "interop: $name exited before it was ready"
            exit 1
        fi
        card_ready "$at" && return 0
        sleep 0.1
    done
    echo "interop: no agent card at $at/.well-known/agent-card.json after 30 s"
    exit 1
}

start default "$url" --bind "127.0.0.1:$port" --grpc-bind "127.0.0.1:$grpc_port"

# The signing servers: an API key, and a card signed with a test-only key.
api_key="interop-signing-key"
signed() { # signed NAME ALGORITHM KEY_FILE V03_FIELDS
    cat > "$work/$1.toml" <<TOML
[auth]
enabled = true
[[auth.api_keys]]
key = "$api_key"
tenant = "interop"
[agent]
card_v03_fields = $4
[agent.card_signing]
key_file = "$root/tests/fixtures/$3"
algorithm = "$2"
kid = "interop-$1"
TOML
}
hybrid_url="http://127.0.0.1:$(free_port)"
v1_url="http://127.0.0.1:$(free_port)"
signed hybrid ES256 test-only-es256-a.pem true
signed v1 EdDSA test-only-ed25519.pem false
start hybrid "$hybrid_url" --config "$work/hybrid.toml" --bind "${hybrid_url#http://}" --grpc-bind ""
start v1 "$v1_url" --config "$work/v1.toml" --bind "${v1_url#http://}" --grpc-bind ""

# The Python SDK's server as a remote agent, and a server that asks it.
sdk_port="$(free_port)"
mkdir -p "$work/sdk-agent"
logs+=("$work/sdk-agent/server.log")
echo "interop: starting the Python SDK agent on 127.0.0.1:$sdk_port"
"$venv/bin/python" "$here/sdk_agent.py" --host 127.0.0.1 --port "$sdk_port" \
    > "$work/sdk-agent/server.log" 2>&1 &
pids+=("$!")
for _ in $(seq 1 300); do
    card_ready "http://127.0.0.1:$sdk_port" && break
    kill -0 "${pids[-1]}" 2>/dev/null || { echo "interop: the Python SDK agent exited"; exit 1; }
    sleep 0.1
done
cat > "$work/asking.toml" <<TOML
[auth]
enabled = false
[push]
allow_loopback = true
[[agent.remote_agents]]
name = "python"
card_url = "http://127.0.0.1:$sdk_port/.well-known/agent-card.json"
TOML
asking_url="http://127.0.0.1:$(free_port)"
start asking "$asking_url" --config "$work/asking.toml" --bind "${asking_url#http://}" --grpc-bind ""

echo "interop: running pytest against $url (signing: $hybrid_url, $v1_url; asking: $asking_url)"
A2A_URL="$url" A2A_SIGNED_HYBRID_URL="$hybrid_url" A2A_SIGNED_V1_URL="$v1_url" \
    A2A_SIGNED_API_KEY="$api_key" A2A_SERVER_BINARY="$server" A2A_ASKING_URL="$asking_url" \
    A2A_SDK_AGENT_URL="http://127.0.0.1:$sdk_port" \
    "$venv/bin/python" -m pytest -c "$here/pytest.ini" --rootdir "$here" "$here" -v "$@"
