#!/usr/bin/env bash
# The Python virtualenv of the interop tests and of the MCP tests' server
# (tests/fixtures/mcp_server.py): created when missing, its pinned requirements
# (tests/interop/requirements.txt) reinstalled when they change. Prints the venv's Python.
#
# Environment: A2A_INTEROP_VENV, the virtualenv (default /var/tmp/a2a-interop-venv).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${A2A_INTEROP_VENV:-/var/tmp/a2a-interop-venv}"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" ]]; then
    echo "venv: creating virtualenv $venv" >&2
    python3 -m venv "$venv"
fi
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]]; then
    echo "venv: installing $here/requirements.txt" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
    echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
