//! The load scenarios: what each operation does. `send`, `stream`, `multi-turn` and
//! `tool` are operations run by the [`driver`](crate::driver); `subscribe` holds
//! subscriptions open and drives events to them, so it runs itself.

mod multi_turn;
mod push;
mod send;
mod stream;
mod subscribe;
mod tool;

use std::sync::Arc;

use tokio::sync::watch;

pub use tool::ToolCall;

use crate::client::Client;
use crate::driver::{self, Measured, Operation, Plan};
use crate::progress::Live;

/// What the load is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// SendMessage of a text message, a fresh messageId each time.
    Send,
    /// SendStreamingMessage, read to the end: time to first and last event.
    Stream,
    /// Conversations of --turns messages each (contextId, and taskId while input is
    /// required).
    MultiTurn,
    /// Direct tool calls (--tool, default memory_add and memory_search).
    Tool,
    /// Many SSE subscribers (SubscribeToTask) on --tasks open tasks, fed by follow-up
    /// messages at --rate.
    Subscribe,
    /// SendMessage with a push-notification config whose receiver this generator runs:
    /// the events the server delivers there.
    Push,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Send => "send",
            Scenario::Stream => "stream",
            Scenario::MultiTurn => "multi-turn",
            Scenario::Tool => "tool",
            Scenario::Subscribe => "subscribe",
            Scenario::Push => "push",
        }
    }

    /// What its throughput counts.
    pub fn unit(self) -> &'static str {
        match self {
            Scenario::Send | Scenario::Tool => "requests",
            Scenario::Stream => "streams",
            Scenario::MultiTurn => "messages",
            Scenario::Subscribe | Scenario::Push => "events",
        }
    }

    /// The name of its main latency histogram.
    pub fn latency(self) -> &'static str {
        match self {
            Scenario::Send => send::SendOp::LATENCY,
            Scenario::Stream => stream::StreamOp::LATENCY,
            Scenario::MultiTurn => multi_turn::MultiTurnOp::LATENCY,
            Scenario::Tool => tool::ToolOp::LATENCY,
            Scenario::Subscribe => subscribe::DELIVERY,
            Scenario::Push => push::DELIVERY,
        }
    }
}

/// The scenario-specific settings.
pub struct Settings {
    pub text: Arc<str>,
    pub turns: u32,
    /// push: live receivers, and receivers that never answer.
    pub push_receivers: usize,
    pub push_dead: usize,
    pub tools: Arc<[ToolCall]>,
    pub tasks: usize,
    /// Names the data a run writes (the tool scenario's users), so runs do not mix.
    pub run_id: String,
    /// The process whose memory is measured (`--server-pid`, or this one in-process):
    /// `subscribe` reads its resident set before and after attaching.
    pub memory_pid: Option<u32>,
}

/// Runs `scenario` against `client` as `plan` says.
pub async fn run(
    scenario: Scenario,
    settings: &Settings,
    client: Arc<Client>,
    plan: &Plan,
    live: Arc<Live>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Measured> {
    let workers = 0..plan.connections;
    let text = &settings.text;
    Ok(match scenario {
        Scenario::Send => {
            let ops = workers.map(|_| send::SendOp::new(client.clone(), text.clone()));
            driver::run(plan, ops.collect(), live, stop).await
        }
        Scenario::Stream => {
            let ops = workers.map(|_| stream::StreamOp::new(client.clone(), text.clone()));
            driver::run(plan, ops.collect(), live, stop).await
        }
        Scenario::MultiTurn => {
            let ops = workers.map(|_| {
                multi_turn::MultiTurnOp::new(client.clone(), text.clone(), settings.turns)
            });
            driver::run(plan, ops.collect(), live, stop).await
        }
        Scenario::Tool => {
            let ops = workers.map(|worker| {
                tool::ToolOp::new(
                    client.clone(),
                    settings.tools.clone(),
                    &settings.run_id,
                    worker,
                )
            });
            driver::run(plan, ops.collect(), live, stop).await
        }
        Scenario::Subscribe => {
            let subscribe = subscribe::Subscribe {
                client,
                text: text.clone(),
                tasks: settings.tasks,
                memory_pid: settings.memory_pid,
            };
            subscribe.run(plan, live, stop).await?
        }
        Scenario::Push => {
            let push = push::Push {
                client,
                text: text.clone(),
                receivers: settings.push_receivers,
                dead: settings.push_dead,
            };
            push.run(plan, live, stop).await?
        }
    })
}
