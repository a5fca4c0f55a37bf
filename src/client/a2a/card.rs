//! Where a remote agent's card comes from, and how it is kept: read within the URL policy
//! and `max_answer_bytes` ([`CardSource`]), verified under `verify_with` (what is verified
//! is what is used), the interface to speak chosen from it ([`interface_of`]) with what
//! it says its agent does ([`about_of`]), and kept until its `Cache-Control: max-age`
//! passes ([`CardSlot`], one read in flight at a time).

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Url;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::endpoint::{
    Binding, CallError, Endpoint, describe, read_limited, unreachable_or_refused,
};
use super::grpc;
use crate::outbound::UrlPolicy;

/// How long a card without `Cache-Control: max-age` is used before it is read again.
const DEFAULT_CARD_AGE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub(super) struct Card {
    pub(super) endpoint: Endpoint,
    /// What the card says its agent does ([`about_of`]).
    pub(super) about: String,
    pub(super) read_at: Instant,
    pub(super) max_age: Duration,
}

/// Where the keys a card must be signed by come from (`verify_with`).
pub(super) enum Verify {
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

/// Where a remote agent's card comes from, and how it is checked.
pub(super) struct CardSource {
    pub(super) name: String,
    pub(super) card_url: Url,
    pub(super) verify: Option<Verify>,
    pub(super) http: reqwest::Client,
    pub(super) policy: Arc<UrlPolicy>,
    /// How long one read of the card (and of its keys) may take in all.
    pub(super) timeout: Duration,
    pub(super) max_answer_bytes: usize,
    /// A gRPC interface written `host:port` is spoken over TLS (`grpc_tls`).
    pub(super) grpc_tls: bool,
    /// Certificate authorities trusted beside the platform's (`ca_file`).
    pub(super) extra_roots: Arc<Vec<rustls::pki_types::CertificateDer<'static>>>,
}

/// A read of the card in flight, which every call that needs the card joins.
pub(super) type Reading =
    futures_util::future::Shared<futures_util::future::BoxFuture<'static, Result<Card, CallError>>>;

/// The card last read, and the read in flight.
#[derive(Default)]
pub(super) struct CardSlot {
    pub(super) card: Option<Card>,
    pub(super) reading: Option<Reading>,
}

impl CardSource {
    /// The card, read within `timeout_ms` (its keys too, when they come from a URL).
    pub(super) async fn read(&self) -> Result<Card, CallError> {
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
pub(super) fn read_roots(
    path: &str,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;
    use serde_json::json;

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
}
