//! Logging (tracing to stderr, text or JSON) and metrics: the process-wide recorder, and
//! the name of every metric the server emits, with its help text.
//!
//! One recorder serves two readers: the Prometheus exporter behind `/metrics`, and the
//! per-second [`stats`] behind the operators' dashboard (`/dashboard/stats.json`), which
//! taps a few of the same metrics. Both see every sample, so the page and a Prometheus
//! server never disagree about what happened.
//!
//! Metric labels never carry task or thread ids: cardinality stays bounded by the
//! number of methods, bindings, route patterns, states, skills, tools, providers and
//! error codes (and, for rate limiting, tenants).
//!
//! `logging.rs` installs the tracing subscriber; `names.rs` names every metric,
//! `recorder.rs` installs the recorder and registers their help texts, `series.rs` keeps
//! the handles of the series recorded most often; `tap.rs` feeds `stats.rs`, the
//! dashboard's view; `trace.rs` makes the OpenTelemetry spans. Every name is re-exported
//! here: callers write `telemetry::NAME`.

mod logging;
mod names;
mod recorder;
mod series;
pub mod stats;
mod tap;
pub mod trace;

pub use logging::{init, init_logging};
pub use names::*;
pub use recorder::{metrics_handle, recorder_installed};
pub use series::{OpenGauge, SeriesCache, counter, gauge, histogram, with_series};
