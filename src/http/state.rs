//! What every handler shares: the service and the settings it needs.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use sha2::{Digest, Sha256};

use crate::config::Settings;
use crate::service::Service;

pub struct AppState {
    /// The operations, and who may call them.
    pub service: Arc<Service>,
    /// The card's `Cache-Control: max-age` (`server.card_max_age_secs`).
    pub card_max_age_secs: u64,
    pub max_body_bytes: usize,
    pub keep_alive_secs: u64,
    pub metrics: PrometheusHandle,
    /// SHA-256 of `metrics.bearer_token`, when `/metrics` needs it.
    pub metrics_token: Option<[u8; 32]>,
}

impl AppState {
    /// The state over `service`.
    pub fn new(settings: &Settings, service: Arc<Service>, metrics: PrometheusHandle) -> Self {
        Self {
            service,
            card_max_age_secs: settings.server.card_max_age_secs,
            max_body_bytes: settings.server.max_body_bytes,
            keep_alive_secs: settings.streaming.keep_alive_secs,
            metrics,
            metrics_token: (!settings.metrics.bearer_token.is_empty())
                .then(|| Sha256::digest(settings.metrics.bearer_token.as_bytes()).into()),
        }
    }
}
