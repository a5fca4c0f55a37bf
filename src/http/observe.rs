//! Request metrics for every route, as one middleware: count by binding, method and
//! status, and latency by binding and method (`telemetry::HTTP_REQUESTS`,
//! `telemetry::HTTP_LATENCY_MS`; the dashboard's per-second view taps the same samples).
//!
//! The A2A handlers know which binding and operation served a request and say so by
//! [`tag`]ging their response (`unknown` when the method or route is not one of ours);
//! any other route is labelled by its route pattern (`/health`, `/dashboard/stats.json`),
//! and a request that failed before reaching a handler by `error`.
//! Labels never hold a raw path, so ids in URLs cannot grow the label set.

use std::borrow::Cow;
use std::cell::RefCell;
use std::time::Instant;

use actix_web::HttpResponse;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;

use crate::telemetry;

/// Which binding served a request (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binding {
    JsonRpc,
    Rest,
    Other,
}

impl Binding {
    fn label(self) -> &'static str {
        match self {
            Binding::JsonRpc => "jsonrpc",
            Binding::Rest => "http_json",
            Binding::Other => "other",
        }
    }
}

/// The labels a handler chose for its response.
#[derive(Debug, Clone, Copy)]
struct Observed {
    binding: Binding,
    method: &'static str,
}

/// Labels `response` with the binding and the A2A operation (or `unknown`) that served it.
pub fn tag(response: &mut HttpResponse, binding: Binding, method: &'static str) {
    response
        .extensions_mut()
        .insert(Observed { binding, method });
}

/// The middleware: times the request until its response head is ready (the lifetime of
/// an SSE stream is the subscriber gauge's business, not a latency).
pub async fn record(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let result = next.call(req).await;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    let (binding, method, status) = match &result {
        Ok(res) => {
            let (binding, method) = match res.response().extensions().get::<Observed>() {
                Some(o) => (o.binding, Cow::Borrowed(o.method)),
                None => (
                    Binding::Other,
                    Cow::Owned(
                        res.request()
                            .match_pattern()
                            .unwrap_or_else(|| "error".to_owned()),
                    ),
                ),
            };
            (binding, method, res.status())
        }
        Err(e) => (
            Binding::Other,
            Cow::Borrowed("error"),
            e.as_response_error().status_code(),
        ),
    };
    count(binding, method, status, elapsed_ms);
    result
}

/// A series' handles: its request counter and its latency histogram.
type Series = (metrics::Counter, metrics::Histogram);

/// A series' labels: binding, method, status code.
type SeriesKey = (Binding, Cow<'static, str>, u16);

thread_local! {
    /// Each worker's handles by (binding, method, status), so that a request finds its
    /// series without building the labels and looking them up in the recorder. The label
    /// set is bounded (see the module header), and so is this map.
    static SERIES: RefCell<telemetry::SeriesCache<SeriesKey, Series>> = RefCell::default();
}

fn count(binding: Binding, method: Cow<'static, str>, status: StatusCode, elapsed_ms: f64) {
    telemetry::with_series(
        &SERIES,
        (binding, method, status.as_u16()),
        |(binding, method, _)| series(*binding, method, status),
        |(counter, histogram)| {
            counter.increment(1);
            histogram.record(elapsed_ms);
        },
    );
}

fn series(binding: Binding, method: &str, status: StatusCode) -> Series {
    let counter = metrics::counter!(
        telemetry::HTTP_REQUESTS,
        "binding" => binding.label(),
        "method" => method.to_owned(),
        "status" => status.as_str().to_owned()
    );
    let histogram = metrics::histogram!(
        telemetry::HTTP_LATENCY_MS,
        "binding" => binding.label(),
        "method" => method.to_owned()
    );
    (counter, histogram)
}
