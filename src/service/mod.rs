//! What every binding shares: who may call ([`auth`]), and the one implementation of
//! every A2A operation ([`operation`]) over the runtime. The bindings (`http`, `grpc`)
//! sit beside each other on top of this module and differ only in framing.

pub mod auth;
pub mod card;
pub mod client_addr;
pub mod operation;

use std::sync::Arc;

use serde_json::Value;

use crate::a2a::card::{TenantTerms, extended_agent_card};
use crate::a2a::errors::map_error;
use crate::a2a::signing::CardSigner;
use crate::config::{RateLimitSettings, Settings};
use crate::error::Error;
use crate::outbound::UrlPolicy;
use crate::runtime::Runtime;
use crate::telemetry;
use auth::{Gate, Principal};

/// What a caller presented is also where its trace context is read from.
impl<T: auth::Credentials + ?Sized> telemetry::trace::Carrier for T {
    fn header(&self, name: &str) -> Option<&str> {
        auth::Credentials::header(self, name)
    }
}

/// The state every binding's handlers share.
pub struct Service {
    pub runtime: Arc<Runtime>,
    /// Authentication and rate limits of the A2A operations.
    pub gate: Arc<Gate>,
    /// Media types a message's parts may have (`agent.input_modes`).
    pub input_modes: Vec<String>,
    /// `Retry-After` seconds of every "unavailable" answer (`server.retry_after_secs`).
    pub retry_after_secs: u64,
    /// The public agent card (signed when `agent.card_signing` has a key), rendered anew
    /// when the tools change.
    card: card::PublicCard,
    /// Signs the extended cards, and publishes its key.
    card_signer: Option<Arc<CardSigner>>,
    /// The tiers' and skills' budgets, as the extended card tells them.
    limits: RateLimitSettings,
    /// Which receivers push configs may name; `None`: push notifications are off.
    push: Option<Arc<UrlPolicy>>,
    /// Longest a `GetTask` long-poll waits (`streaming.long_poll_secs`).
    pub long_poll: std::time::Duration,
    /// Event streams open at once on the node (`streaming.max_streams`): a permit per
    /// stream, held until the stream ends.
    streams: Arc<tokio::sync::Semaphore>,
    max_streams: usize,
}

impl Service {
    pub fn new(
        settings: &Settings,
        runtime: Arc<Runtime>,
        gate: Arc<Gate>,
        card: card::PublicCard,
        card_signer: Option<Arc<CardSigner>>,
        push: Option<Arc<UrlPolicy>>,
        max_streams: usize,
    ) -> Self {
        let max_streams = max_streams.min(tokio::sync::Semaphore::MAX_PERMITS);
        Self {
            streams: Arc::new(tokio::sync::Semaphore::new(max_streams)),
            max_streams,
            push,
            long_poll: std::time::Duration::from_secs(settings.streaming.long_poll_secs),
            runtime,
            gate,
            input_modes: settings.agent.input_modes.clone(),
            retry_after_secs: settings.server.retry_after_secs,
            card,
            card_signer,
            limits: settings.rate_limit.clone(),
        }
    }

    /// A place for one more event stream, held until the stream ends; past
    /// `streaming.max_streams` open at once, `Unavailable` (503 with `Retry-After`) at once,
    /// before anything of the request is done.
    pub fn open_stream(
        &self,
        binding: &'static str,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Error> {
        self.streams.clone().try_acquire_owned().map_err(|_| {
            metrics::counter!(telemetry::STREAMS_REFUSED, "binding" => binding).increment(1);
            Error::Unavailable {
                detail: format!(
                    "{} event streams are open on this node (streaming.max_streams)",
                    self.max_streams
                ),
                retry_after_secs: self.retry_after_secs,
            }
        })
    }

    /// The receiver policy, or `PushNotificationNotSupported` when push is off.
    pub fn push_policy(&self) -> Result<&UrlPolicy, Error> {
        self.push
            .as_deref()
            .ok_or(Error::PushNotificationNotSupported)
    }

    /// The public card for the agent's tools as they are now.
    pub fn public_card(&self) -> Arc<card::Published> {
        self.card.for_tools(self.runtime.tools().generation())
    }

    /// The extended card of an authenticated caller: the public card with its tenant,
    /// tier and budgets, signed anew when cards are signed.
    pub fn extended_card(&self, principal: &Principal) -> Result<Value, Error> {
        let limits = &self.limits;
        let terms = TenantTerms {
            tenant: principal.tenant.as_str().to_owned(),
            tier: principal.tier.clone(),
            requests_per_minute: limits
                .tiers
                .get(&principal.tier)
                .map_or(limits.default_per_minute, |tier| tier.per_minute),
            skill_calls_per_minute: limits
                .skills
                .iter()
                .map(|(skill, limit)| (skill.clone(), limit.per_minute))
                .collect(),
        };
        let mut card = extended_agent_card(&self.public_card().card, &terms);
        if let Some(signer) = &self.card_signer {
            signer
                .sign(&mut card)
                .map_err(|e| Error::internal(format!("the extended card: {e}")))?;
        }
        Ok(card)
    }

    /// The JWK Set of the card's signing key, when cards are signed.
    pub fn card_keys(&self) -> Option<&Value> {
        self.card_signer.as_deref().map(CardSigner::jwks)
    }

    /// Logs what the client will not see, counts the error by code, reason and method
    /// (`telemetry::ERRORS`), and returns the error as the client sees it: an
    /// unavailability carries the configured `Retry-After`, whatever hint its origin gave.
    pub fn report(&self, err: &Error, method: &'static str) -> Error {
        log_error(err, method);
        match err {
            Error::Unavailable { detail, .. } => Error::Unavailable {
                detail: detail.clone(),
                retry_after_secs: self.retry_after_secs,
            },
            other => other.clone(),
        }
    }
}

/// Logs an error with the detail the client never sees, and counts it.
pub fn log_error(err: &Error, method: &'static str) {
    match err {
        Error::Internal(detail) => tracing::error!(method, detail = %detail, "internal error"),
        Error::Unavailable { detail, .. } => {
            tracing::warn!(method, detail = %detail, "service unavailable")
        }
        other => tracing::debug!(method, error = %other, "request failed"),
    }
    let mapped = map_error(err);
    metrics::counter!(
        telemetry::ERRORS,
        "code" => mapped.code.to_string(),
        "reason" => mapped.reason,
        "method" => method
    )
    .increment(1);
}
