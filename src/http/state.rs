//! What every handler shares: the runtime, the settings it needs, and the prebuilt agent
//! card with its caching headers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use metrics_exporter_prometheus::PrometheusHandle;
use sha2::{Digest, Sha256};

use crate::a2a::card::{CardConfig, SkillCard, build_agent_card};
use crate::config::Settings;
use crate::http::auth::Gate;
use crate::runtime::Runtime;

pub struct AppState {
    pub runtime: Arc<Runtime>,
    /// Authentication and rate limits of the A2A endpoints.
    pub gate: Arc<Gate>,
    pub card: CachedCard,
    pub max_body_bytes: usize,
    pub keep_alive_secs: u64,
    pub retry_after_secs: u64,
    pub input_modes: Vec<String>,
    pub metrics: PrometheusHandle,
}

/// The agent card, serialized once, with its validators.
pub struct CachedCard {
    pub body: String,
    pub etag: String,
    pub last_modified: SystemTime,
    pub max_age_secs: u64,
}

impl AppState {
    pub fn new(
        settings: &Settings,
        bound: SocketAddr,
        runtime: Arc<Runtime>,
        gate: Arc<Gate>,
        skills: &[SkillCard],
        metrics: PrometheusHandle,
    ) -> Self {
        let base_url = if settings.server.public_url.is_empty() {
            format!("http://{bound}")
        } else {
            settings.server.public_url.trim_end_matches('/').to_owned()
        };
        let agent = &settings.agent;
        let config = CardConfig {
            name: agent.name.clone(),
            description: agent.description.clone(),
            version: agent.version.clone(),
            base_url,
            provider: (!agent.provider_organization.is_empty()).then(|| {
                (
                    agent.provider_organization.clone(),
                    agent.provider_url.clone(),
                )
            }),
            documentation_url: (!agent.documentation_url.is_empty())
                .then(|| agent.documentation_url.clone()),
            input_modes: agent.input_modes.clone(),
            output_modes: agent.output_modes.clone(),
            v03_fields: agent.card_v03_fields,
            api_keys: gate.accepts_keys(),
        };
        let body = build_agent_card(&config, skills).to_string();
        let etag = format!("\"{:x}\"", Sha256::digest(body.as_bytes()));
        Self {
            runtime,
            gate,
            card: CachedCard {
                body,
                etag,
                last_modified: SystemTime::now(),
                max_age_secs: settings.server.card_max_age_secs,
            },
            max_body_bytes: settings.server.max_body_bytes,
            keep_alive_secs: settings.streaming.keep_alive_secs,
            retry_after_secs: settings.server.retry_after_secs,
            input_modes: agent.input_modes.clone(),
            metrics,
        }
    }
}
