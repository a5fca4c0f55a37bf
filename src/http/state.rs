//! What every handler shares: the service, the settings it needs, and the agent card
//! serialized once with its caching headers.

use std::sync::Arc;
use std::time::SystemTime;

use metrics_exporter_prometheus::PrometheusHandle;
use sha2::{Digest, Sha256};

use crate::config::Settings;
use crate::service::Service;

pub struct AppState {
    /// The operations, and who may call them.
    pub service: Arc<Service>,
    pub card: CachedCard,
    pub max_body_bytes: usize,
    pub keep_alive_secs: u64,
    pub metrics: PrometheusHandle,
    /// SHA-256 of `metrics.bearer_token`, when `/metrics` needs it.
    pub metrics_token: Option<[u8; 32]>,
}

/// The agent card, serialized once, with its validators.
pub struct CachedCard {
    pub body: String,
    pub etag: String,
    pub last_modified: SystemTime,
    pub max_age_secs: u64,
}

impl AppState {
    /// The state over `service`, with its public card serialized once.
    pub fn new(settings: &Settings, service: Arc<Service>, metrics: PrometheusHandle) -> Self {
        let body = service.card.to_string();
        let etag = format!("\"{:x}\"", Sha256::digest(body.as_bytes()));
        Self {
            service,
            card: CachedCard {
                body,
                etag,
                last_modified: SystemTime::now(),
                max_age_secs: settings.server.card_max_age_secs,
            },
            max_body_bytes: settings.server.max_body_bytes,
            keep_alive_secs: settings.streaming.keep_alive_secs,
            metrics,
            metrics_token: (!settings.metrics.bearer_token.is_empty())
                .then(|| Sha256::digest(settings.metrics.bearer_token.as_bytes()).into()),
        }
    }
}
