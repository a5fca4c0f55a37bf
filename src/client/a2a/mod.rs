//! The A2A client of a remote agent: its card, the interface chosen from it, a message
//! sent and its task followed.
//!
//! The card is read at start-up (see `tools::remote_agents`), or else at the first call,
//! and again when its `Cache-Control: max-age` has passed (five minutes without one); a
//! card that cannot be read fails the call, and the next call tries again. One read is in
//! flight at a time: the calls that need the card meanwhile wait for it, each within its
//! own deadline. Under `verify_with` the card is used only through its signed form
//! (`a2a::signing`): what is verified is what is used. Of the card's `supportedInterfaces`, in the card's order (first
//! preferred), the first A2A 1.0 interface with a binding spoken here is used: `JSONRPC`,
//! `HTTP+JSON` or `GRPC` (a `host:port` is TLS unless `grpc_tls` is off); without one, a
//! 0.3 interface over JSON-RPC or HTTP+JSON (listed, or a 0.3 card's own `url` or
//! `additionalInterfaces`), spoken in 0.3 (`message/send`, `tasks/get`; HTTP+JSON under
//! `/v1/`). Every URL — the card's and each interface's — passes the push
//! receivers' URL policy as written, and the client's resolver connects only to addresses
//! the policy allows. Requests carry the calling turn's `traceparent` when it is traced.
//! Answers are read up to `max_answer_bytes`. A send asks the remote to answer at once
//! (`returnImmediately`; 0.3 `blocking: false`); a task it answers with before its end
//! (submitted, working) is followed with `GetTask` until it ends or asks for input,
//! within the call's `timeout_ms`.
//!
//! Here are the client ([`RemoteAgent`]), its requests over JSON-RPC and HTTP+JSON and the
//! message it sends; [`card`] reads, verifies and keeps the card; [`endpoint`] holds the
//! interface spoken to, the error every part of the client answers with and the reading
//! of an HTTP answer; [`grpc`] is the gRPC binding; [`answer`] reads what the remote
//! answers into the tool's result, 0.3 HTTP+JSON's once [`rest03`] has rewritten it in the
//! 0.3 JSON-RPC shape.

mod answer;
mod card;
mod endpoint;
mod grpc;
mod rest03;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

pub use answer::{Answer, Sent};
pub use endpoint::{Binding, CallError, Endpoint};

use crate::config::RemoteAgentSettings;
use crate::outbound::UrlPolicy;
use answer::{Reply, reply, task_outcome};
use card::{Card, CardSlot, CardSource, Verify, read_roots};
use endpoint::{describe, error_text, read_limited, unreachable_or_refused};

/// The first wait between two `GetTask`s of a task still running; it doubles up to
/// [`MAX_POLL`]. Short: a send answers at once, with a task most remotes finish soon.
const FIRST_POLL: Duration = Duration::from_millis(10);
const MAX_POLL: Duration = Duration::from_secs(2);

/// The client of one remote agent.
pub struct RemoteAgent {
    name: String,
    headers: HeaderMap,
    http: reqwest::Client,
    timeout: Duration,
    max_answer_bytes: usize,
    cards: Arc<CardSource>,
    card: Arc<std::sync::Mutex<CardSlot>>,
}

impl RemoteAgent {
    /// The client of `settings`, its card URL checked by `policy` (a URL it refuses stops
    /// the start, naming the agent).
    pub fn new(settings: &RemoteAgentSettings, policy: Arc<UrlPolicy>) -> Result<Self, String> {
        let card_url = policy
            .check_url(&settings.card_url)
            .map_err(|e| format!("agent.remote_agents {}: card_url: {e}", settings.name))?;
        let mut headers = HeaderMap::new();
        let mut secret = |name: HeaderName, value: String| -> Result<(), String> {
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                format!(
                    "agent.remote_agents {}: a credential is not a header value",
                    settings.name
                )
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
            Ok(())
        };
        if !settings.bearer.is_empty() {
            secret(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {}", settings.bearer),
            )?;
        }
        if !settings.api_key.is_empty() {
            secret(
                HeaderName::from_static("x-api-key"),
                settings.api_key.clone(),
            )?;
        }
        let verify = match settings.verify_with.trim() {
            "" => None,
            url if url.starts_with("http://") || url.starts_with("https://") => {
                Some(Verify::Url(policy.check_url(url).map_err(|e| {
                    format!("agent.remote_agents {}: verify_with: {e}", settings.name)
                })?))
            }
            path => {
                let keys = std::fs::read(path)
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
                    .map_err(|e| {
                        format!(
                            "agent.remote_agents {}: verify_with {path:?}: not a readable JWK \
                             Set ({e})",
                            settings.name
                        )
                    })?;
                Some(Verify::Keys(keys))
            }
        };
        let timeout = Duration::from_millis(settings.timeout_ms);
        let extra_roots = match settings.ca_file.trim() {
            "" => Vec::new(),
            path => read_roots(path).map_err(|e| {
                format!(
                    "agent.remote_agents {}: ca_file {path:?}: {e}",
                    settings.name
                )
            })?,
        };
        let certificates = extra_roots
            .iter()
            .map(|der| reqwest::Certificate::from_der(der))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("agent.remote_agents {}: ca_file: {e}", settings.name))?;
        // The client's TLS needs the process's crypto provider (a second install is
        // refused, harmlessly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .tls_certs_merge(certificates)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .dns_resolver(Arc::new(crate::outbound::CheckedResolver {
                policy: policy.clone(),
            }))
            .user_agent(concat!("agent-a2a/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("agent.remote_agents {}: client: {e}", settings.name))?;
        Ok(Self {
            name: settings.name.clone(),
            headers,
            http: http.clone(),
            timeout,
            max_answer_bytes: settings.max_answer_bytes,
            cards: Arc::new(CardSource {
                name: settings.name.clone(),
                card_url,
                verify,
                http,
                policy,
                timeout,
                max_answer_bytes: settings.max_answer_bytes,
                grpc_tls: settings.grpc_tls,
                extra_roots: Arc::new(extra_roots),
            }),
            card: Arc::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// When a call begun now must have its answer: `timeout_ms` from now.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// Sends `text` (and `data` as a data part) as a message with id `message_id` — a
    /// new task's, or one continuing `continues`: the remote task (its task and context
    /// ids: the answer to a question it asked), or with a context id alone its
    /// conversation, in a new task. The remote's answer, or its task still
    /// running, to [`follow`](Self::follow).
    pub async fn send(
        &self,
        message_id: &str,
        text: &str,
        data: Option<&Value>,
        continues: Option<(Option<&str>, &str)>,
        deadline: Instant,
    ) -> Result<Sent, CallError> {
        let endpoint = self.endpoint(deadline).await?;
        let v03 = endpoint.binding.v03();
        let [send, ..] = endpoint.binding.methods();
        let message = message_of(endpoint.binding, message_id, text, data, continues);
        // The remote answers with its task at once (0.3: not blocking), so that a task
        // still running is recorded before it is waited on: a blocking send would hold
        // the call with no task id to record, and a restart would have to send again.
        let configuration = if v03 {
            json!({"blocking": false})
        } else {
            json!({"returnImmediately": true})
        };
        let mut params = json!({ "message": message, "configuration": configuration });
        if !endpoint.tenant.is_empty() {
            params["tenant"] = json!(endpoint.tenant);
        }
        let answer = self
            .call(&endpoint, send, &["message:send"], params, deadline)
            .await?;
        let task = match reply(v03, answer)? {
            Reply::Answer(answer) => return Ok(Sent::Answered(answer)),
            Reply::Task(task) => task,
        };
        let text_of = |key: &str| {
            task.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (task_id, context_id) = (text_of("id"), text_of("contextId"));
        match task_outcome(v03, task)? {
            Some(answer) => Ok(Sent::Answered(answer)),
            None if task_id.is_empty() => Err(CallError::Refused(
                "answered with a running task that has no id".into(),
            )),
            None => Ok(Sent::Running {
                task_id,
                context_id,
            }),
        }
    }

    /// Follows the remote task `task_id` with `GetTask` until it ends or asks for input
    /// (waiting `FIRST_POLL` first when it was just seen running).
    pub async fn follow(
        &self,
        task_id: &str,
        seen_running: bool,
        deadline: Instant,
    ) -> Result<Answer, CallError> {
        let endpoint = self.endpoint(deadline).await?;
        let v03 = endpoint.binding.v03();
        let [_, get, _] = endpoint.binding.methods();
        let mut wait = if seen_running {
            FIRST_POLL
        } else {
            Duration::ZERO
        };
        let not_ended = || {
            CallError::Unreachable(format!(
                "task {task_id} did not end within {} ms",
                self.timeout.as_millis()
            ))
        };
        loop {
            if Instant::now() + wait >= deadline {
                return Err(not_ended());
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).clamp(FIRST_POLL, MAX_POLL);
            let mut params = json!({"id": task_id});
            if !endpoint.tenant.is_empty() {
                params["tenant"] = json!(endpoint.tenant);
            }
            let task = match self
                .call(&endpoint, get, &["tasks", task_id], params, deadline)
                .await
            {
                Ok(task) => task,
                // The time ran out during the poll: the task did not end in time.
                Err(_) if Instant::now() >= deadline => return Err(not_ended()),
                Err(e) => return Err(e),
            };
            if let Some(answer) = task_outcome(v03, task)? {
                return Ok(answer);
            }
        }
    }

    /// Cancels the remote task `task_id` (`CancelTask`; 0.3 `tasks/cancel`). A task that
    /// has ended already is refused by the remote, as a `Refused` error.
    pub async fn cancel(&self, task_id: &str) -> Result<(), CallError> {
        let deadline = self.deadline();
        let endpoint = self.endpoint(deadline).await?;
        let [.., method] = endpoint.binding.methods();
        let mut params = json!({"id": task_id});
        if !endpoint.tenant.is_empty() {
            params["tenant"] = json!(endpoint.tenant);
        }
        let path = ["tasks".to_owned(), format!("{task_id}:cancel")];
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        self.call(&endpoint, method, &path, params, deadline)
            .await
            .map(|_| ())
    }

    /// The interface to speak to, from the card (read again once its age has passed),
    /// by `deadline`.
    pub async fn endpoint(&self, deadline: Instant) -> Result<Endpoint, CallError> {
        Ok(self.card(deadline).await?.endpoint)
    }

    /// What its card says the agent does: its description, then its skills' names and
    /// descriptions (read as [`endpoint`](Self::endpoint) reads it).
    pub async fn about(&self, deadline: Instant) -> Result<String, CallError> {
        Ok(self.card(deadline).await?.about)
    }

    /// The card, fresh, by `deadline`. One read is in flight at a time: every call that
    /// needs the card meanwhile waits for that read, each until its own deadline, and
    /// shares its outcome (a failed read fails them all, and the next call reads again).
    /// The read goes on when the calls waiting for it give up, within its own
    /// `timeout_ms`, and keeps what it read for the calls after them.
    async fn card(&self, deadline: Instant) -> Result<Card, CallError> {
        let reading = {
            let mut slot = self.card.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(fresh) = slot
                .card
                .as_ref()
                .filter(|c| c.read_at.elapsed() < c.max_age)
            {
                return Ok(fresh.clone());
            }
            slot.reading
                .get_or_insert_with(|| {
                    use futures_util::FutureExt;
                    let (cards, slot) = (self.cards.clone(), self.card.clone());
                    let read = tokio::spawn(async move {
                        let read = cards.read().await;
                        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                        slot.reading = None;
                        if let Ok(card) = &read {
                            slot.card = Some(card.clone());
                        }
                        read
                    });
                    async move {
                        read.await.unwrap_or_else(|e| {
                            Err(CallError::Unreachable(format!(
                                "its card: the read stopped ({e})"
                            )))
                        })
                    }
                    .boxed()
                    .shared()
                })
                .clone()
        };
        tokio::time::timeout_at(deadline.into(), reading)
            .await
            .unwrap_or_else(|_| {
                Err(CallError::Unreachable(format!(
                    "its card: no answer within {} ms",
                    self.timeout.as_millis()
                )))
            })
    }

    /// One request: JSON-RPC `method`, or HTTP+JSON at the `path` segments under the
    /// interface's URL (a POST of `params` for a send, a GET otherwise). Returns the
    /// result.
    async fn call(
        &self,
        endpoint: &Endpoint,
        method: &str,
        path: &[&str],
        params: Value,
        deadline: Instant,
    ) -> Result<Value, CallError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(CallError::Unreachable(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            )));
        }
        // The call continues the turn's trace at the remote (`traceparent`).
        let mut headers = self.headers.clone();
        crate::telemetry::trace::inject(&mut headers);
        let request = match endpoint.binding {
            Binding::JsonRpc | Binding::JsonRpc03 => self
                .http
                .post(endpoint.url.clone())
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})),
            Binding::HttpJson | Binding::Rest03 => {
                // Each segment percent-encoded: a task id the remote chose cannot name
                // another path of its host. 0.3's routes are under `/v1/`.
                let mut url = endpoint.url.clone();
                let prefix = (endpoint.binding == Binding::Rest03).then_some("v1");
                url.path_segments_mut()
                    .map_err(|()| CallError::Refused("its interface URL has no path".into()))?
                    .pop_if_empty()
                    .extend(prefix)
                    .extend(path);
                match method {
                    "SendMessage" | "CancelTask" | "message/send" | "tasks/cancel" => {
                        self.http.post(url).json(&params)
                    }
                    _ => self.http.get(url),
                }
            }
            Binding::Grpc => {
                let channel = endpoint.grpc.clone().ok_or_else(|| {
                    CallError::Refused("its gRPC interface has no channel".into())
                })?;
                let max = self.max_answer_bytes;
                return grpc::call(channel, method, params, headers, left, max).await;
            }
        };
        let response = request
            .headers(headers)
            .header(
                "A2A-Version",
                if endpoint.binding.v03() { "0.3" } else { "1.0" },
            )
            .timeout(left)
            .send()
            .await
            .map_err(|e| CallError::Unreachable(format!("{method}: {}", describe(&e))))?;
        let status = response.status();
        let body = read_limited(response, self.max_answer_bytes).await?;
        let value: Option<Value> = serde_json::from_slice(&body).ok();
        match endpoint.binding {
            Binding::JsonRpc | Binding::JsonRpc03 => {
                if !status.is_success() && value.is_none() {
                    return Err(unreachable_or_refused(status, method));
                }
                let mut envelope = value.ok_or_else(|| {
                    CallError::Refused(format!("answered {method} with something not JSON"))
                })?;
                if let Some(error) = envelope.get("error") {
                    return Err(CallError::Refused(format!(
                        "refused {method}: {}",
                        error_text(error)
                    )));
                }
                match envelope.get_mut("result") {
                    Some(result) => Ok(result.take()),
                    None => Err(CallError::Refused(format!(
                        "answered {method} with neither a result nor an error"
                    ))),
                }
            }
            Binding::HttpJson | Binding::Rest03 | Binding::Grpc => {
                if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
                    return Err(unreachable_or_refused(status, method));
                }
                if !status.is_success() {
                    let why = value
                        .as_ref()
                        .map(|v| error_text(v.get("error").unwrap_or(v)))
                        .unwrap_or_else(|| status.to_string());
                    return Err(CallError::Refused(format!("refused {method}: {why}")));
                }
                let value = value.ok_or_else(|| {
                    CallError::Refused(format!("answered {method} with something not JSON"))
                })?;
                Ok(match endpoint.binding {
                    Binding::Rest03 => rest03::as_rpc(value),
                    _ => value,
                })
            }
        }
    }
}

/// The message to send, in the dialect's shape.
fn message_of(
    binding: Binding,
    message_id: &str,
    text: &str,
    data: Option<&Value>,
    continues: Option<(Option<&str>, &str)>,
) -> Value {
    let mut message = match binding {
        Binding::JsonRpc03 => {
            let mut parts = vec![json!({"kind": "text", "text": text})];
            parts.extend(data.map(|d| json!({"kind": "data", "data": d})));
            json!({"kind": "message", "messageId": message_id, "role": "user", "parts": parts})
        }
        // The 0.3 proto: `content`, and a data part's Struct inside a DataPart.
        Binding::Rest03 => {
            let mut parts = vec![json!({"text": text})];
            parts.extend(data.map(|d| json!({"data": {"data": d}})));
            json!({"messageId": message_id, "role": "ROLE_USER", "content": parts})
        }
        Binding::JsonRpc | Binding::HttpJson | Binding::Grpc => {
            let mut parts = vec![json!({"text": text})];
            parts.extend(data.map(|d| json!({"data": d})));
            json!({"messageId": message_id, "role": "ROLE_USER", "parts": parts})
        }
    };
    if let Some((task_id, context_id)) = continues {
        if let Some(task_id) = task_id {
            message["taskId"] = json!(task_id);
        }
        message["contextId"] = json!(context_id);
    }
    message
}
