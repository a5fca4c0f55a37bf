#!/usr/bin/env bash
# Interop test: builds the server (debug), starts it on a free loopback port with a fresh
# embedded SQLite data dir, waits for its agent card, and runs the official A2A Python
# SDK client tests (tests/interop/test_sdk_client.py) against it, over JSON-RPC, HTTP+JSON
# and gRPC (a second free port). The server is always stopped, whatever happens.
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
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" ]]; then
    echo "interop: creating virtualenv $venv"
    python3 -m venv "$venv"
fi
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]]; then
    echo "interop: installing $here/requirements.txt"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    echo "$want" > "$stamp"
fi

# --- Rust side: a debug build of the server.
echo "interop: building $bin_name (debug)"
cargo build --locked --bin "$bin_name"
server="$target_dir/debug/$bin_name"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
port="$(free_port)"
grpc_port="$(free_port)"
data_dir="$(mktemp -d /tmp/a2a-interop.XXXXXX)"
log="$data_dir/server.log"
url="http://127.0.0.1:$port"
server_pid=""

cleanup() {
    local status=$?
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [[ $status -ne 0 && -f "$log" ]]; then
        echo "interop: server log (last 80 lines):"
        tail -n 80 "$log" || true
    fi
    rm -rf "$data_dir"
    exit $status
}
trap cleanup EXIT INT TERM

echo "interop: starting $server on $url, gRPC on 127.0.0.1:$grpc_port (data dir $data_dir)"
env -u DATABASE_URL -u TEST_DATABASE_URL \
    "$server" --bind "127.0.0.1:$port" --grpc-bind "127.0.0.1:$grpc_port" \
    --data-dir "$data_dir" > "$log" 2>&1 &
server_pid=$!

card_ready() {
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2).read()' \
        "$url/.well-known/agent-card.json" 2>/dev/null
}

for _ in $(seq 1 300); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "interop: the server exited before it was ready"
        exit 1
    fi
    if card_ready; then
        break
    fi
    sleep 0.1
done
card_ready || {
    echo "interop: no agent card at $url/.well-known/agent-card.json after 30 s"
    exit 1
}

echo "interop: running pytest against $url"
A2A_URL="$url" "$venv/bin/python" -m pytest -c "$here/pytest.ini" --rootdir "$here" "$here" -v "$@"
