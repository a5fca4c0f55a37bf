//! `multi-turn`: conversations of `--turns` messages each. The first message of a
//! conversation has no context; the following ones carry the `contextId` the server
//! answered with, and the `taskId` too when the last turn left its task waiting for input
//! (input-required), which continues that task as a real client would. Each message is
//! one operation; a conversation whose message fails is abandoned and a new one started.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::driver::Operation;
use crate::protocol::{ErrorKind, Reply};
use crate::stats::Stats;

pub struct MultiTurnOp {
    client: Arc<Client>,
    text: Arc<str>,
    turns: u32,
    conversation: Conversation,
}

/// Where the current conversation is.
#[derive(Default)]
struct Conversation {
    /// Messages sent so far.
    turn: u32,
    context_id: Option<String>,
    /// The task the last turn left interrupted, to continue.
    open_task: Option<String>,
    /// The latencies of its turns, added up.
    waited: Duration,
}

impl MultiTurnOp {
    pub fn new(client: Arc<Client>, text: Arc<str>, turns: u32) -> Self {
        Self {
            client,
            text,
            turns,
            conversation: Conversation::default(),
        }
    }
}

impl Operation for MultiTurnOp {
    const LATENCY: &'static str = "turn";

    async fn run(&mut self, intended: Instant, stats: &mut Stats) -> Result<String, ErrorKind> {
        let dialect = self.client.dialect();
        let turn = self.conversation.turn + 1;
        let message = dialect.user_message(
            self.client.message_id(),
            vec![dialect.text_part(&format!("{} (turn {turn})", self.text))],
            self.conversation.context_id.as_deref(),
            self.conversation.open_task.as_deref(),
        );
        let reply = self.client.send_message(message).await?;
        let outcome = reply.outcome()?;
        let context_id = reply
            .context_id()
            .ok_or(ErrorKind::UnexpectedResult)?
            .to_owned();
        if self
            .conversation
            .context_id
            .as_ref()
            .is_some_and(|c| *c != context_id)
        {
            // The server moved the conversation elsewhere: not a continuation.
            return Err(ErrorKind::UnexpectedResult);
        }
        let conversation = &mut self.conversation;
        conversation.turn = turn;
        conversation.context_id = Some(context_id);
        conversation.open_task = match reply {
            Reply::Task { id, state, .. } if state.is_interrupted() => Some(id),
            _ => None,
        };
        conversation.waited += intended.elapsed();
        if turn >= self.turns {
            stats.latency("conversation (sum of its turns)", conversation.waited);
            stats.count("conversations completed", 1);
            self.conversation = Conversation::default();
        }
        Ok(format!("turn {turn}: {outcome}"))
    }

    fn failed(&mut self, stats: &mut Stats) {
        if self.conversation.turn > 0 {
            stats.count("conversations abandoned after an error", 1);
        }
        self.conversation = Conversation::default();
    }
}
