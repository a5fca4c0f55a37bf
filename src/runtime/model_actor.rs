//! `ModelActor`s: one per configured provider. Every generation goes through its actor,
//! which records time to first token, tokens in and out, and errors by kind, and keeps a
//! circuit breaker: after `models.breaker_failures` consecutive failed generations the
//! provider is not called for `models.breaker_cooldown_secs`; calls fail at once with
//! `CircuitOpen`, then one call is let through, and its success closes the circuit.
//! (The provider's own `max_concurrency` bounds how many generations run at once.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tracing::Instrument;

use crate::config::{ModelSettings, ProviderKind, ProviderSettings};
use crate::providers::{GenerateParams, Provider, ProviderError, ProviderEvent};
use crate::telemetry::trace;
use crate::telemetry::{
    MODEL_ERRORS as ERRORS, MODEL_REQUESTS as REQUESTS, MODEL_STREAM_DELTAS as DELTAS,
    MODEL_TOKENS as TOKENS, MODEL_TTFT_MS as TTFT,
};

/// A stream of provider events.
pub type EventStream = BoxStream<'static, ProviderEvent>;

/// Starts a generation, inside its span (`Span::none()` without traces): the provider's
/// request carries the span's `traceparent`, and the span records the generation's
/// time to first token, tokens and outcome until its stream ends.
#[derive(Message)]
#[rtype(result = "Result<EventStream, ProviderError>")]
pub struct Generate(pub GenerateParams, pub tracing::Span);

/// How a generation ended (sent by the stream wrapper, for the breaker): `None` for a
/// success, else the kind of error.
#[derive(Message)]
#[rtype(result = "()")]
struct Finished {
    error: Option<&'static str>,
}

/// The circuit breaker's state, for `/health`. Asking never calls the provider.
#[derive(Message)]
#[rtype(result = "Breaker")]
pub struct GetBreaker;

/// Where a provider's circuit breaker stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breaker {
    pub circuit: Circuit,
    /// Failed generations in a row (0 after a success).
    pub consecutive_failures: u32,
    /// The kind of the last failed generation (as in `agent_a2a_model_errors_total`),
    /// kept after a success so operators can see what went wrong last.
    pub last_error: Option<&'static str>,
}

/// A circuit breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circuit {
    /// Calls go through.
    Closed,
    /// Calls fail at once for this much longer.
    Open { retry_after: Duration },
    /// The cooldown is over: the next call goes through, and its outcome decides.
    HalfOpen,
}

/// The actor in front of one provider.
pub struct ModelActor {
    provider: Arc<dyn Provider>,
    failures: u32,
    last_error: Option<&'static str>,
    open_until: Option<Instant>,
    threshold: u32,
    cooldown: Duration,
}

impl ModelActor {
    pub fn new(provider: Arc<dyn Provider>, settings: &ModelSettings) -> Self {
        Self {
            provider,
            failures: 0,
            last_error: None,
            open_until: None,
            threshold: settings.breaker_failures.max(1),
            cooldown: Duration::from_secs(settings.breaker_cooldown_secs),
        }
    }
}

impl Actor for ModelActor {
    type Context = Context<Self>;
}

impl Handler<Finished> for ModelActor {
    type Result = ();

    fn handle(&mut self, outcome: Finished, _ctx: &mut Context<Self>) {
        let Some(kind) = outcome.error else {
            self.failures = 0;
            self.open_until = None;
            return;
        };
        self.last_error = Some(kind);
        self.failures = self.failures.saturating_add(1);
        if self.failures >= self.threshold {
            if self.open_until.is_none() {
                tracing::warn!(
                    provider = self.provider.id(),
                    failures = self.failures,
                    "model circuit opened"
                );
            }
            self.open_until = Some(Instant::now() + self.cooldown);
        }
    }
}

impl Handler<GetBreaker> for ModelActor {
    type Result = MessageResult<GetBreaker>;

    fn handle(&mut self, _msg: GetBreaker, _ctx: &mut Context<Self>) -> Self::Result {
        let now = Instant::now();
        let circuit = match self.open_until {
            None => Circuit::Closed,
            Some(until) if now < until => Circuit::Open {
                retry_after: until - now,
            },
            Some(_) => Circuit::HalfOpen,
        };
        MessageResult(Breaker {
            circuit,
            consecutive_failures: self.failures,
            last_error: self.last_error,
        })
    }
}

impl Handler<Generate> for ModelActor {
    type Result = ResponseFuture<Result<EventStream, ProviderError>>;

    fn handle(
        &mut self,
        Generate(params, span): Generate,
        ctx: &mut Context<Self>,
    ) -> Self::Result {
        if let Some(until) = self.open_until {
            let now = Instant::now();
            if now < until {
                let error = ProviderError::CircuitOpen {
                    retry_after: until - now,
                };
                record_error(self.provider.id(), &error);
                trace::failed(&span, error_kind(&error));
                return Box::pin(std::future::ready(Err(error)));
            }
            // Half-open: let this call through; its outcome decides.
            self.open_until = None;
        }
        let provider = self.provider.clone();
        let me = ctx.address();
        Box::pin(async move {
            let name = provider.id().to_owned();
            metrics::counter!(REQUESTS, "provider" => name.clone()).increment(1);
            let started = Instant::now();
            match provider.generate(params).instrument(span.clone()).await {
                Ok(stream) => Ok(observe(stream, name, started, me, span)),
                Err(e) => {
                    record_error(&name, &e);
                    trace::failed(&span, error_kind(&e));
                    me.do_send(Finished {
                        error: Some(error_kind(&e)),
                    });
                    Err(e)
                }
            }
        })
    }
}

/// Passes the events through, recording the first one's latency, usage and the outcome.
fn observe(
    stream: EventStream,
    name: String,
    started: Instant,
    me: Addr<ModelActor>,
    span: tracing::Span,
) -> EventStream {
    let mut first = true;
    let deltas = metrics::counter!(DELTAS, "provider" => name.clone());
    stream
        .inspect(move |event| {
            if first {
                first = false;
                let ttft_ms = started.elapsed().as_secs_f64() * 1000.0;
                metrics::histogram!(TTFT, "provider" => name.clone()).record(ttft_ms);
                span.record("a2a.time_to_first_token_ms", ttft_ms);
            }
            match event {
                ProviderEvent::Usage(usage) => {
                    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
                    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
                    metrics::counter!(TOKENS, "provider" => name.clone(), "direction" => "input")
                        .increment(usage.input_tokens);
                    metrics::counter!(TOKENS, "provider" => name.clone(), "direction" => "output")
                        .increment(usage.output_tokens);
                }
                ProviderEvent::Done => me.do_send(Finished { error: None }),
                ProviderEvent::Error(e) => {
                    record_error(&name, e);
                    trace::failed(&span, error_kind(e));
                    me.do_send(Finished {
                        error: Some(error_kind(e)),
                    });
                }
                ProviderEvent::TextDelta(_) | ProviderEvent::ToolCallFragment(_) => {
                    deltas.increment(1);
                }
            }
        })
        .boxed()
}

fn record_error(provider: &str, error: &ProviderError) {
    let kind = error_kind(error);
    metrics::counter!(ERRORS, "provider" => provider.to_owned(), "kind" => kind).increment(1);
}

/// The bounded name of an error's kind (a metric label, and what `/health` shows).
fn error_kind(error: &ProviderError) -> &'static str {
    match error {
        ProviderError::Http { .. } => "http",
        ProviderError::RateLimited { .. } => "rate_limited",
        ProviderError::Timeout => "timeout",
        ProviderError::Connect(_) => "connect",
        ProviderError::Decode(_) => "decode",
        ProviderError::StreamEnded => "stream_ended",
        ProviderError::Config(_) => "config",
        ProviderError::CircuitOpen { .. } => "circuit_open",
    }
}

/// The OpenTelemetry GenAI name (`gen_ai.provider.name`) of a provider kind.
fn gen_ai_system(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Openai => "openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Gemini => "gcp.gemini",
    }
}

/// A [`Provider`] whose every generation goes through a [`ModelActor`] (breaker, metrics).
struct ModelHandle {
    id: String,
    model: String,
    /// `gen_ai.provider.name` of the provider's kind.
    system: &'static str,
    addr: Addr<ModelActor>,
}

#[async_trait::async_trait]
impl Provider for ModelHandle {
    fn id(&self) -> &str {
        &self.id
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn generate(&self, params: GenerateParams) -> Result<EventStream, ProviderError> {
        let model = params.model.as_deref().unwrap_or(&self.model);
        let span = trace::generation(&self.id, self.system, model);
        self.addr
            .send(Generate(params, span))
            .await
            .map_err(|e| ProviderError::Connect(format!("model actor unreachable: {e}")))?
    }
}

/// The model actors of every configured provider, by name.
#[derive(Default)]
pub struct Models {
    by_name: HashMap<String, Addr<ModelActor>>,
    /// Each provider's configured model.
    models: HashMap<String, String>,
    /// Each configured provider's `gen_ai.provider.name`.
    systems: HashMap<String, &'static str>,
}

impl Models {
    /// Builds every `[providers.<name>]` and starts its actor on `arbiter`. A provider that
    /// cannot be built (its API key variable unset) stops start-up with its name.
    pub fn start(
        providers: &std::collections::BTreeMap<String, ProviderSettings>,
        settings: &ModelSettings,
        arbiter: &ArbiterHandle,
    ) -> Result<Models, ProviderError> {
        let mut models = Models::default();
        for (name, provider_settings) in providers {
            let provider = crate::providers::build(name, provider_settings)?;
            models.add(name, provider, settings, arbiter);
            models
                .systems
                .insert(name.clone(), gen_ai_system(provider_settings.kind));
        }
        Ok(models)
    }

    /// Starts an actor for `provider` under `name`.
    pub fn add(
        &mut self,
        name: &str,
        provider: Arc<dyn Provider>,
        settings: &ModelSettings,
        arbiter: &ArbiterHandle,
    ) {
        self.models
            .insert(name.to_owned(), provider.model().to_owned());
        self.by_name
            .insert(name.to_owned(), Self::spawn(provider, settings, arbiter));
    }

    /// Starts an actor for an already built provider.
    pub fn spawn(
        provider: Arc<dyn Provider>,
        settings: &ModelSettings,
        arbiter: &ArbiterHandle,
    ) -> Addr<ModelActor> {
        let actor = ModelActor::new(provider, settings);
        ModelActor::start_in_arbiter(arbiter, |_| actor)
    }

    /// The actor of provider `name`.
    pub fn get(&self, name: &str) -> Option<&Addr<ModelActor>> {
        self.by_name.get(name)
    }

    /// A model adapter whose generations go through provider `name`'s actor.
    pub fn adapter(&self, name: &str) -> Option<crate::agent::ModelAdapter> {
        let (addr, model) = self.by_name.get(name).zip(self.models.get(name))?;
        Some(crate::agent::ModelAdapter::new(Arc::new(ModelHandle {
            id: name.to_owned(),
            model: model.clone(),
            system: self.systems.get(name).copied().unwrap_or("unknown"),
            addr: addr.clone(),
        })))
    }

    /// Every provider's circuit breaker, by name, as its actor reports it (`None`: the
    /// actor did not answer within `timeout`, or has stopped). Never calls a provider.
    pub async fn breakers(&self, timeout: Duration) -> Vec<(String, Option<Breaker>)> {
        let mut names: Vec<&String> = self.by_name.keys().collect();
        names.sort();
        let asks = names.into_iter().map(|name| async move {
            let addr = &self.by_name[name];
            let breaker = match tokio::time::timeout(timeout, addr.send(GetBreaker)).await {
                Ok(Ok(breaker)) => Some(breaker),
                Ok(Err(_)) | Err(_) => None,
            };
            (name.clone(), breaker)
        });
        futures_util::future::join_all(asks).await
    }

    /// Starts a generation on provider `name`.
    pub async fn generate(
        &self,
        name: &str,
        params: GenerateParams,
    ) -> Result<EventStream, ProviderError> {
        let addr = self
            .by_name
            .get(name)
            .ok_or_else(|| ProviderError::Config(format!("no provider named {name:?}")))?;
        addr.send(Generate(params, tracing::Span::none()))
            .await
            .map_err(|e| ProviderError::Connect(format!("model actor unreachable: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    //! Tests of the model actors: pass-through, the circuit breaker and its reported state.

    use super::*;
    use crate::providers::{ScriptedProvider, Usage};

    fn settings(failures: u32) -> ModelSettings {
        ModelSettings {
            breaker_failures: failures,
            breaker_cooldown_secs: 3600,
        }
    }

    async fn drain(stream: EventStream) -> Vec<ProviderEvent> {
        stream.collect().await
    }

    #[actix_web::test]
    async fn streams_pass_through_unchanged() {
        let events = vec![
            ProviderEvent::TextDelta("Hello ".into()),
            ProviderEvent::TextDelta("world".into()),
            ProviderEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 2,
            }),
            ProviderEvent::Done,
        ];
        let provider = Arc::new(ScriptedProvider::new("p", "m", [Ok(events.clone())]));
        let arbiter = Arbiter::new();
        let mut models = Models::default();
        models.add("p", provider.clone(), &settings(5), &arbiter.handle());
        let got = drain(
            models
                .generate("p", GenerateParams::default())
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(got, events);
        assert_eq!(provider.requests().len(), 1);
        assert!(matches!(
            models.generate("nope", GenerateParams::default()).await,
            Err(ProviderError::Config(_))
        ));
        // The adapter goes through the same actor and names the provider's model.
        let adapter = models.adapter("p").unwrap();
        assert_eq!(adapter.name(), "m");
        assert!(models.adapter("nope").is_none());
        arbiter.stop();
    }

    #[actix_web::test]
    async fn repeated_failures_open_the_circuit_and_calls_fail_fast() {
        let failure = || {
            Err(ProviderError::Http {
                status: 503,
                body: "overloaded".into(),
            })
        };
        let mid_stream = Ok(vec![
            ProviderEvent::TextDelta("partial".into()),
            ProviderEvent::Error(ProviderError::StreamEnded),
        ]);
        let provider = Arc::new(ScriptedProvider::new(
            "p",
            "m",
            [failure(), mid_stream, Ok(vec![ProviderEvent::Done])],
        ));
        let arbiter = Arbiter::new();
        let addr = Models::spawn(provider.clone(), &settings(2), &arbiter.handle());
        // Two failures: one before the stream, one inside it.
        assert!(
            addr.send(Generate(GenerateParams::default(), tracing::Span::none()))
                .await
                .unwrap()
                .is_err()
        );
        let stream = addr
            .send(Generate(GenerateParams::default(), tracing::Span::none()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(drain(stream).await.len(), 2);
        // The failure report travels as a message; the next call queues behind it.
        let third = addr
            .send(Generate(GenerateParams::default(), tracing::Span::none()))
            .await
            .unwrap();
        let error = third.err();
        assert!(
            matches!(error, Some(ProviderError::CircuitOpen { .. })),
            "{error:?}"
        );
        assert_eq!(
            provider.requests().len(),
            2,
            "the open circuit did not call the provider"
        );
        let breaker = addr.send(GetBreaker).await.unwrap();
        assert!(
            matches!(breaker.circuit, Circuit::Open { .. }),
            "{breaker:?}"
        );
        assert_eq!(breaker.consecutive_failures, 2);
        assert_eq!(breaker.last_error, Some("stream_ended"));
        assert_eq!(
            provider.requests().len(),
            2,
            "asking for the breaker did not call the provider"
        );
        arbiter.stop();
    }

    #[actix_web::test]
    async fn after_the_cooldown_the_circuit_is_half_open_and_a_success_closes_it() {
        let provider = Arc::new(ScriptedProvider::new(
            "p",
            "m",
            [Err(ProviderError::Timeout), Ok(vec![ProviderEvent::Done])],
        ));
        let arbiter = Arbiter::new();
        let mut models = Models::default();
        let no_cooldown = ModelSettings {
            breaker_failures: 1,
            breaker_cooldown_secs: 0,
        };
        models.add("p", provider.clone(), &no_cooldown, &arbiter.handle());
        let closed = models.breakers(Duration::from_secs(5)).await;
        assert_eq!(
            closed,
            vec![(
                "p".to_owned(),
                Some(Breaker {
                    circuit: Circuit::Closed,
                    consecutive_failures: 0,
                    last_error: None,
                })
            )]
        );
        assert!(
            models
                .generate("p", GenerateParams::default())
                .await
                .is_err()
        );
        let open = models.breakers(Duration::from_secs(5)).await;
        let breaker = open[0].1.clone().unwrap();
        assert_eq!(breaker.circuit, Circuit::HalfOpen, "{breaker:?}");
        assert_eq!(breaker.last_error, Some("timeout"));
        let stream = models
            .generate("p", GenerateParams::default())
            .await
            .unwrap();
        drain(stream).await;
        let closed = models.breakers(Duration::from_secs(5)).await;
        let breaker = closed[0].1.clone().unwrap();
        assert_eq!(breaker.circuit, Circuit::Closed);
        assert_eq!(breaker.consecutive_failures, 0);
        assert_eq!(
            breaker.last_error,
            Some("timeout"),
            "the last error stays visible"
        );
        arbiter.stop();
    }

    #[actix_web::test]
    async fn a_success_resets_the_failure_count() {
        let fail = || Err(ProviderError::Timeout);
        let ok = || Ok(vec![ProviderEvent::Done]);
        let provider = Arc::new(ScriptedProvider::new(
            "p",
            "m",
            [fail(), ok(), fail(), ok()],
        ));
        let arbiter = Arbiter::new();
        let addr = Models::spawn(provider.clone(), &settings(2), &arbiter.handle());
        for _ in 0..4 {
            if let Ok(stream) = addr
                .send(Generate(GenerateParams::default(), tracing::Span::none()))
                .await
                .unwrap()
            {
                drain(stream).await;
            }
        }
        assert_eq!(
            provider.requests().len(),
            4,
            "never two failures in a row: never open"
        );
        arbiter.stop();
    }
}
