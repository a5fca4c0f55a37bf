//! What every handler shares: the runtime, the settings it needs, and the prebuilt agent
//! card with its caching headers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use metrics_exporter_prometheus::PrometheusHandle;
use sha2::{Digest, Sha256};

use crate::a2a::card::{CardConfig, SkillCard, build_agent_card};
use crate::config::Settings;
use crate::service::Service;

pub struct AppState {
    /// The operations, and who may call them.
    pub service: Arc<Service>,
    pub card: CachedCard,
    pub max_body_bytes: usize,
    pub keep_alive_secs: u64,
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
        grpc: Option<SocketAddr>,
        service: Arc<Service>,
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
            api_keys: service.gate.accepts_keys(),
            grpc_url: grpc.map(|addr| grpc_url(settings, addr)),
        };
        let body = build_agent_card(&config, skills).to_string();
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
        }
    }
}

/// The card's `url` of the gRPC interface: `server.grpc_public_address` when set, else
/// the host of `server.public_url` with the bound port, else the bound address.
fn grpc_url(settings: &Settings, bound: SocketAddr) -> String {
    let configured = settings.server.grpc_public_address.trim();
    if !configured.is_empty() {
        return configured.to_owned();
    }
    let public = settings.server.public_url.trim();
    let host = public
        .split_once("://")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split(['/', '?', '#']).next())
        .map(|authority| match authority.rsplit_once(':') {
            // `[::1]:8080` and `host:8080` lose their port; a bare `[::1]` keeps its colons.
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => authority,
        })
        .filter(|host| !host.is_empty());
    match host {
        Some(host) => format!("{host}:{}", bound.port()),
        None => bound.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grpc_url_follows_the_public_host_with_the_bound_port() {
        let bound: SocketAddr = "0.0.0.0:8081".parse().unwrap();
        let mut s = Settings::default();
        assert_eq!(grpc_url(&s, bound), "0.0.0.0:8081");
        s.server.public_url = "https://a2a.example.org:8443/base".into();
        assert_eq!(grpc_url(&s, bound), "a2a.example.org:8081");
        s.server.public_url = "http://[::1]:8080".into();
        assert_eq!(grpc_url(&s, bound), "[::1]:8081");
        s.server.grpc_public_address = "grpc.example.org:443".into();
        assert_eq!(grpc_url(&s, bound), "grpc.example.org:443");
    }
}
