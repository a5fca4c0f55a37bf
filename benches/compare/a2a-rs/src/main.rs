//! Echo agent on a2a-server-lf 0.5 (the a2aproject/a2a-rs SDK) with its in-memory task
//! store, for benches/compare/run.sh.
//!
//! Every SendMessage creates a task and completes it at once, with an agent message that
//! echoes the user's text in its status. JSON-RPC is served at `POST /` (protocol 1.0),
//! the agent card at `/.well-known/agent-card.json`.
//!
//! ```text
//! compare-a2a-rs-echo 127.0.0.1:9190
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use a2a::{
    A2AError, AgentCapabilities, AgentCard, AgentInterface, Message, Part, Role, StreamResponse,
    TRANSPORT_PROTOCOL_JSONRPC, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use a2a_server::{AgentExecutor, DefaultRequestHandler, ExecutorContext, InMemoryTaskStore};
use a2a_server::{StaticAgentCard, agent_card::agent_card_router, jsonrpc::jsonrpc_router};
use futures::stream::{self, BoxStream};

/// Completes every task with the user's text echoed back.
struct EchoAgent;

/// One status update for the task: `state`, with `message` in the status.
fn status_update(
    ctx: &ExecutorContext,
    state: TaskState,
    message: Option<Message>,
) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
    let (task_id, context_id) = ctx.task_info();
    let event = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id,
        context_id,
        status: TaskStatus {
            state,
            message,
            // The handler stamps the time when it stores the update.
            timestamp: None,
        },
        metadata: None,
    });
    Box::pin(stream::once(async move { Ok(event) }))
}

impl AgentExecutor for EchoAgent {
    fn execute(&self, ctx: ExecutorContext) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        // All the text parts of the user's message, in order.
        let text: String = ctx
            .message
            .iter()
            .flat_map(|message| message.parts.iter())
            .filter_map(Part::as_text)
            .collect();
        // Message::new gives the reply a fresh id.
        let mut reply = Message::new(Role::Agent, vec![Part::text(text)]);
        reply.context_id = Some(ctx.context_id.clone());
        reply.task_id = Some(ctx.task_id.clone());
        // A status update, not a whole task: the handler applies it to the task it stored
        // (with the user's message in its history) and returns that.
        status_update(&ctx, TaskState::Completed, Some(reply))
    }

    fn cancel(&self, ctx: ExecutorContext) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        status_update(&ctx, TaskState::Canceled, None)
    }
}

fn agent_card(url: String) -> AgentCard {
    AgentCard {
        name: "echo (a2a-rs)".into(),
        description: "Echoes the user's text; benchmark fixture.".into(),
        version: "1.0.0".into(),
        // Protocol version 1.0 (`a2a::VERSION`).
        supported_interfaces: vec![AgentInterface::new(url, TRANSPORT_PROTOCOL_JSONRPC)],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            ..AgentCapabilities::default()
        },
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/plain".into()],
        skills: Vec::new(),
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: None,
        security_requirements: None,
        signatures: None,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let bind = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:9190".into());
    let addr: SocketAddr = match bind.parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("usage: compare-a2a-rs-echo HOST:PORT ({err})");
            return ExitCode::from(2);
        }
    };
    let card = agent_card(format!("http://{addr}/"));
    let handler = Arc::new(
        DefaultRequestHandler::new(EchoAgent, InMemoryTaskStore::new())
            .with_capabilities(card.capabilities.clone()),
    );
    // The SDK's JSON-RPC router routes its one POST endpoint at its own root; merged at the
    // top level rather than nested under /jsonrpc as the SDK's example does, it is `POST /`.
    let app = axum::Router::new()
        .merge(jsonrpc_router(handler))
        .merge(agent_card_router(Arc::new(StaticAgentCard::new(card))));
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("compare-a2a-rs-echo: binding {addr}: {err}");
            return ExitCode::FAILURE;
        }
    };
    match axum::serve(listener, app).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("compare-a2a-rs-echo: {err}");
            ExitCode::FAILURE
        }
    }
}
