//! SSE framing for both bindings. Each event carries `id: <seq>` (its place in the
//! task's durable log) so a client can resume with `Last-Event-ID`; JSON-RPC events are
//! wrapped in the JSON-RPC envelope of the request, REST events are bare
//! `StreamResponse`s. A failure after the stream started is sent as one `event: error`
//! and ends the stream. Errors before the first event never reach this module: they are
//! answered as plain JSON by the caller.

use std::convert::Infallible;
use std::time::Duration;

use actix_web::{HttpResponse, Responder};
use actix_web_lab::sse;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use crate::a2a::Dialect;
use crate::a2a::errors::{jsonrpc_error_object, rest_error_body, rest_v03_error_body};
use crate::a2a::{EventWire, encode_stream_event};
use crate::error::Error;
use crate::runtime::SeqEvent;
use crate::telemetry;

/// How events are wrapped.
#[derive(Clone)]
pub enum Framing {
    /// JSON-RPC envelope with the request's id.
    JsonRpc(Value),
    Rest,
}

/// An event's `data:` line: the payload, in the request's JSON-RPC envelope if it had one.
fn frame(framing: &Framing, payload: &impl serde::Serialize) -> String {
    let written = match framing {
        Framing::JsonRpc(id) => {
            serde_json::to_string(&crate::a2a::jsonrpc::Success::of(id, payload))
        }
        Framing::Rest => serde_json::to_string(payload),
    };
    // Never fails for the views of `a2a::encode`: they write only strings, numbers, lists
    // and objects with string keys.
    written.unwrap_or_else(|e| {
        tracing::error!(error = %e, "could not encode a stream event");
        String::new()
    })
}

/// The SSE response for a stream of task events.
pub fn respond(
    events: impl Stream<Item = Result<SeqEvent, Error>> + Send + 'static,
    dialect: Dialect,
    framing: Framing,
    keep_alive_secs: u64,
    req: &actix_web::HttpRequest,
) -> HttpResponse {
    // Events carry their generation when the request activated the extension.
    let generations = crate::service::operation::generations_active(dialect, req);
    let guard = telemetry::OpenGauge::new(telemetry::SSE_SUBSCRIBERS);
    // The event stream ends by itself after a closing event or an error.
    let frames = events.map(move |item| {
        let _keep = &guard;
        let event = match item {
            Ok((seq, event)) => {
                let data = if generations {
                    // The extension's fields are added to the event's value.
                    let mut payload = encode_stream_event(dialect, &event);
                    crate::a2a::generations::annotate_event(&mut payload, seq, &event);
                    frame(&framing, &payload)
                } else {
                    frame(&framing, &EventWire(dialect, &event))
                };
                let mut data = sse::Data::new(data);
                if !matches!(event, crate::domain::StreamEvent::Message { .. }) {
                    data = data.id(seq.to_string());
                }
                sse::Event::Data(data)
            }
            Err(e) => {
                crate::service::log_error(&e, "stream");
                let data = match &framing {
                    Framing::JsonRpc(id) => serde_json::json!({
                        "jsonrpc": "2.0", "id": id, "error": jsonrpc_error_object(&e)
                    }),
                    Framing::Rest if dialect == Dialect::V03Rest => rest_v03_error_body(&e).1,
                    Framing::Rest => rest_error_body(&e).1,
                };
                sse::Event::Data(sse::Data::new(data.to_string()).event("error"))
            }
        };
        Ok::<_, Infallible>(event)
    });
    sse::Sse::from_stream(frames)
        .with_keep_alive(Duration::from_secs(keep_alive_secs))
        .customize()
        .insert_header(("X-Accel-Buffering", "no"))
        .insert_header(("Cache-Control", "no-cache"))
        .respond_to(req)
        .map_into_boxed_body()
}
