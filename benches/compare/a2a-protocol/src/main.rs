//! Echo agent on a2a-protocol-server 0.15 (tomtom215/a2a-rust) with its Postgres task
//! store, for benches/compare/run.sh (target `a2a-protocol-postgres`).
//!
//! Every SendMessage creates a task and completes it at once, with an agent message that
//! echoes the user's text in its status. JSON-RPC is served at `POST /` (protocol 1.0);
//! the store is `PostgresTaskStore::new` (its defaults: a pool of 10, its schema created
//! at start).
//!
//! ```text
//! compare-a2a-protocol-echo 127.0.0.1:9109 postgres://postgres@127.0.0.1:5432/bench
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use a2a_protocol_server::__types::events::{StreamResponse, TaskStatusUpdateEvent};
use a2a_protocol_server::__types::message::{Message, Part};
use a2a_protocol_server::__types::task::{ContextId, TaskState, TaskStatus};
use a2a_protocol_server::{
    JsonRpcDispatcher, PostgresTaskStore, RequestHandlerBuilder, agent_executor, serve,
};
use a2a_protocol_types::{AgentCard, AgentInterface, AgentSkill};

/// Completes every task with the user's text echoed back.
struct EchoAgent;

agent_executor!(EchoAgent, |ctx, queue| async {
    let text = ctx.message.text().unwrap_or_default().to_owned();
    // The task id is fresh per task, so the reply's id is unique too.
    let mut reply = Message::agent(format!("{}-reply", ctx.task_id), vec![Part::text(text)]);
    reply.task_id = Some(ctx.task_id.clone());
    reply.context_id = Some(ContextId::new(ctx.context_id.clone()));
    let mut status = TaskStatus::new(TaskState::Completed);
    status.message = Some(reply);
    queue
        .write(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: ctx.task_id.clone(),
            context_id: ContextId::new(ctx.context_id.clone()),
            status,
            metadata: None,
        }))
        .await
});

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(bind), Some(database_url)) = (args.next(), args.next()) else {
        eprintln!("usage: compare-a2a-protocol-echo HOST:PORT DATABASE_URL");
        return ExitCode::from(2);
    };
    let addr: SocketAddr = match bind.parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("compare-a2a-protocol-echo: {bind}: {err}");
            return ExitCode::from(2);
        }
    };
    let store = match PostgresTaskStore::new(&database_url).await {
        Ok(store) => store,
        Err(err) => {
            eprintln!("compare-a2a-protocol-echo: {err}");
            return ExitCode::FAILURE;
        }
    };
    let card = AgentCard::new(
        "echo (a2a-protocol-server)",
        "1.0.0",
        AgentInterface::jsonrpc(format!("http://{addr}/")),
    )
    .with_description("Echoes the user's text; benchmark fixture.")
    .with_skill(AgentSkill::new("echo", "Echo", "Echoes text").with_tags(["echo"]));
    let handler = match RequestHandlerBuilder::new(EchoAgent)
        .with_agent_card(card)
        .with_task_store(store)
        .build()
    {
        Ok(handler) => Arc::new(handler),
        Err(err) => {
            eprintln!("compare-a2a-protocol-echo: {err}");
            return ExitCode::FAILURE;
        }
    };
    match serve(addr, JsonRpcDispatcher::new(handler)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("compare-a2a-protocol-echo: {err}");
            ExitCode::FAILURE
        }
    }
}
