//! One attempt of a delivery: `POST <url>` with `Content-Type: application/a2a+json`,
//! the payload of the registering dialect (a 1.0 `StreamResponse`, or the 0.3 `Task`),
//! the config's token as `X-A2A-Notification-Token`, its authentication as
//! `Authorization: <scheme> <credentials>`, and the stable event id
//! `X-A2A-Event-Id: <taskId>:<seq>` (the same on every retry, so a receiver drops
//! duplicates by it). Redirects are not followed; a 2xx is an acknowledgement, anything
//! else (or no answer within `push.timeout_ms`) a failure; at most
//! `push.max_response_bytes` of a failed answer's body are read, for the log.

use super::Deliverer;
use crate::a2a::encode_push_payload;
use crate::error::error_chain;
use crate::outbound::policy::{POLICY_REFUSAL, refused_at_delivery};
use crate::outbound::secrets::Secrets;
use crate::push::receivers::Outcome;
use crate::store::Delivery;

/// The header that carries a delivery's stable event id.
pub const DELIVERY_ID_HEADER: &str = "X-A2A-Event-Id";
const TOKEN_HEADER: &str = "X-A2A-Notification-Token";
const CONTENT_TYPE: &str = "application/a2a+json";

/// How one attempt ended.
pub(super) enum Attempt {
    Delivered,
    /// Worth another try: no answer, or a status other than 2xx.
    Failed {
        result: &'static str,
        why: String,
    },
    /// The URL policy refuses the receiver now: no retry will change that.
    Refused(String),
}

impl Deliverer {
    /// One POST of `delivery`.
    pub(super) async fn attempt(&self, delivery: &Delivery) -> Attempt {
        let config = &delivery.config;
        if let Some(why) = refused_at_delivery(&self.policy, &config.url) {
            return Attempt::Refused(why);
        }
        let body = match serde_json::to_vec(&encode_push_payload(&delivery.payload)) {
            Ok(body) => body,
            Err(e) => return Attempt::Refused(format!("payload: {e}")),
        };
        let mut request = self
            .client
            .post(&config.url)
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .header(
                DELIVERY_ID_HEADER,
                format!("{}:{}", delivery.key.task_id, delivery.key.seq),
            )
            .body(body);
        if let Some(token) = &config.token {
            request = request.header(TOKEN_HEADER, token);
        }
        if let Some(auth) = &config.auth {
            let value = match &auth.credentials {
                Some(c) => format!("{} {c}", auth.scheme),
                None => auth.scheme.clone(),
            };
            request = request.header(reqwest::header::AUTHORIZATION, value);
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => Attempt::Delivered,
            Ok(mut response) => {
                let status = response.status();
                let mut body = Vec::new();
                while body.len() < self.settings.max_response_bytes {
                    match response.chunk().await {
                        Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                        _ => break,
                    }
                }
                body.truncate(self.settings.max_response_bytes);
                // A receiver that echoes the request must not put its token in our log.
                let sent = [
                    config.token.as_deref(),
                    config.auth.as_ref().and_then(|a| a.credentials.as_deref()),
                ];
                let body = Secrets::new(sent.into_iter().flatten())
                    .text(String::from_utf8_lossy(&body).into_owned());
                Attempt::Failed {
                    result: "http_error",
                    why: format!("{status}: {body}"),
                }
            }
            Err(e) if is_refused_by_policy(&e) => Attempt::Refused(error_chain(&e)),
            Err(e) => Attempt::Failed {
                result: "failed",
                why: error_chain(&e),
            },
        }
    }
}

impl Attempt {
    /// What the attempt says of its receiver, for its breaker.
    pub(super) fn outcome(&self) -> Outcome {
        match self {
            Attempt::Delivered => Outcome::Answered,
            Attempt::Failed { .. } => Outcome::Failed,
            Attempt::Refused(_) => Outcome::Neither,
        }
    }
}

/// The policy's resolver refused every address of the host.
fn is_refused_by_policy(e: &reqwest::Error) -> bool {
    error_chain(e).contains(POLICY_REFUSAL)
}
