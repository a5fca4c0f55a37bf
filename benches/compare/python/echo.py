"""Echo agent on the official A2A Python SDK (a2a-sdk 1.x), for benches/compare/run.sh.

Every SendMessage creates a task and completes it at once, with an agent message that
echoes the user's text in its status. Tasks live in the SDK's in-memory task store.
JSON-RPC is served at POST / (protocol 1.0), the agent card at
/.well-known/agent-card.json.

    python echo.py --host 127.0.0.1 --port 9101
"""

import argparse

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill


class EchoExecutor(AgentExecutor):
    """Completes every task with the user's text echoed back."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        reply = updater.new_agent_message([new_text_part(context.get_user_input())])
        await updater.complete(reply)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError("an echo finishes before it could be canceled")


def build_app(url: str) -> Starlette:
    card = AgentCard(
        name="echo (a2a-sdk)",
        description="Echoes the user's text; benchmark fixture.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echo", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
    return Starlette(routes=routes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9101)
    args = parser.parse_args()
    app = build_app(f"http://{args.host}:{args.port}/")
    # uvicorn's production settings: no access log, warnings only.
    uvicorn.run(app, host=args.host, port=args.port, access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
