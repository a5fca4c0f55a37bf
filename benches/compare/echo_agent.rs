//! agent-a2a's side of the comparison in `benches/compare/`: the real server (actors,
//! durable write-through to SQLite or Postgres) with an executor that does what the peers'
//! echo fixtures do — complete every task at once, with an agent message in its status
//! that echoes the user's text.
//!
//! It takes the same flags as the `agent-a2a` binary:
//!
//! ```text
//! cargo run --release --example compare_echo -- --bind 127.0.0.1:9105 --data-dir /tmp/echo
//! ```
//!
//! Built as an example of the main crate so that it shares the release build of the
//! server; `benches/compare/run.sh` starts it.

use std::process::ExitCode;
use std::sync::Arc;

use agent_a2a::a2a::card::SkillCard;
use agent_a2a::cli::{Agent, run};
use agent_a2a::error::Result;
use agent_a2a::runtime::{AgentExecutor, Turn, TurnSink};
use async_trait::async_trait;

/// The same allocator as the `agent-a2a` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Completes every task with the user's text echoed back.
struct EchoAgent;

#[async_trait]
impl AgentExecutor for EchoAgent {
    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<()> {
        let echo = sink.text(turn.message.text());
        sink.complete(Some(echo)).await
    }
}

fn main() -> ExitCode {
    run(Agent {
        cards: vec![SkillCard {
            id: "echo".into(),
            name: "echo".into(),
            description: "Echoes the user's text; benchmark fixture.".into(),
            tags: vec!["echo".into()],
            examples: vec!["hello".into()],
            tools: Vec::new(),
        }],
        ..Agent::new(Arc::new(EchoAgent))
    })
}
