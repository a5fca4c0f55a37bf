//! The A2A wire shapes the load generator sends and reads, in both dialects it speaks:
//! 1.0 (ProtoJSON, PascalCase methods) and 0.3 (`kind` discriminators, slash methods).
//!
//! Requests are built here and answers are reduced to the little a load test needs: did
//! it work, which task and context did it touch, and in which state did it leave the
//! task. Failures become an [`ErrorKind`], the key errors are counted by.

use std::fmt;

use serde_json::{Value, json};

/// The protocol version spoken, sent as the `A2A-Version` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Dialect {
    /// A2A 1.0: `SendMessage`, `ROLE_USER`, parts without `kind`.
    #[value(name = "1.0")]
    #[serde(rename = "1.0")]
    V1,
    /// A2A 0.3: `message/send`, `user`, parts and results with `kind`.
    #[value(name = "0.3")]
    #[serde(rename = "0.3")]
    V03,
}

impl Dialect {
    pub fn version(self) -> &'static str {
        match self {
            Dialect::V1 => "1.0",
            Dialect::V03 => "0.3",
        }
    }

    pub fn send_method(self) -> &'static str {
        match self {
            Dialect::V1 => "SendMessage",
            Dialect::V03 => "message/send",
        }
    }

    pub fn stream_method(self) -> &'static str {
        match self {
            Dialect::V1 => "SendStreamingMessage",
            Dialect::V03 => "message/stream",
        }
    }

    pub fn subscribe_method(self) -> &'static str {
        match self {
            Dialect::V1 => "SubscribeToTask",
            Dialect::V03 => "tasks/resubscribe",
        }
    }

    pub fn cancel_method(self) -> &'static str {
        match self {
            Dialect::V1 => "CancelTask",
            Dialect::V03 => "tasks/cancel",
        }
    }

    pub fn text_part(self, text: &str) -> Value {
        match self {
            Dialect::V1 => json!({"text": text}),
            Dialect::V03 => json!({"kind": "text", "text": text}),
        }
    }

    pub fn data_part(self, data: Value) -> Value {
        match self {
            Dialect::V1 => json!({"data": data}),
            Dialect::V03 => json!({"kind": "data", "data": data}),
        }
    }

    /// A user message; `context_id` and `task_id` continue a conversation or a task.
    pub fn user_message(
        self,
        message_id: String,
        parts: Vec<Value>,
        context_id: Option<&str>,
        task_id: Option<&str>,
    ) -> Value {
        let mut message = match self {
            Dialect::V1 => json!({"role": "ROLE_USER", "messageId": message_id, "parts": parts}),
            Dialect::V03 => {
                json!({"kind": "message", "role": "user", "messageId": message_id, "parts": parts})
            }
        };
        if let Some(context) = context_id {
            message["contextId"] = json!(context);
        }
        if let Some(task) = task_id {
            message["taskId"] = json!(task);
        }
        message
    }
}

/// A JSON-RPC 2.0 request body.
pub fn rpc_request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// Why an operation failed; the report counts failures by this key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The TCP connection could not be made.
    Connect,
    /// The operation did not finish within `--timeout`.
    Timeout,
    /// Any other transport failure (reset connection, truncated body, …).
    Transport,
    /// A non-200 HTTP status (JSON-RPC answers even its errors with 200).
    HttpStatus(u16),
    /// A body that is not the JSON (or SSE) expected.
    InvalidBody,
    /// A JSON-RPC error object: its code and, when known, its reason.
    JsonRpc { code: i64, reason: String },
    /// A gRPC status: its code and, when given, its `ErrorInfo` reason.
    Grpc { code: String, reason: String },
    /// A well-formed answer of an unexpected shape.
    UnexpectedResult,
    /// The task ended failed, rejected or canceled.
    TaskEnded(TaskState),
    /// A stream closed before its task reached a final (terminal or interrupted) state.
    StreamEndedEarly,
    /// A subscription closed while the test was still holding it.
    SubscriptionClosed,
    /// An open-loop operation that was due but not started when the time was up.
    BehindSchedule,
}

impl ErrorKind {
    /// Classifies a reqwest failure.
    pub fn from_reqwest(error: &reqwest::Error) -> Self {
        if error.is_connect() {
            ErrorKind::Connect
        } else if error.is_timeout() {
            ErrorKind::Timeout
        } else {
            ErrorKind::Transport
        }
    }

    /// Classifies a JSON-RPC `error` object. The reason is the `google.rpc.ErrorInfo`
    /// reason (1.0), else the standard name of the code: never the free-text message,
    /// which may carry ids and would make every error a kind of its own.
    pub fn from_rpc_error(error: &Value) -> Self {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        let info_reason = error
            .get("data")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|detail| detail.get("reason").and_then(Value::as_str));
        let reason = info_reason.map_or_else(|| code_name(code).to_owned(), str::to_owned);
        ErrorKind::JsonRpc { code, reason }
    }
}

/// The standard name of a JSON-RPC / A2A error code.
fn code_name(code: i64) -> &'static str {
    match code {
        -32700 => "parse error",
        -32600 => "invalid request",
        -32601 => "method not found",
        -32602 => "invalid params",
        -32603 => "internal error",
        -32001 => "task not found",
        -32002 => "task not cancelable",
        -32003 => "push notifications not supported",
        -32004 => "unsupported operation",
        -32005 => "content type not supported",
        -32006 => "invalid agent response",
        -32007 => "extended card not configured",
        -32008 => "extension support required",
        -32009 => "version not supported",
        _ => "unknown code",
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Connect => f.write_str("connect"),
            ErrorKind::Timeout => f.write_str("timeout"),
            ErrorKind::Transport => f.write_str("transport"),
            ErrorKind::HttpStatus(status) => write!(f, "http {status}"),
            ErrorKind::InvalidBody => f.write_str("invalid body"),
            ErrorKind::JsonRpc { code, reason } => write!(f, "jsonrpc {code} {reason}"),
            ErrorKind::Grpc { code, reason } => write!(f, "grpc {code} {reason}"),
            ErrorKind::UnexpectedResult => f.write_str("unexpected result"),
            ErrorKind::TaskEnded(state) => write!(f, "task {}", state.label()),
            ErrorKind::StreamEndedEarly => f.write_str("stream ended early"),
            ErrorKind::SubscriptionClosed => f.write_str("subscription closed"),
            ErrorKind::BehindSchedule => f.write_str("not started: behind schedule"),
        }
    }
}

/// The server's own task states (with their predicates: terminal, interrupted, …).
pub use agent_a2a::domain::TaskState;

/// What a load test reads from a task state.
pub trait LoadOutcome {
    /// The states counted as failures: the agent did not do the job.
    fn is_failure(&self) -> bool;
    /// The 0.3 spelling (`input-required`), as the report prints states.
    fn label(&self) -> String;
}

impl LoadOutcome for TaskState {
    fn is_failure(&self) -> bool {
        matches!(
            self,
            TaskState::Canceled | TaskState::Failed | TaskState::Rejected
        )
    }

    fn label(&self) -> String {
        self.as_str().replace('_', "-")
    }
}

/// A task state in either dialect's spelling (`TASK_STATE_INPUT_REQUIRED`,
/// `input-required`, `TASK_STATE_CANCELLED`, …); `None` for a state this server
/// does not know (`unknown`), which the load test treats as an unexpected result.
pub fn parse_state(wire: &str) -> Option<TaskState> {
    let name = wire.strip_prefix("TASK_STATE_").unwrap_or(wire);
    let name = name.to_ascii_lowercase().replace('-', "_");
    match name.as_str() {
        "cancelled" => Some(TaskState::Canceled),
        other => TaskState::from_str_opt(other),
    }
}

/// The state at `/status/state` of a task or status update.
fn read_state(status_holder: &Value) -> Option<TaskState> {
    status_holder
        .pointer("/status/state")
        .and_then(Value::as_str)
        .and_then(parse_state)
}

/// The `result` of a JSON-RPC response, or the error it carries.
pub fn rpc_result(response: Value) -> Result<Value, ErrorKind> {
    let Value::Object(mut envelope) = response else {
        return Err(ErrorKind::InvalidBody);
    };
    if let Some(error) = envelope.get("error") {
        return Err(ErrorKind::from_rpc_error(error));
    }
    envelope.remove("result").ok_or(ErrorKind::InvalidBody)
}

/// What a `SendMessage` answered.
#[derive(Debug, Clone)]
pub enum Reply {
    Task {
        id: String,
        context_id: String,
        state: TaskState,
    },
    Message {
        context_id: Option<String>,
    },
}

impl Reply {
    /// Reads a send result: `{"task": …}` / `{"message": …}` (1.0) or a bare object
    /// with `kind` (0.3).
    pub fn parse(dialect: Dialect, result: &Value) -> Result<Self, ErrorKind> {
        let (kind, object) = match dialect {
            Dialect::V1 => {
                if let Some(task) = result.get("task") {
                    ("task", task)
                } else if let Some(message) = result.get("message") {
                    ("message", message)
                } else {
                    return Err(ErrorKind::UnexpectedResult);
                }
            }
            Dialect::V03 => (
                result.get("kind").and_then(Value::as_str).unwrap_or(""),
                result,
            ),
        };
        let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_owned);
        match kind {
            "task" => Ok(Reply::Task {
                id: text("id").ok_or(ErrorKind::UnexpectedResult)?,
                context_id: text("contextId").ok_or(ErrorKind::UnexpectedResult)?,
                state: read_state(object).ok_or(ErrorKind::UnexpectedResult)?,
            }),
            "message" => Ok(Reply::Message {
                context_id: text("contextId"),
            }),
            _ => Err(ErrorKind::UnexpectedResult),
        }
    }

    /// The context the reply belongs to, to continue the conversation in.
    pub fn context_id(&self) -> Option<&str> {
        match self {
            Reply::Task { context_id, .. } => Some(context_id),
            Reply::Message { context_id } => context_id.as_deref(),
        }
    }

    /// A failed, rejected or canceled task is an error; anything else an outcome label.
    pub fn outcome(&self) -> Result<String, ErrorKind> {
        match self {
            Reply::Task { state, .. } if state.is_failure() => Err(ErrorKind::TaskEnded(*state)),
            Reply::Task { state, .. } => Ok(format!("task {}", state.label())),
            Reply::Message { .. } => Ok("message".to_owned()),
        }
    }
}

/// One event of a task stream, reduced to what decides where the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent {
    /// A task snapshot, with its state.
    Task(TaskState),
    /// A status update; `final_flag` is 0.3's `final`.
    Status {
        state: TaskState,
        final_flag: bool,
    },
    Artifact,
    /// A message: the whole answer of a message-only stream.
    Message,
}

impl StreamEvent {
    pub fn parse(dialect: Dialect, result: &Value) -> Result<Self, ErrorKind> {
        let state = |object: &Value| read_state(object).ok_or(ErrorKind::UnexpectedResult);
        match dialect {
            Dialect::V1 => {
                if let Some(task) = result.get("task") {
                    Ok(StreamEvent::Task(state(task)?))
                } else if let Some(update) = result.get("statusUpdate") {
                    Ok(StreamEvent::Status {
                        state: state(update)?,
                        final_flag: false,
                    })
                } else if result.get("artifactUpdate").is_some() {
                    Ok(StreamEvent::Artifact)
                } else if result.get("message").is_some() {
                    Ok(StreamEvent::Message)
                } else {
                    Err(ErrorKind::UnexpectedResult)
                }
            }
            Dialect::V03 => match result.get("kind").and_then(Value::as_str) {
                Some("task") => Ok(StreamEvent::Task(state(result)?)),
                Some("status-update") => Ok(StreamEvent::Status {
                    state: state(result)?,
                    final_flag: result.get("final").and_then(Value::as_bool) == Some(true),
                }),
                Some("artifact-update") => Ok(StreamEvent::Artifact),
                Some("message") => Ok(StreamEvent::Message),
                _ => Err(ErrorKind::UnexpectedResult),
            },
        }
    }

    /// The state the event leaves the task in, when it says.
    pub fn state(self) -> Option<TaskState> {
        match self {
            StreamEvent::Task(state) | StreamEvent::Status { state, .. } => Some(state),
            StreamEvent::Artifact | StreamEvent::Message => None,
        }
    }

    /// Whether the stream of a message ends with this event.
    pub fn ends_turn(self) -> bool {
        match self {
            StreamEvent::Message => true,
            StreamEvent::Status { state, final_flag } => final_flag || state.ends_turn(),
            StreamEvent::Task(state) => state.ends_turn(),
            StreamEvent::Artifact => false,
        }
    }
}
