//! Echo agent on turul-a2a 0.2, for benches/compare/run.sh: with its in-memory store, or
//! with its Postgres store when a database URL is given (its tables created at start).
//!
//! Every SendMessage creates a task and completes it at once, with an agent message that
//! echoes the user's text in its status. JSON-RPC is served at `POST /jsonrpc` (protocol
//! 1.0), the agent card at `/.well-known/agent-card.json`.
//!
//! ```text
//! compare-turul-echo 127.0.0.1:9103
//! compare-turul-echo 127.0.0.1:9108 postgres://postgres@127.0.0.1:5432/turul
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
        AgentCardBuilder::new("echo (turul-a2a)", "1.0.0")
            .description("Echoes the user's text; benchmark fixture.")
            .url(self.url.clone(), "JSONRPC", "1.0")
            .default_input_modes(vec!["text/plain"])
            .default_output_modes(vec!["text/plain"])
            .streaming(true)
            .build()
            .expect("a static card is valid")
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let bind = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:9103".into());
    let addr: SocketAddr = match bind.parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("usage: compare-turul-echo HOST:PORT ({err})");
            return ExitCode::from(2);
        }
    };
    let agent = EchoAgent {
        url: format!("http://{addr}/jsonrpc"),
    };
    let builder = A2aServer::builder().executor(agent).bind(addr);
    let server = match std::env::args().nth(2) {
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
    match server {
        Ok(server) => match server.run().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("compare-turul-echo: {err}");
                ExitCode::FAILURE
            }
        },
        Err(err) => {
            eprintln!("compare-turul-echo: {err}");
            ExitCode::FAILURE
        }
    }
}
