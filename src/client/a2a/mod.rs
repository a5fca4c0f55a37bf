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

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2a_pb::protojson as pb;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{StatusCode, Url};
use serde_json::{Value, json};

mod endpoint;
mod grpc;

pub use endpoint::{Binding, CallError, Endpoint};

use crate::config::RemoteAgentSettings;
use crate::push::UrlPolicy;
use endpoint::{describe, error_text, read_limited, unreachable_or_refused};

/// How long a card without `Cache-Control: max-age` is used before it is read again.
const DEFAULT_CARD_AGE: Duration = Duration::from_secs(300);
/// The first wait between two `GetTask`s of a task still running; it doubles up to
/// [`MAX_POLL`]. Short: a send answers at once, with a task most remotes finish soon.
const FIRST_POLL: Duration = Duration::from_millis(10);
const MAX_POLL: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
struct Card {
    endpoint: Endpoint,
    /// What the card says its agent does ([`about_of`]).
    about: String,
    read_at: Instant,
    max_age: Duration,
}

/// A remote agent's answer: its task (or its direct message) as the tool gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// `completed`, `input-required`, `auth-required`, or `message` for a direct reply.
    pub state: &'static str,
    /// The text of the status message (or of the direct reply), parts joined.
    pub text: String,
    /// The task's artifacts as the tool gives them (`name`, `text`, `data`).
    pub artifacts: Vec<Value>,
    pub task_id: String,
    pub context_id: String,
}

/// Where the keys a card must be signed by come from (`verify_with`).
enum Verify {
    Keys(jsonwebtoken::jwk::JwkSet),
    Url(Url),
}

/// The algorithms a remote card's signature may use.
const CARD_ALGORITHMS: [jsonwebtoken::Algorithm; 9] = {
    use jsonwebtoken::Algorithm::*;
    [
        ES256, ES384, RS256, RS384, RS512, PS256, PS384, PS512, EdDSA,
    ]
};

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

/// Where a remote agent's card comes from, and how it is checked.
struct CardSource {
    name: String,
    card_url: Url,
    verify: Option<Verify>,
    http: reqwest::Client,
    policy: Arc<UrlPolicy>,
    /// How long one read of the card (and of its keys) may take in all.
    timeout: Duration,
    max_answer_bytes: usize,
    /// A gRPC interface written `host:port` is spoken over TLS (`grpc_tls`).
    grpc_tls: bool,
    /// Certificate authorities trusted beside the platform's (`ca_file`).
    extra_roots: Arc<Vec<rustls::pki_types::CertificateDer<'static>>>,
}

/// A read of the card in flight, which every call that needs the card joins.
type Reading =
    futures_util::future::Shared<futures_util::future::BoxFuture<'static, Result<Card, CallError>>>;

/// The card last read, and the read in flight.
#[derive(Default)]
struct CardSlot {
    card: Option<Card>,
    reading: Option<Reading>,
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
            .dns_resolver(Arc::new(crate::push::policy::CheckedResolver {
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
        loop {
            if Instant::now() + wait >= deadline {
                return Err(CallError::Unreachable(format!(
                    "task {task_id} did not end within {} ms",
                    self.timeout.as_millis()
                )));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).clamp(FIRST_POLL, MAX_POLL);
            let mut params = json!({"id": task_id});
            if !endpoint.tenant.is_empty() {
                params["tenant"] = json!(endpoint.tenant);
            }
            let task = self
                .call(&endpoint, get, &["tasks", task_id], params, deadline)
                .await?;
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

impl CardSource {
    /// The card, read within `timeout_ms` (its keys too, when they come from a URL).
    async fn read(&self) -> Result<Card, CallError> {
        tokio::time::timeout(self.timeout, self.read_card())
            .await
            .unwrap_or_else(|_| {
                Err(CallError::Unreachable(format!(
                    "its card: no answer within {} ms",
                    self.timeout.as_millis()
                )))
            })
    }

    async fn read_card(&self) -> Result<Card, CallError> {
        let response = self
            .http
            .get(self.card_url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| match e.is_timeout() {
                // The client's own timeout is `timeout_ms` too, and may fire first.
                true => CallError::Unreachable(format!(
                    "its card: no answer within {} ms",
                    self.timeout.as_millis()
                )),
                false => CallError::Unreachable(format!("its card: {}", describe(&e))),
            })?;
        let status = response.status();
        let max_age = max_age(response.headers()).unwrap_or(DEFAULT_CARD_AGE);
        let body = read_limited(response, self.max_answer_bytes).await?;
        if !status.is_success() {
            return Err(unreachable_or_refused(status, "its card"));
        }
        // What is verified is what is used: a card that must be signed is read from its
        // signed form alone, so nothing outside the signed 1.0 fields (a 0.3 `url`) is.
        let (value, verified) = match &self.verify {
            Some(verify) => (self.verified(verify, &body).await?, true),
            None => (
                serde_json::from_slice(&body)
                    .map_err(|e| CallError::Refused(format!("its card is not JSON ({e})")))?,
                false,
            ),
        };
        let Some((url, binding, tenant)) = interface_of(&value, !verified) else {
            return Err(CallError::Refused(
                "its card offers no interface spoken here (A2A 1.0 over JSON-RPC, \
                 HTTP+JSON or gRPC, or 0.3 over JSON-RPC or HTTP+JSON)"
                    .into(),
            ));
        };
        // A 1.0 gRPC interface is `host:port`; the scheme says TLS or clear text.
        let url = match binding {
            Binding::Grpc if !url.contains("://") => {
                let scheme = if self.grpc_tls { "https" } else { "http" };
                format!("{scheme}://{url}")
            }
            _ => url,
        };
        let url = self
            .policy
            .check_url(&url)
            .map_err(|e| CallError::Refused(format!("its card's interface {e}")))?;
        let grpc = match binding {
            Binding::Grpc => Some(grpc::channel(
                &url,
                self.policy.clone(),
                self.timeout,
                &self.extra_roots,
            )?),
            _ => None,
        };
        Ok(Card {
            endpoint: Endpoint {
                url,
                binding,
                tenant,
                grpc,
            },
            about: about_of(&value),
            read_at: Instant::now(),
            max_age,
        })
    }

    /// The signed form of the card in `body` (see `a2a::signing`): refused, logged and
    /// counted by reason when it has no valid signature by a key of `verify_with` or is
    /// not written in canonical form.
    async fn verified(&self, verify: &Verify, body: &[u8]) -> Result<Value, CallError> {
        let fetched;
        let keys = match verify {
            Verify::Keys(keys) => keys,
            Verify::Url(url) => {
                let response =
                    self.http.get(url.clone()).send().await.map_err(|e| {
                        CallError::Unreachable(format!("its keys: {}", describe(&e)))
                    })?;
                let status = response.status();
                let body = read_limited(response, self.max_answer_bytes).await?;
                if !status.is_success() {
                    return Err(unreachable_or_refused(status, "its keys"));
                }
                fetched = serde_json::from_slice(&body)
                    .map_err(|e| CallError::Refused(format!("its keys are not a JWK Set ({e})")))?;
                &fetched
            }
        };
        crate::a2a::signing::verify_json(body, keys, &CARD_ALGORITHMS).map_err(|e| {
            tracing::warn!(agent = %self.name, reason = e.reason(), error = %e, "remote agent card refused");
            metrics::counter!(crate::telemetry::REMOTE_AGENT_CARDS_REFUSED,
                "agent" => self.name.clone(), "reason" => e.reason())
            .increment(1);
            CallError::Refused(format!("its card is not used: {e} (verify_with)"))
        })
    }
}

/// The certificates of the PEM file at `path` (at least one).
fn read_roots(path: &str) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path).map_err(|e| e.to_string())?;
    let roots = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates ({e})"))?;
    if roots.is_empty() {
        return Err("holds no certificate".into());
    }
    Ok(roots)
}

/// The interface of a card to speak to: of `supportedInterfaces`, in the card's order,
/// the first A2A 1.0 one over JSON-RPC, HTTP+JSON or gRPC; else the first 0.3 one over
/// JSON-RPC or HTTP+JSON — in `supportedInterfaces`, or, with `v03_card` (never for a
/// verified card: these fields are not signed), a 0.3 card's own `url` (in its
/// `preferredTransport`, JSON-RPC by default) or `additionalInterfaces`.
fn interface_of(card: &Value, v03_card: bool) -> Option<(String, Binding, String)> {
    let field = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    let interfaces = card.get("supportedInterfaces").and_then(Value::as_array);
    let listed = || interfaces.into_iter().flatten();
    let v1 = listed().find_map(|i| {
        let version = field(i, "protocolVersion");
        if !(version == "1.0" || version.starts_with("1.")) {
            return None;
        }
        let binding = match field(i, "protocolBinding").as_str() {
            "JSONRPC" => Binding::JsonRpc,
            "HTTP+JSON" => Binding::HttpJson,
            "GRPC" => Binding::Grpc,
            _ => return None,
        };
        Some((field(i, "url"), binding, field(i, "tenant")))
    });
    let binding_03 = |transport: &str| match transport {
        "JSONRPC" => Some(Binding::JsonRpc03),
        "HTTP+JSON" => Some(Binding::Rest03),
        _ => None,
    };
    let v03 = || {
        listed()
            .filter(|i| field(i, "protocolVersion").starts_with("0.3"))
            .find_map(|i| Some((field(i, "url"), binding_03(&field(i, "protocolBinding"))?)))
            .or_else(|| {
                if !v03_card {
                    return None;
                }
                let transport = card.get("preferredTransport").and_then(Value::as_str);
                let binding = binding_03(transport.unwrap_or("JSONRPC"))?;
                (field(card, "protocolVersion").starts_with("0.3"))
                    .then(|| (field(card, "url"), binding))
                    .filter(|(u, _)| !u.is_empty())
            })
            .or_else(|| {
                let additional = card.get("additionalInterfaces").and_then(Value::as_array);
                additional
                    .filter(|_| v03_card)
                    .into_iter()
                    .flatten()
                    .find_map(|i| Some((field(i, "url"), binding_03(&field(i, "transport"))?)))
            })
            .map(|(url, binding)| (url, binding, String::new()))
    };
    v1.or_else(v03).filter(|(url, ..)| !url.is_empty())
}

/// What a card says its agent does: its `description`, then `Its skills:` with each
/// skill's name (else id) and description.
fn about_of(card: &Value) -> String {
    fn text<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
        v.get(key).and_then(Value::as_str).map(str::trim)
    }
    let skills: Vec<String> = (card.get("skills").and_then(Value::as_array).into_iter())
        .flatten()
        .filter_map(|skill| {
            let name = text(skill, "name")
                .filter(|n| !n.is_empty())
                .or_else(|| text(skill, "id"))?;
            Some(match text(skill, "description").filter(|d| !d.is_empty()) {
                Some(description) => format!("{name} ({description})"),
                None => name.to_owned(),
            })
        })
        .collect();
    let mut about = text(card, "description").unwrap_or_default().to_owned();
    if !skills.is_empty() {
        if !about.is_empty() {
            about.push(' ');
        }
        about.push_str(&format!("Its skills: {}.", skills.join("; ")));
    }
    about
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

/// What a send left: the remote's answer, or its task still running.
#[derive(Debug, Clone, PartialEq)]
pub enum Sent {
    Answered(Answer),
    Running { task_id: String, context_id: String },
}

/// A task's answer in either version's shape, `None` while it runs.
fn task_outcome(v03: bool, task: Value) -> Result<Option<Answer>, CallError> {
    if v03 {
        return outcome_03(&task);
    }
    outcome(
        &serde_json::from_value::<pb::Task>(task)
            .map_err(|e| CallError::Refused(format!("answered with no task ({e})")))?,
    )
}

enum Reply {
    Answer(Answer),
    Task(Value),
}

fn reply(v03: bool, result: Value) -> Result<Reply, CallError> {
    if v03 {
        return match result.get("kind").and_then(Value::as_str) {
            Some("message") => Ok(Reply::Answer(Answer {
                state: "message",
                text: text_03(&result),
                artifacts: Vec::new(),
                task_id: str_of(&result, "taskId"),
                context_id: str_of(&result, "contextId"),
            })),
            Some("task") => Ok(Reply::Task(result)),
            _ => Err(CallError::Refused(
                "answered message/send with neither a task nor a message".into(),
            )),
        };
    }
    let response: pb::SendMessageResponse = serde_json::from_value(result).map_err(|e| {
        CallError::Refused(format!(
            "answered SendMessage with no task or message ({e})"
        ))
    })?;
    match response.payload {
        Some(pb::send_message_response::Payload::Message(message)) => Ok(Reply::Answer(Answer {
            state: "message",
            text: text_of(&message.parts),
            artifacts: Vec::new(),
            task_id: message.task_id,
            context_id: message.context_id,
        })),
        Some(pb::send_message_response::Payload::Task(task)) => Ok(Reply::Task(
            serde_json::to_value(task).map_err(|e| CallError::Refused(e.to_string()))?,
        )),
        None => Err(CallError::Refused(
            "answered SendMessage with neither a task nor a message".into(),
        )),
    }
}

fn str_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// The text parts of a 0.3 message or artifact (`parts[].kind == "text"`), joined.
fn text_03(holder: &Value) -> String {
    let parts = holder.get("parts").and_then(Value::as_array);
    parts
        .into_iter()
        .flatten()
        .filter(|p| p.get("kind").and_then(Value::as_str) == Some("text"))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// [`outcome`] of a 0.3 task (lowercase states, `kind`-tagged parts).
fn outcome_03(task: &Value) -> Result<Option<Answer>, CallError> {
    let status = task.get("status");
    let text = status
        .and_then(|s| s.get("message"))
        .map(text_03)
        .unwrap_or_default();
    let state = status.and_then(|s| s.get("state")).and_then(Value::as_str);
    let artifacts = (task.get("artifacts").and_then(Value::as_array).into_iter())
        .flatten()
        .map(|a| {
            let data = (a.get("parts").and_then(Value::as_array).into_iter())
                .flatten()
                .filter(|p| p.get("kind").and_then(Value::as_str) == Some("data"))
                .filter_map(|p| p.get("data").cloned())
                .collect();
            let name = a.get("name").and_then(Value::as_str).unwrap_or("");
            artifact_view(name, text_03(a), data)
        })
        .collect();
    settle(
        str_of(task, "id"),
        str_of(task, "contextId"),
        state,
        text,
        artifacts,
    )
}

/// The task's answer once it ended or asks for input; `None` while it runs; a refusal
/// for a task that failed, was rejected or canceled.
fn outcome(task: &pb::Task) -> Result<Option<Answer>, CallError> {
    let status = task.status.as_ref();
    let text = status
        .and_then(|s| s.message.as_ref())
        .map(|m| text_of(&m.parts))
        .unwrap_or_default();
    // The 1.0 states by their 0.3 names, which `settle` reads.
    let state = match pb::TaskState::try_from(status.map_or(0, |s| s.state)) {
        Ok(pb::TaskState::Completed) => Some("completed"),
        Ok(pb::TaskState::InputRequired) => Some("input-required"),
        Ok(pb::TaskState::AuthRequired) => Some("auth-required"),
        Ok(pb::TaskState::Submitted) => Some("submitted"),
        Ok(pb::TaskState::Working) => Some("working"),
        Ok(pb::TaskState::Failed) => Some("failed"),
        Ok(pb::TaskState::Rejected) => Some("rejected"),
        Ok(pb::TaskState::Canceled) => Some("canceled"),
        Ok(pb::TaskState::Unspecified) | Err(_) => None,
    };
    let artifacts = task
        .artifacts
        .iter()
        .map(|a| {
            let data = (a.parts.iter())
                .filter_map(|p| match &p.content {
                    Some(pb::part::Content::Data(value)) => serde_json::to_value(value).ok(),
                    _ => None,
                })
                .collect();
            artifact_view(&a.name, text_of(&a.parts), data)
        })
        .collect();
    settle(
        task.id.clone(),
        task.context_id.clone(),
        state,
        text,
        artifacts,
    )
}

/// The answer of a task in `state` (0.3 names), in either dialect: `None` while it
/// runs, a refusal once it failed, was rejected or canceled, or in no known state.
fn settle(
    id: String,
    context_id: String,
    state: Option<&str>,
    text: String,
    artifacts: Vec<Value>,
) -> Result<Option<Answer>, CallError> {
    let ended = |how: &str| match text.as_str() {
        "" => CallError::Refused(format!("its task {id} {how}")),
        text => CallError::Refused(format!("its task {id} {how}: {text}")),
    };
    let state = match state {
        Some("completed") => "completed",
        Some("input-required") => "input-required",
        Some("auth-required") => "auth-required",
        Some("submitted" | "working") => return Ok(None),
        Some(how @ ("failed" | "rejected" | "canceled")) => return Err(ended(how)),
        _ => {
            return Err(CallError::Refused(format!(
                "answered with task {id} in no known state"
            )));
        }
    };
    Ok(Some(Answer {
        state,
        text,
        artifacts,
        task_id: id,
        context_id,
    }))
}

/// An artifact as the tool gives it: its `name`, `text` and `data`, each when present.
fn artifact_view(name: &str, text: String, data: Vec<Value>) -> Value {
    let mut artifact = serde_json::Map::new();
    if !name.is_empty() {
        artifact.insert("name".into(), json!(name));
    }
    if !text.is_empty() {
        artifact.insert("text".into(), json!(text));
    }
    if !data.is_empty() {
        artifact.insert("data".into(), Value::Array(data));
    }
    Value::Object(artifact)
}

/// The text parts of a message or artifact, joined.
fn text_of(parts: &[pb::Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match &p.content {
            Some(pb::part::Content::Text(text)) => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `Cache-Control: max-age=N`.
fn max_age(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::CACHE_CONTROL)?.to_str().ok()?;
    value.split(',').find_map(|directive| {
        let (name, seconds) = directive.trim().split_once('=')?;
        (name.trim().eq_ignore_ascii_case("max-age"))
            .then(|| seconds.trim().parse::<u64>().ok())
            .flatten()
            .map(Duration::from_secs)
    })
}

/// The 0.3 HTTP+JSON answers (the 0.3 proto's JSON) in the 0.3 JSON-RPC shape, which
/// the client reads: `kind` tags, `parts`, lowercase states.
mod rest03 {
    use serde_json::{Map, Value, json};

    /// A send's answer (`{"task"}` or `{"msg"}`, `{"message"}` by its JSON name), or a
    /// task.
    pub(super) fn as_rpc(answer: Value) -> Value {
        let Value::Object(mut answer) = answer else {
            return answer;
        };
        if let Some(task) = answer.remove("task") {
            return task_of(task);
        }
        if let Some(message) = answer.remove("msg").or_else(|| answer.remove("message")) {
            return message_of(message);
        }
        task_of(Value::Object(answer))
    }

    fn task_of(task: Value) -> Value {
        let Value::Object(mut task) = task else {
            return task;
        };
        task.insert("kind".into(), json!("task"));
        if let Some(Value::Object(status)) = task.get_mut("status") {
            if let Some(state) = status.get("state").and_then(Value::as_str) {
                let state = state_of(state);
                status.insert("state".into(), json!(state));
            }
            // The proto's `update`, whose JSON name is `message`.
            if let Some(message) = status.remove("message").or_else(|| status.remove("update")) {
                status.insert("message".into(), message_of(message));
            }
        }
        if let Some(Value::Array(artifacts)) = task.get_mut("artifacts") {
            for artifact in artifacts.iter_mut().filter_map(Value::as_object_mut) {
                tag_parts(artifact, "parts");
            }
        }
        Value::Object(task)
    }

    fn message_of(message: Value) -> Value {
        let Value::Object(mut message) = message else {
            return message;
        };
        message.insert("kind".into(), json!("message"));
        tag_parts(&mut message, "content");
        Value::Object(message)
    }

    /// The parts under `key` (or `parts`) as `kind`-tagged 0.3 JSON-RPC parts.
    fn tag_parts(holder: &mut Map<String, Value>, key: &str) {
        let Some(Value::Array(parts)) = holder.remove(key).or_else(|| holder.remove("parts"))
        else {
            return;
        };
        let parts = parts
            .into_iter()
            .map(|part| {
                let Value::Object(mut part) = part else {
                    return part;
                };
                if part.contains_key("text") {
                    part.insert("kind".into(), json!("text"));
                } else if let Some(data) = part.remove("data") {
                    // A DataPart holds its Struct under `data`.
                    let data = match data {
                        Value::Object(mut wrapper) if wrapper.contains_key("data") => {
                            wrapper.remove("data").unwrap_or(Value::Null)
                        }
                        bare => bare,
                    };
                    part.insert("kind".into(), json!("data"));
                    part.insert("data".into(), data);
                } else if part.contains_key("file") {
                    part.insert("kind".into(), json!("file"));
                }
                Value::Object(part)
            })
            .collect();
        holder.insert("parts".into(), Value::Array(parts));
    }

    /// `TASK_STATE_INPUT_REQUIRED` → `input-required`; 0.3 spelled canceled
    /// `TASK_STATE_CANCELLED`.
    fn state_of(state: &str) -> String {
        match state.strip_prefix("TASK_STATE_") {
            Some("CANCELLED") => "canceled".into(),
            Some(name) => name.to_ascii_lowercase().replace('_', "-"),
            None => state.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_is_read_from_cache_control() {
        let mut headers = HeaderMap::new();
        assert_eq!(max_age(&headers), None);
        headers.insert(
            reqwest::header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=60"),
        );
        assert_eq!(max_age(&headers), Some(Duration::from_secs(60)));
        headers.insert(
            reqwest::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
        assert_eq!(max_age(&headers), None);
    }

    fn task(state: pb::TaskState, text: &str) -> pb::Task {
        serde_json::from_value(json!({
            "id": "t1", "contextId": "c1",
            "status": {"state": state.as_str_name(), "message": {
                "messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": text}]}},
            "artifacts": [{"artifactId": "a", "name": "answer",
                "parts": [{"text": "part one"}, {"data": {"n": 1}}]}],
        }))
        .expect("a task")
    }

    #[test]
    fn a_task_ends_in_an_answer_a_refusal_or_not_yet() {
        let done = outcome(&task(pb::TaskState::Completed, "all good"))
            .unwrap()
            .unwrap();
        assert_eq!(done.state, "completed");
        assert_eq!(done.text, "all good");
        assert_eq!(
            done.artifacts,
            vec![json!({"name": "answer", "text": "part one", "data": [{"n": 1.0}]})]
        );
        assert_eq!(
            (done.task_id.as_str(), done.context_id.as_str()),
            ("t1", "c1")
        );
        let asks = outcome(&task(pb::TaskState::InputRequired, "which account?"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (asks.state, asks.text.as_str()),
            ("input-required", "which account?")
        );
        assert_eq!(outcome(&task(pb::TaskState::Working, "")).unwrap(), None);
        assert_eq!(
            outcome(&task(pb::TaskState::Failed, "no such invoice")),
            Err(CallError::Refused(
                "its task t1 failed: no such invoice".into()
            ))
        );
        assert!(matches!(
            outcome(&task(pb::TaskState::Rejected, "")),
            Err(CallError::Refused(text)) if text == "its task t1 rejected"
        ));
    }

    #[test]
    fn the_interface_is_the_first_1_0_one_spoken_here_else_a_0_3_one() {
        let interface = |card: Value| interface_of(&card, true);
        let listed = |entries: Value| json!({"supportedInterfaces": entries});
        assert_eq!(
            interface(listed(json!([
                {"url": "g", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "j", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            ]))),
            Some(("g".into(), Binding::Grpc, String::new()))
        );
        assert_eq!(
            interface(listed(json!([
                {"url": "s", "protocolBinding": "SOAP", "protocolVersion": "1.0"},
                {"url": "j03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
                {"url": "r", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0", "tenant": "t"},
                {"url": "j", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            ]))),
            Some(("r".into(), Binding::HttpJson, "t".into()))
        );
        assert_eq!(
            interface(listed(json!([
                {"url": "j03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            ]))),
            Some(("j03".into(), Binding::JsonRpc03, String::new()))
        );
        // A 0.3 card: its own url unless it prefers another transport, then its
        // additional interfaces.
        let old = json!({"protocolVersion": "0.3.0", "url": "u"});
        assert_eq!(interface(old).map(|i| i.1), Some(Binding::JsonRpc03));
        let grpc_first = json!({"protocolVersion": "0.3.0", "url": "u", "preferredTransport": "GRPC",
            "additionalInterfaces": [{"url": "g", "transport": "GRPC"}, {"url": "a", "transport": "HTTP+JSON"}]});
        assert_eq!(
            interface(grpc_first),
            Some(("a".into(), Binding::Rest03, String::new()))
        );
        let rest =
            json!({"protocolVersion": "0.3.0", "url": "u", "preferredTransport": "HTTP+JSON"});
        assert_eq!(interface(rest).map(|i| i.1), Some(Binding::Rest03));
        // A verified card's own 0.3 fields are not signed, and not used.
        let listed_too = json!({"protocolVersion": "0.3.0", "url": "u", "additionalInterfaces":
            [{"url": "a", "transport": "JSONRPC"}], "supportedInterfaces":
            [{"url": "l", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]});
        assert_eq!(
            interface_of(&listed_too, false),
            Some(("l".into(), Binding::JsonRpc03, String::new()))
        );
        let mut unlisted = listed_too.clone();
        unlisted
            .as_object_mut()
            .unwrap()
            .remove("supportedInterfaces");
        assert_eq!(interface_of(&unlisted, false), None);
        assert!(interface_of(&unlisted, true).is_some());
        // 0.3 gRPC (package `a2a.v1`) is not spoken.
        let old_grpc =
            listed(json!([{"url": "g", "protocolBinding": "GRPC", "protocolVersion": "0.3"}]));
        assert_eq!(interface(old_grpc), None);
        assert_eq!(interface(json!({"name": "none"})), None);
    }

    #[test]
    fn a_card_says_what_its_agent_does_by_its_description_and_skills() {
        let card = json!({"description": "Bills customers.", "skills": [
            {"id": "refunds", "name": "Refunds", "description": "Refunds an order."},
            {"id": "invoices", "description": ""},
            {"description": "nameless"},
        ]});
        assert_eq!(
            about_of(&card),
            "Bills customers. Its skills: Refunds (Refunds an order.); invoices."
        );
        assert_eq!(about_of(&json!({"skills": []})), "");
    }

    #[test]
    fn a_0_3_http_json_answer_reads_as_its_json_rpc_twin() {
        let task = json!({"task": {"id": "t1", "contextId": "c1",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"messageId": "m",
                "role": "ROLE_AGENT", "content": [{"text": "which one?"}]}},
            "artifacts": [{"artifactId": "a", "name": "n", "parts": [
                {"text": "one"}, {"data": {"data": {"n": 1}}}]}]}});
        let read = outcome_03(&rest03::as_rpc(task)).unwrap().unwrap();
        assert_eq!(
            (read.state, read.text.as_str()),
            ("input-required", "which one?")
        );
        assert_eq!(
            read.artifacts,
            vec![json!({"name": "n", "text": "one", "data": [{"n": 1}]})]
        );
        let canceled = json!({"id": "t2", "status": {"state": "TASK_STATE_CANCELLED"}});
        let e = outcome_03(&rest03::as_rpc(canceled)).unwrap_err();
        assert_eq!(e, CallError::Refused("its task t2 canceled".into()));
        // A direct reply, under the proto's field name or its JSON name.
        for key in ["msg", "message"] {
            let reply = json!({key: {"messageId": "m", "role": "ROLE_AGENT",
                "content": [{"text": "hi"}]}});
            assert_eq!(text_03(&rest03::as_rpc(reply)), "hi");
        }
        let sent = message_of(Binding::Rest03, "m", "x", Some(&json!({"k": 1})), None);
        assert_eq!(
            sent,
            json!({"messageId": "m", "role": "ROLE_USER",
                "content": [{"text": "x"}, {"data": {"data": {"k": 1}}}]})
        );
    }

    #[test]
    fn a_0_3_task_reads_as_a_1_0_one() {
        let task = |state: &str| {
            json!({"kind": "task", "id": "t1", "contextId": "c1",
                "status": {"state": state, "message": {"kind": "message", "messageId": "m",
                    "role": "agent", "parts": [{"kind": "text", "text": "why"}]}},
                "artifacts": [{"artifactId": "a", "parts": [
                    {"kind": "text", "text": "one"}, {"kind": "data", "data": {"n": 1}}]}]})
        };
        let done = outcome_03(&task("completed")).unwrap().unwrap();
        assert_eq!((done.state, done.text.as_str()), ("completed", "why"));
        assert_eq!(
            done.artifacts,
            vec![json!({"text": "one", "data": [{"n": 1}]})]
        );
        assert_eq!(outcome_03(&task("working")).unwrap(), None);
        assert_eq!(
            outcome_03(&task("failed")),
            Err(CallError::Refused("its task t1 failed: why".into()))
        );
        assert!(outcome_03(&task("unknown")).is_err());
        let message = reply(
            true,
            json!({"kind": "message", "messageId": "m", "role": "agent",
            "parts": [{"kind": "text", "text": "hi"}]}),
        );
        assert!(matches!(message, Ok(Reply::Answer(a)) if a.state == "message" && a.text == "hi"));
    }
}
