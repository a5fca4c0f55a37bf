"""An agent on the official A2A Python SDK's server (a2a-sdk 1.x, Starlette, uvicorn),
for the interop suite: a remote agent that an agent-a2a server asks through its tool
``ask_python`` (tests/interop/test_remote_agent.py).

A message whose text starts with "ask me" gets its task moved to input-required with a
question; "fail" fails the task with a reason; "slow <marker>" keeps its task working
until ``POST /interop/release/<marker>``, then completes it; any other text completes
the task with an artifact and a status message that echo the text. A task waiting for
input can be canceled. JSON-RPC is served at POST / (protocol 1.0), the agent card at
/.well-known/agent-card.json, and ``GET /interop/seen`` lists every message the agent
was given (its id, text and task) with the ``GetTask`` calls its task got.

    python sdk_agent.py --host 127.0.0.1 --port 9101
"""

import argparse
import asyncio
from collections import Counter

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill


# Every message the agent was given, the GetTask calls per task, and the slow tasks'
# releases by marker.
SEEN: list[dict] = []
GETS: Counter = Counter()
RELEASES: dict[str, asyncio.Event] = {}


class InteropExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = context.get_user_input()
        SEEN.append({"messageId": context.message.message_id, "text": text, "taskId": task.id})
        if text.startswith("slow "):
            await updater.start_work()
            await RELEASES.setdefault(text.removeprefix("slow "), asyncio.Event()).wait()
            await updater.complete(updater.new_agent_message([new_text_part(f"done: {text}")]))
        elif text.startswith("ask me"):
            question = updater.new_agent_message([new_text_part("which invoice?")])
            await updater.requires_input(question)
        elif text.startswith("fail"):
            reason = updater.new_agent_message([new_text_part("no such invoice")])
            await updater.failed(reason)
        else:
            await updater.add_artifact([new_text_part(f"echo: {text}")], name="echo")
            await updater.complete(updater.new_agent_message([new_text_part(f"done: {text}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # Only a task that waits for input is still open: it is canceled.
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def build_app(url: str) -> Starlette:
    card = AgentCard(
        name="interop (a2a-sdk)",
        description="Echoes, asks back or fails, on request; interop fixture.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echo", tags=["echo"])],
    )
    handler = CountingHandler(
        agent_executor=InteropExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
    routes += [
        Route("/interop/seen", seen, methods=["GET"]),
        Route("/interop/release/{marker}", release, methods=["POST"]),
    ]
    return Starlette(routes=routes)


class CountingHandler(DefaultRequestHandler):
    """The SDK's handler, counting the ``GetTask`` calls of each task."""

    async def on_get_task(self, params, context):  # noqa: ANN001, ANN201
        GETS[params.id] += 1
        return await super().on_get_task(params, context)


async def seen(_: Request) -> JSONResponse:
    return JSONResponse([{**m, "gets": GETS[m["taskId"]]} for m in SEEN])


async def release(request: Request) -> JSONResponse:
    RELEASES.setdefault(request.path_params["marker"], asyncio.Event()).set()
    return JSONResponse({"released": request.path_params["marker"]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9101)
    args = parser.parse_args()
    app = build_app(f"http://{args.host}:{args.port}/")
    uvicorn.run(app, host=args.host, port=args.port, access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
