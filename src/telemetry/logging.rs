//! Logging: the tracing subscriber installed once, writing text or JSON lines to stderr
//! and, when `telemetry.otlp_endpoint` is set, exporting spans ([`trace`]); rmcp held to
//! warnings, and the lines of other crates that carry a secret left out.

use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::FilterExt;

use super::trace;
use crate::config::{LogFormat, LogSettings, TelemetrySettings};

/// Installs the tracing subscriber once (later calls are no-ops, so tests may call it):
/// log lines to stderr, and no traces.
pub fn init_logging(settings: &LogSettings) {
    init(settings, &TelemetrySettings::default(), None);
}

/// Installs the tracing subscriber once: log lines to stderr and, when
/// `telemetry.otlp_endpoint` is set, spans exported over OTLP ([`trace`]). `node_id`
/// names this process among a cluster's nodes (a resource attribute).
pub fn init(settings: &LogSettings, telemetry: &TelemetrySettings, node_id: Option<&str>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let filter = EnvFilter::try_from_default_env()
            .or_else(|_| EnvFilter::try_new(quiet_rmcp(&settings.level)))
            .unwrap_or_else(|_| EnvFilter::new("info"));
        // Colours only for a person at a terminal, never in files or log collectors.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr);
        let filter = filter.and(without_secrets());
        let fmt = match settings.format {
            LogFormat::Text => fmt.with_filter(filter).boxed(),
            LogFormat::Json => fmt.json().with_filter(filter).boxed(),
        };
        // Only the spans made for traces, whatever the log level says.
        let traces = match telemetry.enabled() {
            false => None,
            true => match trace::layer(telemetry, node_id) {
                Ok(layer) => Some(
                    layer.with_filter(
                        tracing_subscriber::filter::Targets::new()
                            .with_target(trace::TARGET, tracing::Level::INFO),
                    ),
                ),
                Err(e) => {
                    eprintln!("agent-a2a: {e}; no traces are exported");
                    None
                }
            },
        };
        let result = tracing_subscriber::registry()
            .with(fmt)
            .with(traces)
            .try_init();
        if let Err(e) = result {
            eprintln!("agent-a2a: logging already initialised: {e}");
        }
        if trace::on() {
            tracing::info!(
                endpoint = %telemetry.traces_url(),
                sampling_ratio = telemetry.sampling_ratio,
                "exporting traces over OTLP/HTTP"
            );
        }
    });
}

/// `level` with rmcp held to warnings unless it names rmcp itself: rmcp logs every
/// notification a server sends at INFO, whole, so a server could fill the log.
fn quiet_rmcp(level: &str) -> String {
    if level.contains("rmcp") {
        level.to_owned()
    } else {
        format!("{level},rmcp=warn")
    }
}

/// Leaves out the lines of other crates that carry a secret: rmcp logs a Streamable HTTP
/// session's id — which is all a client needs to act in that session — when it ends one.
/// Decided once per callsite (its metadata says it all), so it costs nothing per event.
fn without_secrets() -> WithoutSecrets {
    WithoutSecrets
}

struct WithoutSecrets;

impl<S> tracing_subscriber::layer::Filter<S> for WithoutSecrets {
    fn enabled(
        &self,
        meta: &tracing::Metadata<'_>,
        _: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        carries_no_secret(meta)
    }

    /// No bound of its own: without a hint the layer's (the `And` of it and the level
    /// filter) would be unknown, which turns off tracing's level check at every callsite
    /// (measured: ~9 000 instructions per send).
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn callsite_enabled(
        &self,
        meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if carries_no_secret(meta) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }
}

fn carries_no_secret(meta: &tracing::Metadata<'_>) -> bool {
    !(meta.target().starts_with("rmcp") && meta.fields().field("session_id").is_some())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// rmcp's line naming a Streamable HTTP session's id is left out; its other lines, and
    /// ours, are kept.
    #[test]
    fn an_mcp_session_id_is_not_logged() {
        let written = Written::default();
        let sink = written.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(move || sink.clone())
            .with_filter(EnvFilter::new("info").and(without_secrets()));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "rmcp::transport::streamable_http_client", session_id = "s-3cr3t", "delete session success");
            tracing::info!(target: "rmcp::transport::streamable_http_client", "kept");
            tracing::info!(session_id = "ours", "ours kept");
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("s-3cr3t"), "{text}");
        assert!(
            text.contains("kept") && text.contains("ours kept"),
            "{text}"
        );
    }

    /// The filter keeps the level's bound: an unknown one would have every disabled
    /// callsite checked at each hit (a regression of ~9 000 instructions per send).
    #[test]
    fn the_log_filter_keeps_its_level_bound() {
        use tracing_subscriber::layer::Filter;
        let filter = EnvFilter::new(quiet_rmcp("info")).and(without_secrets());
        assert_eq!(
            Filter::<tracing_subscriber::Registry>::max_level_hint(&filter),
            Some(tracing::level_filters::LevelFilter::INFO)
        );
    }

    /// rmcp's line for every notification a server sends is not logged at the default
    /// level; its warnings are, and a level that names rmcp is taken as it is.
    #[test]
    fn rmcp_is_held_to_warnings_unless_named() {
        assert_eq!(quiet_rmcp("info"), "info,rmcp=warn");
        assert_eq!(quiet_rmcp("debug,rmcp=trace"), "debug,rmcp=trace");
        let written = Written::default();
        let sink = written.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(move || sink.clone())
            .with_filter(EnvFilter::new(quiet_rmcp("info")));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "rmcp::service", "received notification");
            tracing::warn!(target: "rmcp::service", "rmcp warns");
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("received notification"), "{text}");
        assert!(text.contains("rmcp warns"), "{text}");
    }
}
