//! What a request carries: the body with its size limit and content type, the A2A
//! version it asks for, its `Last-Event-ID`, and its credentials.

use actix_web::HttpRequest;
use actix_web::web::{Bytes, BytesMut, Payload};
use futures_util::StreamExt;

use crate::a2a::Dialect;
use crate::a2a::version::{is_newer_than_supported, negotiate};
use crate::error::Error;

/// Reads the whole body, refusing it as soon as it passes `limit` bytes.
pub async fn read_limited(
    req: &HttpRequest,
    mut payload: Payload,
    limit: usize,
) -> Result<Bytes, Error> {
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(Error::PayloadTooLarge { limit });
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|e| Error::InvalidRequest(format!("cannot read the body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(Error::PayloadTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The media type of the request (lowercase, without parameters).
pub fn media_type(req: &HttpRequest) -> Option<String> {
    req.headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
}

/// JSON bodies: `application/json` or `application/a2a+json`. A missing type is
/// accepted only when there is no body to interpret.
pub fn check_json_content_type(req: &HttpRequest, body_is_empty: bool) -> Result<(), Error> {
    match media_type(req).as_deref() {
        Some("application/json") | Some("application/a2a+json") => Ok(()),
        None | Some("") if body_is_empty => Ok(()),
        None | Some("") => Err(Error::ContentTypeNotSupported(
            "missing Content-Type; use application/json".into(),
        )),
        Some(other) => Err(Error::ContentTypeNotSupported(format!(
            "{other}; use application/json"
        ))),
    }
}

/// The `A2A-Version` the request announces (header first, then query parameter).
pub fn requested_version(req: &HttpRequest) -> Option<String> {
    if let Some(v) = req
        .headers()
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
    {
        return Some(v.to_owned());
    }
    url_query_pairs(req.query_string())
        .into_iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("a2a-version"))
        .map(|(_, v)| v)
}

/// Negotiates the dialect, warning about clients newer than us.
pub fn dialect(req: &HttpRequest, shape: Dialect) -> Result<Dialect, Error> {
    let requested = requested_version(req);
    if let Some(v) = &requested
        && is_newer_than_supported(v)
    {
        tracing::warn!(requested = %v, "request announces a newer A2A version than this server supports");
    }
    negotiate(requested.as_deref(), shape)
}

/// `Last-Event-ID` of a resuming SSE client (header, or `lastEventId` query parameter).
pub fn last_event_id(req: &HttpRequest) -> Result<Option<i64>, Error> {
    let raw = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            url_query_pairs(req.query_string())
                .into_iter()
                .find(|(k, _)| k == "lastEventId")
                .map(|(_, v)| v)
        });
    crate::service::operation::event_id(raw.as_deref())
}

/// Decoded `key=value` pairs of a query string (undecodable strings yield none).
pub fn url_query_pairs(query: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str(query).unwrap_or_default()
}

impl crate::service::operation::Request for HttpRequest {
    fn last_event_id(&self) -> Result<Option<i64>, Error> {
        last_event_id(self)
    }

    /// JSON-RPC is served at `/` only; every other A2A path is HTTP+JSON.
    fn binding(&self) -> &'static str {
        if self.path() == "/" {
            "jsonrpc"
        } else {
            "http_json"
        }
    }
}

/// The gate reads an HTTP caller's headers and peer address.
impl crate::service::auth::Credentials for HttpRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers().get(name).and_then(|v| v.to_str().ok())
    }

    fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers()
            .get_all(name)
            .filter_map(|v| v.to_str().ok())
            .collect()
    }

    fn peer(&self) -> Option<std::net::IpAddr> {
        self.peer_addr().map(|peer| peer.ip())
    }

    fn proxied(&self) -> Option<std::net::IpAddr> {
        self.conn_data::<super::connection::ProxiedClient>()
            .map(|client| client.0.ip())
    }
}
