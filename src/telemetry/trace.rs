//! Traces: OpenTelemetry spans of a request, the thread actor's turn, each persistence
//! commit, each tool call and each provider call, exported over OTLP/HTTP (protobuf) when
//! `telemetry.otlp_endpoint` is set.
//!
//! The spans are `tracing` spans that `tracing-opentelemetry` turns into OpenTelemetry
//! ones; the SDK's batch processor exports them from a thread of its own, so a request
//! never waits for the collector. With the endpoint unset nothing here creates a span
//! ([`on`] is false and every constructor returns [`Span::none`]): the hot path pays one
//! relaxed load.
//!
//! A span crosses an actor hop by travelling inside the message (`SendTurn`, `Generate`),
//! so the turn is the request's child and the provider call the turn's, whatever thread
//! each runs on. A request's `traceparent` / `tracestate` (W3C) make it the child of its
//! caller; provider calls, push deliveries and forwarded cluster calls carry the current
//! span's context out the same way. Log lines written inside a request carry its
//! `trace_id` (the request span's field).
//!
//! Attribute names follow the OpenTelemetry GenAI conventions where they exist
//! (`gen_ai.operation.name`, `gen_ai.conversation.id`, `gen_ai.tool.name`,
//! `gen_ai.request.model`, `gen_ai.usage.*`) and the `a2a.*` names of A2A tracing for the
//! rest; docs/operating.md lists them all.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::config::TelemetrySettings;

/// The `tracing` target of every span made here (what a log filter names to hide them).
pub const TARGET: &str = "agent_a2a::trace";

static ON: AtomicBool = AtomicBool::new(false);
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether spans are made and exported.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Builds the exporter and the tracer provider, and returns the layer that turns this
/// process's spans into OpenTelemetry ones (installed by `telemetry::init_logging`).
pub(super) fn layer<S>(
    settings: &TelemetrySettings,
    node_id: Option<&str>,
) -> Result<tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::SdkTracer>, String>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let timeout = Duration::from_millis(settings.export_timeout_ms);
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(export::Client::new(timeout)?)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(settings.traces_url())
        .with_timeout(timeout)
        .build()
        .map_err(|e| format!("telemetry: cannot build the OTLP exporter: {e}"))?;
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(settings.max_queue_spans)
        .with_max_export_batch_size(settings.max_export_batch)
        .with_scheduled_delay(Duration::from_millis(settings.export_delay_ms))
        .build();
    let instance = match node_id {
        Some(id) => id.to_owned(),
        None => uuid::Uuid::new_v4().to_string(),
    };
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", instance),
        ])
        .with_attributes(node_id.map(|id| KeyValue::new("agent_a2a.node.id", id.to_owned())))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(
            BatchSpanProcessor::builder(exporter)
                .with_batch_config(batch)
                .build(),
        )
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            settings.sampling_ratio,
        ))))
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("agent-a2a");
    if PROVIDER.set(provider).is_err() {
        return Err("telemetry: the tracer provider is already installed".into());
    }
    ON.store(true, Ordering::Relaxed);
    Ok(tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_threads(false)
        .with_location(false)
        .with_tracked_inactivity(false))
}

/// Exports what is still queued and stops the exporter (at exit; bounded by
/// `telemetry.export_timeout_ms`).
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get()
        && let Err(e) = provider.shutdown()
    {
        tracing::warn!(error = %e, "telemetry: spans not exported at shutdown");
    }
}

/// Headers a span context is read from: a request's headers or gRPC metadata.
pub trait Carrier {
    /// The value of `name` (lowercase).
    fn header(&self, name: &str) -> Option<&str>;
}

struct Extract<'a, C: ?Sized>(&'a C);

impl<C: Carrier + ?Sized> Extractor for Extract<'_, C> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.header(key)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The span of one A2A request (kind server), the child of the caller's span when the
/// request carries `traceparent`. Records its `trace_id` for the log lines inside it.
///
/// A request whose trace is not sampled gets no span at all (`Span::none()`), and so
/// neither do its turn, commits, tool calls and generations: an unsampled request costs
/// what it costs with traces off, and sends no `traceparent` on.
pub fn request(operation: &'static str, binding: &'static str, headers: &impl Carrier) -> Span {
    if !on() {
        return Span::none();
    }
    let parent = TraceContextPropagator::new().extract(&Extract(headers));
    let remote = parent.span().span_context().clone();
    if remote.is_valid() && !remote.is_sampled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "a2a.request",
        otel.name = operation,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        a2a.method.name = operation,
        a2a.binding = binding,
        a2a.tenant.id = tracing::field::Empty,
        a2a.task.id = tracing::field::Empty,
        client.address = tracing::field::Empty,
        gen_ai.conversation.id = tracing::field::Empty,
        error.type = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    if remote.is_valid() {
        let _ = span.set_parent(parent);
    }
    let context = span.context();
    let own = context.span().span_context().clone();
    if !own.is_sampled() {
        return Span::none();
    }
    span.record("trace_id", tracing::field::display(own.trace_id()));
    span
}

/// Whether the current span belongs to a recorded trace (its children are made).
fn in_trace() -> bool {
    on() && !Span::current().is_disabled()
}

/// Marks `span` failed with the error's kind (`error.type`).
pub fn failed(span: &Span, kind: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "error");
    span.record("error.type", kind);
}

/// The thread actor's turn (`invoke_agent`), the child of the request that started it.
pub fn turn(parent: &Span, agent: &str, context_id: &str, task_id: &str) -> Span {
    if parent.is_disabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: parent,
        "invoke_agent",
        otel.name = format!("invoke_agent {agent}"),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = context_id,
        a2a.task.id = task_id,
        a2a.task.state = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// One commit through the persistence actor: `ops` writes in this batch; the writer
/// records how many batches its transaction grouped (`db.operation.batch.size`).
pub fn commit(parent: &Span, ops: usize) -> Span {
    if parent.is_disabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: parent,
        "persistence.commit",
        a2a.persistence.writes = ops,
        db.operation.batch.size = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// One tool call (`execute_tool`) under the current span.
pub fn tool(skill: &str, tool: &str) -> Span {
    if !in_trace() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = format!("execute_tool {tool}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.type = "function",
        a2a.skill.id = skill,
        a2a.tool.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// One generation (`chat`, kind client) under the current span: the provider's
/// `provider` name, its kind, and the model asked for.
pub fn generation(provider: &str, kind: &str, model: &str) -> Span {
    if !in_trace() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = kind,
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        a2a.provider.id = provider,
        a2a.time_to_first_token_ms = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// Adds the current span's `traceparent` (and `tracestate`) to an outgoing request.
pub fn inject(headers: &mut reqwest::header::HeaderMap) {
    if !in_trace() {
        return;
    }
    inject_context(&Span::current().context(), headers);
}

fn inject_context(context: &Context, headers: &mut reqwest::header::HeaderMap) {
    struct Inject<'a>(&'a mut reqwest::header::HeaderMap);
    impl Injector for Inject<'_> {
        fn set(&mut self, key: &str, value: String) {
            if let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(key.as_bytes()),
                reqwest::header::HeaderValue::from_str(&value),
            ) {
                self.0.insert(name, value);
            }
        }
    }
    TraceContextPropagator::new().inject_context(context, &mut Inject(headers));
}

/// The OTLP exporter's HTTP client: the crate's reqwest on a runtime of its own. The
/// SDK's batch thread drives exports with a plain executor, where reqwest (a tokio
/// client) cannot run, so each request is spawned onto this runtime and awaited there.
mod export {
    use std::time::Duration;

    use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

    pub(super) struct Client {
        http: reqwest::Client,
        runtime: tokio::runtime::Runtime,
    }

    impl std::fmt::Debug for Client {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("otlp-http-client")
        }
    }

    impl Client {
        pub(super) fn new(timeout: Duration) -> Result<Client, String> {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let http = reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .map_err(|e| format!("telemetry: cannot build the OTLP client: {e}"))?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("otlp-export")
                .enable_all()
                .build()
                .map_err(|e| format!("telemetry: cannot start the export runtime: {e}"))?;
            Ok(Client { http, runtime })
        }
    }

    #[async_trait::async_trait]
    impl HttpClient for Client {
        async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
            let request = reqwest::Request::try_from(request)?;
            let http = self.http.clone();
            let exchange = self.runtime.spawn(async move {
                let response = http.execute(request).await?;
                let status = response.status();
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, body))
            });
            let (status, body) = exchange.await??;
            Ok(Response::builder().status(status).body(body)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    impl Carrier for HashMap<&str, &str> {
        fn header(&self, name: &str) -> Option<&str> {
            self.get(name).copied()
        }
    }

    #[test]
    fn off_makes_no_spans() {
        // No test in this binary installs the exporter.
        assert!(!on());
        let headers: HashMap<&str, &str> = HashMap::new();
        assert!(request("SendMessage", "jsonrpc", &headers).is_none());
        assert!(turn(&Span::none(), "agent", "c", "t").is_none());
        assert!(commit(&Span::none(), 3).is_none());
        assert!(tool("memory", "remember").is_none());
        assert!(generation("main", "openai", "gpt").is_none());
        let mut out = reqwest::header::HeaderMap::new();
        inject(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_remote_parent_is_injected_as_it_was_read() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let headers: HashMap<&str, &str> =
            [("traceparent", parent), ("tracestate", "vendor=1")].into();
        let context = TraceContextPropagator::new().extract(&Extract(&headers));
        assert!(context.span().span_context().is_remote());
        let mut out = reqwest::header::HeaderMap::new();
        inject_context(&context, &mut out);
        assert_eq!(out["traceparent"], parent);
        assert_eq!(out["tracestate"], "vendor=1");
    }
}
