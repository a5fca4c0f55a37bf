//! `stream`: one `SendStreamingMessage` (`message/stream`) per operation, read to its
//! end. Measures the time to the first event, to the first artifact (for an agent with a
//! model: its first streamed text) and to the event that ends the turn (a terminal or
//! interrupted state, or a message); the stream must then close.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::Client;
use crate::driver::Operation;
use crate::protocol::{ErrorKind, LoadOutcome, StreamEvent};
use crate::stats::Stats;

/// How long a stream may stay open after the event that ended its turn before the
/// client gives up on it (and counts it as left open).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

pub struct StreamOp {
    client: Arc<Client>,
    text: Arc<str>,
}

impl StreamOp {
    pub fn new(client: Arc<Client>, text: Arc<str>) -> Self {
        Self { client, text }
    }
}

impl Operation for StreamOp {
    const LATENCY: &'static str = "last event (turn done)";

    async fn run(&mut self, intended: Instant, stats: &mut Stats) -> Result<String, ErrorKind> {
        let dialect = self.client.dialect();
        let message = dialect.user_message(
            self.client.message_id(),
            vec![dialect.text_part(&self.text)],
            None,
            None,
        );
        let mut events = self
            .client
            .open_stream(dialect.stream_method(), json!({ "message": message }))
            .await?;
        let mut received = 0u64;
        let mut artifacts = 0u64;
        let last = loop {
            let Some(event) = events.next().await else {
                return Err(ErrorKind::StreamEndedEarly);
            };
            let event = event?;
            received += 1;
            if received == 1 {
                stats.latency("first event", intended.elapsed());
            }
            if matches!(event, StreamEvent::Artifact) {
                artifacts += 1;
                if artifacts == 1 {
                    stats.latency("first artifact", intended.elapsed());
                }
            }
            if event.ends_turn() {
                break event;
            }
        };
        // Reading on to the end lets the connection be reused; a server that keeps the
        // stream open is noted, not waited for.
        match tokio::time::timeout(CLOSE_GRACE, drain(&mut events)).await {
            Ok(Ok(extra)) => received += extra,
            Ok(Err(kind)) => return Err(kind),
            Err(_) => stats.count("streams left open after the last event", 1),
        }
        stats.count("stream events", received);
        stats.count("artifact events", artifacts);
        match last {
            StreamEvent::Message => Ok("message".to_owned()),
            event => match event.state() {
                Some(state) if state.is_failure() => Err(ErrorKind::TaskEnded(state)),
                Some(state) => Ok(format!("task {}", state.label())),
                None => Err(ErrorKind::UnexpectedResult),
            },
        }
    }
}

/// Reads the rest of a stream; returns how many more events came.
async fn drain(events: &mut crate::client::Events) -> Result<u64, ErrorKind> {
    let mut extra = 0;
    while let Some(event) = events.next().await {
        event?;
        extra += 1;
    }
    Ok(extra)
}
