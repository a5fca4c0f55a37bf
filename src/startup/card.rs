//! The public agent card of this process: the settings, the bound addresses of both
//! bindings, the gate (declared schemes, the extended card) and the skills.

use std::net::SocketAddr;

use serde_json::Value;

use crate::a2a::card::{CardConfig, SkillCard, build_agent_card};
use crate::config::Settings;
use crate::service::auth::Gate;

/// The public card.
pub fn agent_card(
    settings: &Settings,
    http: SocketAddr,
    grpc: Option<SocketAddr>,
    gate: &Gate,
    skills: &[SkillCard],
) -> Value {
    let base_url = if settings.server.public_url.is_empty() {
        format!("http://{http}")
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
        oidc_issuers: gate.oidc_issuers(),
        grpc_url: grpc.map(|addr| grpc_url(settings, addr)),
        extended_card: gate.authenticates(),
        push_notifications: settings.push.enabled,
    };
    build_agent_card(&config, skills)
}

/// The card's `url` of the gRPC interface: `server.grpc_public_address` when set, else
/// the host of `server.public_url` with the bound port, else the bound address.
fn grpc_url(settings: &Settings, bound: SocketAddr) -> String {
    let configured = settings.server.grpc_public_address.trim();
    if !configured.is_empty() {
        return configured.to_owned();
    }
    // `host_str` keeps an IPv6 literal's brackets, as `host:port` needs them.
    let public = reqwest::Url::parse(settings.server.public_url.trim()).ok();
    let host = public.as_ref().and_then(reqwest::Url::host_str);
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
