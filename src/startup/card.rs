//! The public agent card of this process: the settings, the bound addresses of both
//! bindings, the gate (declared schemes, the extended card) and the skills.

use std::net::SocketAddr;
use std::sync::Arc;

use super::StartError;
use crate::a2a::card::CardConfig;
use crate::a2a::signing::CardSigner;
use crate::config::{CardSigningSettings, Settings};
use crate::service::auth::Gate;

/// The signer of `[agent.card_signing]`, when a key is configured: the key read from its
/// file or the setting, and tried once, so that a key that cannot sign stops the start.
pub fn signer(settings: &CardSigningSettings) -> Result<Option<Arc<CardSigner>>, StartError> {
    if !settings.enabled() {
        return Ok(None);
    }
    let algorithm = settings.algorithm()?;
    let pem = if settings.key_file.is_empty() {
        settings.key_pem.clone().into_bytes()
    } else {
        std::fs::read(&settings.key_file).map_err(|e| {
            StartError::CardSigning(format!(
                "cannot read `agent.card_signing.key_file` {:?}: {e}",
                settings.key_file
            ))
        })?
    };
    let jku = (!settings.jku.is_empty()).then_some(settings.jku.as_str());
    let signer = CardSigner::new(algorithm, &pem, &settings.kid, jku)
        .map_err(|e| StartError::CardSigning(e.to_string()))?;
    Ok(Some(Arc::new(signer)))
}

/// What the public card says of this process, whatever its skills.
pub fn card_config(
    settings: &Settings,
    http: SocketAddr,
    grpc: Option<SocketAddr>,
    gate: &Gate,
) -> CardConfig {
    let base_url = if settings.server.public_url.is_empty() {
        format!("http://{http}")
    } else {
        settings.server.public_url.trim_end_matches('/').to_owned()
    };
    let agent = &settings.agent;
    CardConfig {
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
    }
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

    fn fixture(name: &str) -> String {
        format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    #[test]
    fn a_signing_key_that_cannot_be_read_or_cannot_sign_stops_the_start() {
        let mut s = CardSigningSettings {
            kid: "k".into(),
            ..CardSigningSettings::default()
        };
        assert!(signer(&s).unwrap().is_none(), "no key: no signing");

        s.key_file = fixture("test-only-es256-a.pem");
        assert!(signer(&s).unwrap().is_some());

        s.key_file = fixture("no-such-key.pem");
        let e = signer(&s).unwrap_err().to_string();
        assert!(
            e.contains("agent.card_signing.key_file") && e.contains("no-such-key"),
            "{e}"
        );

        // An RSA key named ES256, a P-384 key named ES256.
        for (file, algorithm) in [
            ("test-only-rs256.pem", "ES256"),
            ("test-only-es384.pem", "ES256"),
        ] {
            s.key_file = fixture(file);
            s.algorithm = algorithm.into();
            let e = signer(&s).unwrap_err().to_string();
            assert!(
                e.starts_with("cannot sign the agent card: card signing key"),
                "{file}: {e}"
            );
        }
    }
}
