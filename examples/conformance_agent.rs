//! The conformance agent: an [`AgentExecutor`] that reacts to the official A2A 1.0
//! conformance kit (`a2aproject/a2a-tck`, branch `1.0-dev`) by the **prefix of the
//! `messageId`** of each message, as `shared/spec/conformance-scenarios.md` lists.
//!
//! Run it with the same flags as the server:
//!
//! ```text
//! cargo run --example conformance_agent -- --bind 127.0.0.1:9999 --grpc-bind 127.0.0.1:9998 --data-dir /tmp/tck-data
//! ```
//!
//! It exists to be tested against; the production binary never behaves like this.
//!
//! What the kit was read to expect (its `scenarios/*.feature`, the SUT code its
//! generator emits for the Python and Java SDKs, and the tests under
//! `tests/compatibility/` that send these prefixes):
//!
//! - Prefixes are matched longest first (`tck-artifact-file-url` before
//!   `tck-artifact-file`). The kit's own tests mint ids as `tck-<name>-<session>`, so
//!   most of its messages carry a prefix the table does not name (`tck-infer-ctx-…`,
//!   `tck-send-003-…`); those complete the task with `Hello from TCK`, as does any
//!   message that is not from the kit at all.
//! - `tck-input-required` puts the task into `TASK_STATE_INPUT_REQUIRED` **every time**,
//!   on follow-ups too: the kit's history test sends two follow-ups with this prefix to
//!   the same task and only then completes it with a `tck-complete-task` message. Any
//!   other follow-up (any other `messageId`) completes the task, so multi-turn clients
//!   can finish what they started.
//! - `tck-reject-task`: both generated SUTs *raise* an error from the executor
//!   (Python `raise A2AError('rejected')`, Java `throw new A2AError(-1, "rejected")`),
//!   so the request fails and no task is left behind; no test of the kit sends this
//!   prefix today. Here the executor returns `UnsupportedOperation("rejected")` before
//!   producing any output, which fails the request with that A2A error
//!   (`UNSUPPORTED_OPERATION`, -32004) and never creates the task.
//! - `tck-stream-artifact-chunked`: the kit's SUTs send both chunks with `append=true`
//!   and the second with `lastChunk=true`, and no test reads them back. Here both chunks
//!   carry the same artifact id; the first has `append=false` (it creates the artifact,
//!   which clients that drop an append to an unknown artifact rely on), the second
//!   `append=true, lastChunk=true`.
//! - `tck-stream-002` is named "message-only stream" but its scenario only completes
//!   the task, without a message; the same here.
//! - `test-resubscribe-message-id`: working, then a wait of twice the kit's streaming
//!   timeout (`TCK_STREAMING_TIMEOUT`, default 2 s, so 4 s), then completed, so a client
//!   can resubscribe meanwhile.
//! - Raw-bytes parts hold the bytes `tck` (the generated SUTs' `b'tck'` / `"dGNr"`).
//!
//! Every scenario behaves the same whether it arrives through `SendMessage` or
//! `SendStreamingMessage`; the server turns the sink's calls into stream events.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_a2a::a2a::card::SkillCard;
use agent_a2a::cli::{Agent, run};
use agent_a2a::domain::{Artifact, Part, PartContent};
use agent_a2a::error::{Error, Result};
use agent_a2a::runtime::{AgentExecutor, Turn, TurnSink};
use async_trait::async_trait;
use serde_json::json;

/// What the agent does for one messageId prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// Complete with the agent message `Hello from TCK` (also the default).
    CompleteTask,
    ArtifactText,
    ArtifactFile,
    ArtifactFileUrl,
    ArtifactData,
    MessageResponse,
    InputRequired,
    RejectTask,
    /// working → one text artifact → completed.
    StreamText(&'static str),
    /// completed, nothing else.
    StreamCompleteOnly,
    StreamArtifactFile,
    StreamArtifactChunked,
    /// working → a pause the client can resubscribe in → completed.
    Resubscribe,
}

/// The prefixes the kit's scenarios name. Order does not matter: [`scenario_for`]
/// picks the longest matching prefix.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("tck-complete-task", Scenario::CompleteTask),
    ("tck-artifact-text", Scenario::ArtifactText),
    ("tck-artifact-file", Scenario::ArtifactFile),
    ("tck-artifact-file-url", Scenario::ArtifactFileUrl),
    ("tck-artifact-data", Scenario::ArtifactData),
    ("tck-message-response", Scenario::MessageResponse),
    ("tck-input-required", Scenario::InputRequired),
    ("tck-reject-task", Scenario::RejectTask),
    (
        "tck-stream-001",
        Scenario::StreamText("Stream hello from TCK"),
    ),
    ("tck-stream-002", Scenario::StreamCompleteOnly),
    (
        "tck-stream-003",
        Scenario::StreamText("Stream task lifecycle"),
    ),
    (
        "tck-stream-ordering-001",
        Scenario::StreamText("Ordered output"),
    ),
    (
        "tck-stream-artifact-text",
        Scenario::StreamText("Streamed text content"),
    ),
    ("tck-stream-artifact-file", Scenario::StreamArtifactFile),
    (
        "tck-stream-artifact-chunked",
        Scenario::StreamArtifactChunked,
    ),
    ("test-resubscribe-message-id", Scenario::Resubscribe),
];

/// How long the resubscribe scenario stays `working`: twice the kit's streaming timeout,
/// `TCK_STREAMING_TIMEOUT` seconds (default 2, so 4 s), as its SUT requirements ask.
fn resubscribe_pause() -> Duration {
    let timeout = std::env::var("TCK_STREAMING_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|secs| secs.is_finite() && *secs > 0.0)
        .unwrap_or(2.0);
    Duration::from_secs_f64(2.0 * timeout)
}

/// The scenario of the longest prefix of `message_id` in [`SCENARIOS`], or
/// [`Scenario::CompleteTask`] when none matches.
fn scenario_for(message_id: &str) -> Scenario {
    SCENARIOS
        .iter()
        .filter(|(prefix, _)| message_id.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or(Scenario::CompleteTask, |(_, scenario)| *scenario)
}

/// The executor the conformance kit talks to.
struct ConformanceAgent;

#[async_trait]
impl AgentExecutor for ConformanceAgent {
    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<()> {
        let scenario = match scenario_for(turn.message.message_id.as_str()) {
            // A follow-up to an interrupted task finishes it, whatever its id, unless it
            // asks for more input again (the kit's history test does exactly that).
            Scenario::InputRequired => Scenario::InputRequired,
            _ if turn.continuation => Scenario::CompleteTask,
            other => other,
        };
        match scenario {
            Scenario::CompleteTask => sink.complete(Some(sink.text("Hello from TCK"))).await,
            Scenario::ArtifactText => {
                artifact(&sink, Part::text("Generated text content")).await?;
                sink.complete(None).await
            }
            Scenario::ArtifactFile => {
                artifact(&sink, raw_file_part()).await?;
                sink.complete(None).await
            }
            Scenario::ArtifactFileUrl => {
                let part = file_part(PartContent::Url("https://example.com/output.txt".into()));
                artifact(&sink, part).await?;
                sink.complete(None).await
            }
            Scenario::ArtifactData => {
                artifact(&sink, Part::data(json!({"key": "value", "count": 42}))).await?;
                sink.complete(None).await
            }
            Scenario::MessageResponse => sink.reply(sink.text("Direct message response")).await,
            Scenario::InputRequired => {
                let ask =
                    sink.text("More input is required: send a follow-up message to this task.");
                sink.input_required(ask).await
            }
            Scenario::RejectTask => Err(Error::UnsupportedOperation("rejected".into())),
            Scenario::StreamText(text) => {
                sink.working().await?;
                artifact(&sink, Part::text(text)).await?;
                sink.complete(None).await
            }
            Scenario::StreamCompleteOnly => sink.complete(None).await,
            Scenario::StreamArtifactFile => {
                sink.working().await?;
                artifact(&sink, raw_file_part()).await?;
                sink.complete(None).await
            }
            Scenario::StreamArtifactChunked => {
                sink.working().await?;
                let first = Artifact::new(vec![Part::text("chunk-1 ")]);
                let mut last = Artifact::new(vec![Part::text("chunk-2")]);
                last.artifact_id = first.artifact_id.clone();
                sink.artifact(first, false, false).await?;
                sink.artifact(last, true, true).await?;
                sink.complete(None).await
            }
            Scenario::Resubscribe => {
                sink.working().await?;
                tokio::time::sleep(resubscribe_pause()).await;
                sink.complete(None).await
            }
        }
    }
}

/// Adds a whole (single-chunk) artifact holding one part.
async fn artifact(sink: &TurnSink, part: Part) -> Result<()> {
    sink.artifact(Artifact::new(vec![part]), false, true).await
}

/// The `output.txt` file part the kit's file scenarios name.
fn file_part(content: PartContent) -> Part {
    Part {
        filename: Some("output.txt".into()),
        media_type: Some("text/plain".into()),
        ..Part::of(content)
    }
}

fn raw_file_part() -> Part {
    file_part(PartContent::Raw(b"tck".to_vec()))
}

fn main() -> ExitCode {
    run(Agent {
        cards: vec![SkillCard {
            id: "conformance".into(),
            name: "A2A conformance scenarios".into(),
            description: "Reacts to the A2A conformance kit by the prefix of each messageId \
                          (tck-complete-task, tck-input-required, tck-stream-001, …)."
                .into(),
            tags: vec!["conformance".into(), "tck".into()],
            examples: vec!["tck-complete-task".into(), "tck-input-required".into()],
            tools: Vec::new(),
        }],
        ..Agent::new(Arc::new(ConformanceAgent))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        assert_eq!(
            scenario_for("tck-artifact-file-url-1a2b"),
            Scenario::ArtifactFileUrl
        );
        assert_eq!(
            scenario_for("tck-artifact-file-1a2b"),
            Scenario::ArtifactFile
        );
        assert_eq!(
            scenario_for("tck-stream-artifact-text-x"),
            Scenario::StreamText("Streamed text content")
        );
        assert_eq!(
            scenario_for("tck-stream-artifact-chunked-x"),
            Scenario::StreamArtifactChunked
        );
        assert_eq!(
            scenario_for("tck-stream-ordering-001-x"),
            Scenario::StreamText("Ordered output")
        );
    }

    #[test]
    fn the_kits_own_ids_complete_by_default() {
        assert_eq!(
            scenario_for("tck-infer-ctx-1a2b3c4d"),
            Scenario::CompleteTask
        );
        assert_eq!(
            scenario_for("tck-send-003-1a2b3c4d"),
            Scenario::CompleteTask
        );
        assert_eq!(scenario_for("hello"), Scenario::CompleteTask);
        assert_eq!(
            scenario_for("test-resubscribe-message-id"),
            Scenario::Resubscribe
        );
        assert_eq!(
            scenario_for("tck-input-required-1a2b3c4d"),
            Scenario::InputRequired
        );
        assert_eq!(scenario_for("tck-reject-task-1"), Scenario::RejectTask);
    }
}
