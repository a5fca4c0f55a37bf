"""Interop: an agent-a2a server asks an agent on the official A2A Python SDK's server
(``tests/interop/sdk_agent.py``) through its tool ``ask_python``.

``tests/interop/run.sh`` starts the SDK's agent and, at ``$A2A_ASKING_URL``, an
agent-a2a server with ``[[agent.remote_agents]] name = "python"`` pointing at its card.
Each test calls the tool directly (a data part ``{"tool": "ask_python", ...}``) over
JSON-RPC 1.0 and reads the tool's result from the task's artifact.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

ASKING_URL = os.environ.get("A2A_ASKING_URL", "").rstrip("/")
SDK_AGENT_URL = os.environ.get("A2A_SDK_AGENT_URL", "").rstrip("/")


def rpc(url: str, method: str, params: dict) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = httpx.post(url + "/", json=body, headers={"A2A-Version": "1.0"}, timeout=30)
    response.raise_for_status()
    return response.json()


def send(message: dict) -> dict:
    """``message`` sent to the asking server; the task it answers with."""
    if not ASKING_URL:
        pytest.fail("no asking server: run tests/interop/run.sh")
    message = {"messageId": f"interop-{uuid.uuid4()}", "role": "ROLE_USER", **message}
    return rpc(ASKING_URL, "SendMessage", {"message": message})["result"]["task"]


def ask(text: str, **continues: str) -> dict:
    arguments = {"text": text, **continues}
    return send({"parts": [{"data": {"tool": "ask_python", "arguments": arguments}}]})


def result_of(task: dict) -> dict:
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    return task["artifacts"][0]["parts"][0]["data"]


def test_the_sdk_agent_answers_through_the_tool() -> None:
    answer = result_of(ask("hello from agent-a2a"))
    assert answer["agent"] == "python"
    assert answer["state"] == "completed"
    assert answer["text"] == "done: hello from agent-a2a"
    assert answer["artifacts"] == [{"name": "echo", "text": "echo: hello from agent-a2a"}]
    assert answer["taskId"] and answer["contextId"]


def reply_in(task: dict, text: str) -> dict:
    """``text`` sent in ``task`` (ours, input-required); the task after it."""
    return send({"taskId": task["id"], "contextId": task["contextId"], "parts": [{"text": text}]})


def test_a_question_of_the_sdk_agent_comes_back_and_is_answered_in_its_task() -> None:
    # The SDK agent's question makes our task input-required with it.
    task = ask("ask me something")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    assert task["status"]["message"]["parts"][0]["text"] == "which invoice?", task
    answer = task["artifacts"][0]["parts"][0]["data"]
    assert (answer["state"], answer["text"]) == ("input-required", "which invoice?")
    # The reply in our task continues the SDK agent's task.
    replied = reply_in(task, "INV-42")
    assert replied["status"]["state"] == "TASK_STATE_COMPLETED", replied
    done = replied["artifacts"][-1]["parts"][0]["data"]
    assert (done["state"], done["text"]) == ("completed", "done: INV-42"), done
    assert done["taskId"] == answer["taskId"]
    # A caller may also continue a remote task by a call that names it.
    task = ask("ask me something")
    answer = task["artifacts"][0]["parts"][0]["data"]
    done = result_of(ask("INV-43", taskId=answer["taskId"], contextId=answer["contextId"]))
    assert (done["state"], done["text"]) == ("completed", "done: INV-43"), done


def test_a_task_the_sdk_agent_fails_fails_the_call_with_its_reason() -> None:
    task = ask("fail please")
    assert task["status"]["state"] == "TASK_STATE_FAILED", task
    text = task["status"]["message"]["parts"][0]["text"]
    assert text.startswith("ask_python failed: remote agent python: its task "), text
    assert text.endswith("failed: no such invoice"), text


def test_canceling_our_task_cancels_the_sdk_agents_task_it_waits_on() -> None:
    if not SDK_AGENT_URL:
        pytest.fail("no SDK agent URL: run tests/interop/run.sh")
    task = ask("ask me something")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    theirs = task["artifacts"][0]["parts"][0]["data"]["taskId"]
    canceled = rpc(ASKING_URL, "CancelTask", {"id": task["id"]})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
    deadline = time.monotonic() + 10
    while True:
        there = rpc(SDK_AGENT_URL, "GetTask", {"id": theirs})
        state = there.get("result", {}).get("status", {}).get("state")
        if state == "TASK_STATE_CANCELED":
            break
        assert time.monotonic() < deadline, f"not canceled at the SDK agent: {there}"
        time.sleep(0.05)


def wait_until(what: str, check, timeout: float = 20.0):  # noqa: ANN001, ANN201
    """``check()`` polled until it gives something true; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


def start_asking_server(binary: str, data_dir: Path, port: int) -> subprocess.Popen:
    """An agent-a2a server asking the SDK agent, on its own SQLite ``data_dir``."""
    config = data_dir / "asking.toml"
    config.write_text(
        "[auth]\nenabled = false\n[push]\nallow_loopback = true\n"
        "[[agent.remote_agents]]\nname = \"python\"\n"
        f'card_url = "{SDK_AGENT_URL}/.well-known/agent-card.json"\n'
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DATABASE_URL")}
    process = subprocess.Popen(
        [binary, "--config", str(config), "--data-dir", str(data_dir / "store"),
         "--bind", f"127.0.0.1:{port}", "--grpc-bind", ""],
        env=env, stdout=subprocess.DEVNULL, stderr=open(data_dir / "server.log", "ab"),
    )

    def ready() -> bool:
        assert process.poll() is None, (data_dir / "server.log").read_text()[-4000:]
        try:
            return httpx.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json").is_success
        except httpx.HTTPError:
            return False

    wait_until("ready", ready)
    return process


def test_a_delegation_survives_sigkill_of_the_calling_server() -> None:
    """The calling server is SIGKILLed while the SDK agent works on the task it was
    handed; restarted on the same store, it follows that task (recorded before the call
    waited on it) to its end — the SDK agent, which does not dedupe message ids, was
    given the message once — and our task completes with its answer."""
    binary = os.environ.get("A2A_SERVER_BINARY", "")
    if not (binary and SDK_AGENT_URL):
        pytest.fail("A2A_SERVER_BINARY and A2A_SDK_AGENT_URL: run tests/interop/run.sh")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    marker = str(uuid.uuid4())
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        server = start_asking_server(binary, work, port)
        try:
            call = {"tool": "ask_python", "arguments": {"text": f"slow {marker}"}}
            message = {"messageId": f"interop-{uuid.uuid4()}", "role": "ROLE_USER",
                       "parts": [{"data": call}]}
            answer = rpc(url, "SendMessage", {"message": message,
                                              "configuration": {"returnImmediately": True}})
            ours = answer["result"]["task"]["id"]

            def theirs() -> list[dict]:
                seen = httpx.get(f"{SDK_AGENT_URL}/interop/seen").json()
                return [m for m in seen if m["text"] == f"slow {marker}"]

            # Followed with GetTask: its id is in our store.
            wait_until("followed", lambda: theirs() and theirs()[0]["gets"] > 0)
            server.kill()
            server.wait()
            server = start_asking_server(binary, work, port)
            httpx.post(f"{SDK_AGENT_URL}/interop/release/{marker}").raise_for_status()

            def ended() -> dict | None:
                task = rpc(url, "GetTask", {"id": ours})["result"]
                return task if task["status"]["state"] != "TASK_STATE_WORKING" else None

            done = wait_until("ended", ended)
            assert result_of(done)["text"] == f"done: slow {marker}", done
            assert len(theirs()) == 1, theirs()
        finally:
            server.kill()
            server.wait()
