//! `tool`: direct tool calls, one message with a data part
//! `{"tool": "<name>", "arguments": {…}}` per operation, which the default agent routes
//! to a skill without any model. A call succeeds when its task completes.
//!
//! `memory_add` and `memory_search` have built-in arguments: unique memories in the
//! user layer of one user per worker (named after the run, so runs do not share data),
//! and searches for words those memories contain. Any other tool takes its arguments
//! from the command line (`--tool 'name={…}'`). Workers take turns over the tools given.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::client::Client;
use crate::driver::Operation;
use crate::protocol::{ErrorKind, Reply, TaskState};
use crate::stats::Stats;

/// Words the built-in memories are made of and searched for.
const WORDS: [&str; 16] = [
    "postgres",
    "deployment",
    "latency",
    "budget",
    "roadmap",
    "incident",
    "backup",
    "cache",
    "invoice",
    "onboarding",
    "migration",
    "firewall",
    "release",
    "dashboard",
    "quota",
    "tea",
];

/// A tool and how its arguments are made.
#[derive(Debug, Clone)]
pub enum ToolCall {
    /// `memory_add` of a new memory each time.
    MemoryAdd,
    /// `memory_search` for one of the words the built-in memories use.
    MemorySearch,
    /// Any tool, with the same arguments each time.
    Fixed { name: String, arguments: Value },
}

impl ToolCall {
    /// Reads `NAME` (a tool with built-in arguments) or `NAME=JSON`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        match spec.split_once('=') {
            None => match spec {
                "memory_add" => Ok(ToolCall::MemoryAdd),
                "memory_search" => Ok(ToolCall::MemorySearch),
                _ => Err(format!(
                    "no built-in arguments for tool {spec:?} (only memory_add and \
                     memory_search have them); give them as --tool '{spec}={{...}}'"
                )),
            },
            Some((name, arguments)) => {
                if name.is_empty() {
                    return Err(format!("{spec:?}: the tool name is empty"));
                }
                match serde_json::from_str::<Value>(arguments) {
                    Ok(arguments @ Value::Object(_)) => Ok(ToolCall::Fixed {
                        name: name.to_owned(),
                        arguments,
                    }),
                    Ok(_) => Err(format!("{name}: the arguments must be a JSON object")),
                    Err(e) => Err(format!("{name}: the arguments are not JSON: {e}")),
                }
            }
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ToolCall::MemoryAdd => "memory_add",
            ToolCall::MemorySearch => "memory_search",
            ToolCall::Fixed { name, .. } => name,
        }
    }

    /// The arguments of call number `n` of a worker whose user is `user`.
    fn arguments(&self, user: &str, n: u64) -> Value {
        let word = |k: u64| WORDS[usize::try_from(k % WORDS.len() as u64).unwrap_or(0)];
        match self {
            ToolCall::MemoryAdd => json!({
                "content": format!(
                    "load test note {n}: the {} of the {} depends on the {}",
                    word(n), word(n / 3 + 5), word(n / 7 + 11)
                ),
                "layer": "user",
                "userId": user,
                "tags": ["load-test", word(n)],
            }),
            ToolCall::MemorySearch => json!({
                "query": word(n),
                "userId": user,
                "limit": 10,
            }),
            ToolCall::Fixed { arguments, .. } => arguments.clone(),
        }
    }
}

pub struct ToolOp {
    client: Arc<Client>,
    calls: Arc<[ToolCall]>,
    /// The user whose memories this worker adds and searches.
    user: String,
    /// Calls made so far (also picks the next tool).
    n: u64,
}

impl ToolOp {
    /// `worker` spreads the workers over the tools and names their users, with `run_id`.
    pub fn new(client: Arc<Client>, calls: Arc<[ToolCall]>, run_id: &str, worker: usize) -> Self {
        Self {
            client,
            calls,
            user: format!("load-{run_id}-{worker}"),
            n: worker as u64,
        }
    }
}

impl Operation for ToolOp {
    const LATENCY: &'static str = "tool call";

    async fn run(&mut self, intended: Instant, stats: &mut Stats) -> Result<String, ErrorKind> {
        let n = self.n;
        self.n += 1;
        let call = &self.calls[usize::try_from(n % self.calls.len() as u64).unwrap_or(0)];
        let dialect = self.client.dialect();
        let data = json!({"tool": call.name(), "arguments": call.arguments(&self.user, n)});
        let message = dialect.user_message(
            self.client.message_id(),
            vec![dialect.data_part(data)],
            None,
            None,
        );
        let result = match self.client.send_message(message).await {
            Ok(Reply::Task {
                state: TaskState::Completed,
                ..
            }) => {
                stats.latency(call.name(), intended.elapsed());
                Ok(format!("{} completed", call.name()))
            }
            Ok(Reply::Task { state, .. }) => Err(ErrorKind::TaskEnded(state)),
            Ok(Reply::Message { .. }) => Err(ErrorKind::UnexpectedResult),
            Err(kind) => Err(kind),
        };
        if result.is_err() {
            // Errors are counted by kind; this says which tool they came from.
            stats.count(&format!("failed calls: {}", call.name()), 1);
        }
        result
    }
}
