"""Interop: the official A2A Python SDK client (a2a-sdk 1.x) against a running server.

The server under test is at ``$A2A_URL`` (default http://127.0.0.1:8080) and runs the
default executor, which answers free text with ``TASK_STATE_INPUT_REQUIRED`` and a
message listing its tools. Every test runs once per binding the SDK can speak that the
agent card declares (JSON-RPC, HTTP+JSON and gRPC): the client is built from the card,
as a real client would, with only that binding allowed.

``tests/interop/run.sh`` builds and starts a server and runs this file.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import grpc
import httpx
import pytest

from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol

A2A_URL = os.environ.get("A2A_URL", "http://127.0.0.1:8080").rstrip("/")

BINDINGS = [TransportProtocol.JSONRPC, TransportProtocol.HTTP_JSON, TransportProtocol.GRPC]

# A turn of the default executor ends in one of these (free text: input-required).
TURN_END_STATES = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_INPUT_REQUIRED}


def user_message(text: str, *, task_id: str = "", context_id: str = "") -> Message:
    return Message(
        message_id=f"interop-{uuid.uuid4()}",
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


def state_name(state: int) -> str:
    return TaskState.Name(state)


@pytest.fixture(scope="session")
def card_json() -> dict:
    response = httpx.get(A2A_URL + AGENT_CARD_WELL_KNOWN_PATH, timeout=10)
    response.raise_for_status()
    return response.json()


@pytest.fixture(params=BINDINGS, ids=["jsonrpc", "http_json", "grpc"])
def binding(request: pytest.FixtureRequest, card_json: dict) -> str:
    declared = {i.get("protocolBinding") for i in card_json.get("supportedInterfaces", [])}
    if request.param not in declared:
        pytest.fail(f"the agent card declares no {request.param} interface: {sorted(declared)}")
    return request.param


async def make_client(binding: str, *, streaming: bool):
    config = ClientConfig(
        streaming=streaming,
        supported_protocol_bindings=[binding],
        use_client_preference=True,
        httpx_client=httpx.AsyncClient(timeout=30),
        # gRPC: the card's interface url is host:port, plaintext on loopback.
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    return await ClientFactory(config).create_from_url(A2A_URL)


@pytest.fixture
async def client(binding: str):
    client = await make_client(binding, streaming=False)
    yield client
    await client.close()


@pytest.fixture
async def streaming_client(binding: str):
    client = await make_client(binding, streaming=True)
    yield client
    await client.close()


async def send_blocking(client, message: Message, **config):
    """Sends a non-streaming SendMessage and returns the one response it yields."""
    request = SendMessageRequest(
        message=message, configuration=SendMessageConfiguration(**config)
    )
    responses = [r async for r in client.send_message(request)]
    assert len(responses) == 1, f"a non-streaming send yields one response, got {responses}"
    return responses[0]


async def new_task(client, text: str = "hello"):
    response = await send_blocking(client, user_message(text))
    assert response.HasField("task"), f"expected a task, got {response}"
    return response.task


async def test_card_declares_every_binding(card_json: dict) -> None:
    interfaces = card_json["supportedInterfaces"]
    versions = {(i["protocolBinding"], i["protocolVersion"]) for i in interfaces}
    assert ("JSONRPC", "1.0") in versions
    assert ("HTTP+JSON", "1.0") in versions
    assert ("GRPC", "1.0") in versions
    assert card_json["name"]
    assert "capabilities" in card_json


async def test_send_blocking_returns_a_task(client) -> None:
    task = await new_task(client, "hello")
    assert task.id
    assert task.context_id
    assert task.status.state in TURN_END_STATES, state_name(task.status.state)
    if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
        # The default executor says what it can do: a message listing its tools.
        assert task.status.message.parts, "input-required without a status message"
        assert any(p.text for p in task.status.message.parts)
    # The client's message is in the history.
    assert any(m.role == Role.ROLE_USER for m in task.history)


async def test_stream_starts_with_the_task(streaming_client) -> None:
    request = SendMessageRequest(message=user_message("hello, streaming"))
    events = [e async for e in streaming_client.send_message(request)]
    assert events, "the stream yielded no event"
    assert events[0].HasField("task"), f"first event is not a task: {events[0]}"
    task_id = events[0].task.id
    for event in events[1:]:
        kind = event.WhichOneof("payload")
        assert kind in ("status_update", "artifact_update", "task"), kind
        inner = getattr(event, kind)
        assert (inner.id if kind == "task" else inner.task_id) == task_id
    last = events[-1]
    final_state = (
        last.task.status.state if last.HasField("task") else last.status_update.status.state
    )
    assert final_state in TURN_END_STATES, state_name(final_state)


async def test_get_task_returns_the_same_task(client) -> None:
    sent = await new_task(client, "remember this")
    got = await client.get_task(GetTaskRequest(id=sent.id))
    assert got.id == sent.id
    assert got.context_id == sent.context_id
    assert got.status.state == sent.status.state
    assert [m.message_id for m in got.history] == [m.message_id for m in sent.history]


async def test_get_unknown_task_is_task_not_found(client) -> None:
    with pytest.raises(TaskNotFoundError):
        await client.get_task(GetTaskRequest(id=f"no-such-task-{uuid.uuid4()}"))


async def test_follow_up_continues_the_task(client) -> None:
    first = await new_task(client, "hello")
    if first.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        pytest.skip("the agent completed the first turn; nothing to continue")
    response = await send_blocking(
        client, user_message("more input", task_id=first.id, context_id=first.context_id)
    )
    assert response.HasField("task")
    assert response.task.id == first.id
    assert response.task.context_id == first.context_id
    texts = [p.text for m in response.task.history for p in m.parts if m.role == Role.ROLE_USER]
    assert "hello" in texts and "more input" in texts


async def test_cancel_then_cancel_again(client) -> None:
    task = await new_task(client, "a task to cancel")
    if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        # Not interrupted: ask again without waiting, and cancel whatever is running.
        response = await send_blocking(
            client, user_message("a task to cancel"), return_immediately=True
        )
        task = response.task
    if task.status.state in (TaskState.TASK_STATE_COMPLETED,):
        pytest.skip("the agent completes every task at once; nothing to cancel")

    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.id == task.id
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED, state_name(
        canceled.status.state
    )

    got = await client.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == TaskState.TASK_STATE_CANCELED

    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=task.id))


async def test_cancel_unknown_task_is_task_not_found(client) -> None:
    with pytest.raises(TaskNotFoundError):
        await client.cancel_task(CancelTaskRequest(id=f"no-such-task-{uuid.uuid4()}"))


async def test_list_tasks_returns_the_tasks(client) -> None:
    first = await new_task(client, "first in a context")
    # A second task in the same context: the first one is interrupted or done, so a new
    # message without a task id starts another task in that thread.
    response = await send_blocking(
        client, user_message("second in the context", context_id=first.context_id)
    )
    assert response.HasField("task")
    second = response.task
    assert second.context_id == first.context_id

    page = await client.list_tasks(ListTasksRequest(context_id=first.context_id))
    ids = [t.id for t in page.tasks]
    assert first.id in ids and second.id in ids, ids
    assert all(t.context_id == first.context_id for t in page.tasks)
    # Newest first.
    assert ids.index(second.id) < ids.index(first.id) or second.id == first.id

    everything = await client.list_tasks(ListTasksRequest(page_size=100))
    assert first.id in [t.id for t in everything.tasks] or everything.next_page_token


async def test_subscribe_follows_the_task(client, streaming_client) -> None:
    task = await new_task(client, "hello")
    if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        pytest.skip("the agent completed the first turn; nothing to follow")
    events = streaming_client.subscribe(SubscribeToTaskRequest(id=task.id))
    first = await asyncio.wait_for(anext(events), 10)
    assert first.HasField("task"), f"a subscription starts with the task: {first}"
    assert first.task.id == task.id
    assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    # The task continues; the subscriber sees the turn as it happens.
    follow_up = asyncio.create_task(
        send_blocking(
            client, user_message("more input", task_id=task.id, context_id=task.context_id)
        )
    )
    update = await asyncio.wait_for(anext(events), 10)
    kind = update.WhichOneof("payload")
    assert kind in ("status_update", "artifact_update"), kind
    assert getattr(update, kind).task_id == task.id
    response = await asyncio.wait_for(follow_up, 10)
    assert response.task.id == task.id
    await events.aclose()


async def test_subscribe_to_unknown_task_is_task_not_found(streaming_client) -> None:
    with pytest.raises(TaskNotFoundError):
        async for _ in streaming_client.subscribe(
            SubscribeToTaskRequest(id=f"no-such-task-{uuid.uuid4()}")
        ):
            pass


async def test_v03_rest_errors_reach_the_compat_client_typed() -> None:
    """The SDK's 0.3 REST client maps an error body to its class by the top-level
    ``type``; a body it cannot read would surface as a generic HTTP error."""
    from a2a.compat.v0_3.rest_transport import CompatRestTransport

    async with httpx.AsyncClient(timeout=10) as http:
        transport = CompatRestTransport(http, None, A2A_URL)
        with pytest.raises(TaskNotFoundError):
            await transport.get_task(GetTaskRequest(id=f"no-such-task-{uuid.uuid4()}"))
        with pytest.raises(TaskNotFoundError):
            await transport.cancel_task(CancelTaskRequest(id=f"no-such-task-{uuid.uuid4()}"))
