//! Echo agent on turul-a2a 0.2, for benches/compare/run.sh: with its in-memory store, or
//! with its Postgres store when a database URL is given (its tables created at start).
//!
//! Every SendMessage creates a task and completes it at once, with an agent message that
//! echoes the user's text in its status. JSON-RPC is served at `POST /jsonrpc` (protocol
//! 1.0), the agent card at `/.well-known/agent-card.json`. With `--grpc HOST:PORT` the same
//! server state is also served over gRPC (`lf.a2a.v1.A2AService`, turul's tonic router)
//! there, and the card lists that `GRPC` interface too: what `benches/load --binding grpc`
//! needs to set the two bindings of one server side by side.
//!
//! ```text
//! compare-turul-echo 127.0.0.1:9103
//! compare-turul-echo 127.0.0.1:9108 postgres://postgres@127.0.0.1:5432/turul
//! compare-turul-echo 127.0.0.1:9103 --grpc 127.0.0.1:9104
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;

use turul_a2a::prelude::*;
use turul_a2a::storage::InMemoryA2aStorage;
use turul_a2a::storage::postgres::{PostgresA2aStorage, PostgresConfig};
use turul_a2a_types::Role;

/// Completes every task with the user's text echoed back.
struct EchoAgent {
    url: String,
    /// The gRPC interface's address, when it is served.
    grpc: Option<SocketAddr>,
}

#[async_trait::async_trait]
impl AgentExecutor for EchoAgent {
    async fn execute(
        &self,
        task: &mut Task,
        message: &Message,
        _ctx: &ExecutionContext,
    ) -> Result<(), A2aError> {
        // The task id is fresh per task, so the reply's id is unique too.
        let reply = Message::new(
            format!("{}-reply", task.id()),
            Role::Agent,
            vec![Part::text(message.joined_text())],
        )
        .with_context_id(task.context_id())
        .with_task_id(task.id());
        task.set_status(TaskStatus::new(TaskState::Completed).with_message(reply));
        Ok(())
    }

    fn agent_card(&self) -> turul_a2a_proto::AgentCard {
        let mut card = AgentCardBuilder::new("echo (turul-a2a)", "1.0.0")
            .description("Echoes the user's text; benchmark fixture.")
            .url(self.url.clone(), "JSONRPC", "1.0");
        if let Some(grpc) = self.grpc {
            card = card.url(grpc.to_string(), "GRPC", "1.0");
        }
        card.default_input_modes(vec!["text/plain"])
            .default_output_modes(vec!["text/plain"])
            .streaming(true)
            .build()
            .expect("a static card is valid")
    }
}

const USAGE: &str = "usage: compare-turul-echo HOST:PORT [DATABASE_URL] [--grpc HOST:PORT]";

#[tokio::main]
async fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let grpc = match args.iter().position(|a| a == "--grpc") {
        Some(i) if i + 1 < args.len() => {
            let value = args.remove(i + 1);
            args.remove(i);
            match value.parse::<SocketAddr>() {
                Ok(addr) => Some(addr),
                Err(err) => {
                    eprintln!("{USAGE} (--grpc: {err})");
                    return ExitCode::from(2);
                }
            }
        }
        Some(_) => {
            eprintln!("{USAGE} (--grpc needs HOST:PORT)");
            return ExitCode::from(2);
        }
        None => None,
    };
    let bind = args.first().cloned().unwrap_or_else(|| "127.0.0.1:9103".into());
    let addr: SocketAddr = match bind.parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("{USAGE} ({err})");
            return ExitCode::from(2);
        }
    };
    let agent = EchoAgent {
        url: format!("http://{addr}/jsonrpc"),
        grpc,
    };
    let builder = A2aServer::builder().executor(agent).bind(addr);
    let server = match args.get(1).cloned() {
        Some(database_url) => {
            let config = PostgresConfig {
                database_url,
                // agent-a2a's `store.pool_size` default.
                max_connections: 16,
                assume_schema_initialized: false,
            };
            match PostgresA2aStorage::new(config).await {
                Ok(storage) => builder.storage(storage).build(),
                Err(err) => {
                    eprintln!("compare-turul-echo: {err}");
                    return ExitCode::FAILURE;
                }
            }
        }
        None => builder.storage(InMemoryA2aStorage::new()).build(),
    };
    let server = match server {
        Ok(server) => server,
        Err(err) => {
            eprintln!("compare-turul-echo: {err}");
            return ExitCode::FAILURE;
        }
    };
    let served = match grpc {
        None => server.run().await.map_err(|err| err.to_string()),
        Some(grpc) => both(server, addr, grpc).await,
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("compare-turul-echo: {err}");
            ExitCode::FAILURE
        }
    }
}

/// JSON-RPC on `http` and gRPC on `grpc`, over one server state (turul's `into_routers`).
async fn both(server: A2aServer, http: SocketAddr, grpc: SocketAddr) -> Result<(), String> {
    let (http_router, grpc_router) = server.into_routers();
    let listener = tokio::net::TcpListener::bind(http)
        .await
        .map_err(|err| format!("cannot listen on {http}: {err}"))?;
    tokio::select! {
        served = axum::serve(listener, http_router) => served.map_err(|err| err.to_string()),
        served = grpc_router.serve(grpc) => served.map_err(|err| err.to_string()),
    }
}
