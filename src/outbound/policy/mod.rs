//! Which receivers a push config may name: checked when a config is registered (the
//! URL as written) and again at every delivery (every address the host resolves to,
//! and only those addresses are connected to), so a name that later resolves to an
//! internal address is refused too.
//!
//! Always refused: schemes other than `http`/`https`, credentials in the URL,
//! unspecified and "this network" (0.0.0.0/8), multicast, broadcast, link-local
//! (169.254/16 — where cloud metadata services answer —, fe80::/10), the well-known
//! metadata addresses and names, and
//! anything in `push.deny_hosts`. Refused unless configured: loopback
//! (`push.allow_loopback`) and private networks (`push.allow_private`). With
//! `push.allow_hosts` set, only the hosts it names receive. An IPv6 address that carries
//! an IPv4 one (IPv4-mapped or -compatible, NAT64, 6to4, Teredo: `embedded`) is refused
//! when that IPv4 address would be, since the packets end up there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::Url;

use crate::config::PushSettings;
use crate::error::Error;

mod embedded;

/// How the resolver's refusals begin (the delivery tells them from DNS failures by it).
pub(crate) const POLICY_REFUSAL: &str = "refused by the push policy";

/// Host names of cloud metadata services.
const METADATA_NAMES: &[&str] = &["metadata.google.internal", "metadata", "instance-data"];

/// A host of `push.allow_hosts` / `push.deny_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    Name(String),
    Net(IpNet),
}

impl HostRule {
    fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err("an empty host".into());
        }
        if let Ok(net) = raw.parse::<IpNet>() {
            return Ok(HostRule::Net(net));
        }
        if let Ok(ip) = raw.parse::<IpAddr>() {
            return Ok(HostRule::Net(IpNet::from(ip)));
        }
        if raw.contains(['/', ':', ' ']) {
            return Err(format!(
                "{raw:?} is neither a host name, an IP address nor a CIDR range"
            ));
        }
        Ok(HostRule::Name(
            raw.trim_end_matches('.').to_ascii_lowercase(),
        ))
    }

    fn matches_name(&self, host: &str) -> bool {
        match self {
            HostRule::Name(name) => host == name,
            HostRule::Net(_) => false,
        }
    }

    fn matches_ip(&self, ip: IpAddr) -> bool {
        match self {
            HostRule::Net(net) => net.contains(&ip),
            HostRule::Name(_) => false,
        }
    }
}

/// The receiver policy of `[push]`.
#[derive(Debug, Clone)]
pub struct UrlPolicy {
    allow_loopback: bool,
    allow_private: bool,
    allow: Vec<HostRule>,
    deny: Vec<HostRule>,
}

impl UrlPolicy {
    /// The policy of `settings`; names the key of a host it cannot read.
    pub fn new(settings: &PushSettings) -> Result<Self, String> {
        let rules = |key: &str, hosts: &[String]| {
            hosts
                .iter()
                .map(|h| HostRule::parse(h).map_err(|e| format!("{key}: {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            allow_loopback: settings.allow_loopback,
            allow_private: settings.allow_private,
            allow: rules("push.allow_hosts", &settings.allow_hosts)?,
            deny: rules("push.deny_hosts", &settings.deny_hosts)?,
        })
    }

    /// Checks a URL as a client registers it: scheme, credentials, and the host as
    /// written (a literal address, or a name against the lists). The answer names the
    /// field.
    pub fn check_url(&self, raw: &str) -> Result<Url, Error> {
        let refuse = |why: &str| Error::invalid_params(format!("url: {why}"));
        let url = Url::parse(raw.trim()).map_err(|e| refuse(&format!("not a URL ({e})")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refuse("must be an http or https URL"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refuse(
                "must not carry credentials; use the config's authentication or token",
            ));
        }
        match host_of(&url) {
            None => return Err(refuse("has no host")),
            Some(Host::Name(name)) => self.check_name(name).map_err(|why| refuse(&why))?,
            Some(Host::Ip(ip)) => self.check_ip(ip).map_err(|why| refuse(&why))?,
        }
        Ok(url)
    }

    /// A host name against the lists (its addresses are checked when it is resolved).
    fn check_name(&self, host: &str) -> Result<(), String> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if METADATA_NAMES.contains(&host.as_str()) {
            return Err(format!("{host} is a cloud metadata service"));
        }
        if self.deny.iter().any(|r| r.matches_name(&host)) {
            return Err(format!("{host} is in push.deny_hosts"));
        }
        if (host == "localhost" || host.ends_with(".localhost")) && !self.allow_loopback {
            return Err(format!("{host} is loopback (push.allow_loopback is off)"));
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|r| r.matches_name(&host)) {
            // A name can still be allowed by the range of the addresses it resolves to.
            if !self.allow.iter().any(|r| matches!(r, HostRule::Net(_))) {
                return Err(format!("{host} is not in push.allow_hosts"));
            }
        }
        Ok(())
    }

    /// An address a receiver is reached at: refused when the address itself, or any
    /// IPv4 address it embeds (NAT64, 6to4, Teredo, IPv4-compatible or -translated, see
    /// `embedded`), breaks a rule. The one check of an address, at registration and at
    /// every resolution alike.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), String> {
        let ip = canonical(ip);
        if let Some(why) = self.refusal(ip) {
            return Err(format!("{ip} is {why}"));
        }
        if let IpAddr::V6(v6) = ip {
            for (how, v4) in embedded::embedded_ipv4(v6) {
                if let Some(why) = self.refusal(IpAddr::V4(v4)) {
                    return Err(format!("{ip} embeds {v4} ({how}), which is {why}"));
                }
            }
        }
        Ok(())
    }

    /// Why the rules refuse this one address, if they do.
    fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        if let Some(why) = always_refused(ip) {
            return Some(why);
        }
        if self.deny.iter().any(|r| r.matches_ip(ip)) {
            return Some("in push.deny_hosts");
        }
        if ip.is_loopback() && !self.allow_loopback {
            return Some("loopback (push.allow_loopback is off)");
        }
        if is_private(ip) && !self.allow_private {
            return Some("a private address (push.allow_private is off)");
        }
        None
    }

    /// Whether an address passes `push.allow_hosts` for a URL whose host is `name`.
    fn allowed(&self, name: &str, ip: IpAddr) -> bool {
        self.allow.is_empty()
            || self
                .allow
                .iter()
                .any(|r| r.matches_name(name) || r.matches_ip(canonical(ip)))
    }
}

enum Host<'a> {
    Name(&'a str),
    Ip(IpAddr),
}

/// The URL's host: an address literal (IPv6 in brackets) or a name.
fn host_of(url: &Url) -> Option<Host<'_>> {
    let host = url.host_str().filter(|h| !h.is_empty())?;
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some(match bare.parse::<IpAddr>() {
        Ok(ip) => Host::Ip(ip),
        Err(_) => Host::Name(host),
    })
}

/// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn always_refused(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            if v4.is_unspecified() {
                Some("unspecified")
            } else if v4.octets()[0] == 0 {
                // 0.0.0.0/8: Linux connects 0.x.y.z to the host itself.
                Some("\"this network\" (0.0.0.0/8)")
            } else if v4.is_link_local() {
                Some("link-local (cloud metadata services answer there)")
            } else if v4.is_multicast() || v4.is_broadcast() {
                Some("multicast or broadcast")
            } else if v4 == Ipv4Addr::new(100, 100, 100, 200) {
                Some("a cloud metadata service")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if v6.is_unspecified() {
                Some("unspecified")
            } else if (v6.segments()[0] & 0xffc0) == 0xfe80 {
                Some("link-local")
            } else if v6.is_multicast() {
                Some("multicast")
            } else if v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
                Some("a cloud metadata service")
            } else {
                None
            }
        }
    }
}

fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private() || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => (v6.segments()[0] & 0xfe00) == 0xfc00,
    }
}

/// The delivery client's resolver: a name resolves only to the addresses the policy
/// allows, so the connection goes to an address that was checked (no second lookup
/// that could answer differently).
pub(crate) struct CheckedResolver {
    pub policy: Arc<UrlPolicy>,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            policy
                .check_name(&host)
                .map_err(|why| boxed(format!("{POLICY_REFUSAL}: {why}")))?;
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| boxed(format!("{host}: {e}")))?
                .collect();
            let mut refusals = Vec::new();
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check_ip(a.ip()) {
                    Ok(()) if policy.allowed(&host, a.ip()) => true,
                    Ok(()) => {
                        refusals.push(format!("{} is not in push.allow_hosts", a.ip()));
                        false
                    }
                    Err(why) => {
                        refusals.push(why);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                return Err(boxed(format!(
                    "{POLICY_REFUSAL}: {host} has no address it allows ({})",
                    refusals.join("; ")
                )));
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Why a delivery's URL is refused at delivery time, if it is: the checks of
/// registration, plus `push.allow_hosts` for a literal address (names are checked by
/// [`CheckedResolver`] as they resolve).
pub(crate) fn refused_at_delivery(policy: &UrlPolicy, url: &str) -> Option<String> {
    let parsed = match policy.check_url(url) {
        Ok(u) => u,
        Err(e) => return Some(e.client_message()),
    };
    let Some(Host::Ip(ip)) = host_of(&parsed) else {
        return None;
    };
    (!policy.allowed(&ip.to_string(), ip)).then(|| format!("{ip} is not in push.allow_hosts"))
}

fn boxed(why: String) -> Box<dyn std::error::Error + Send + Sync> {
    why.into()
}

#[cfg(test)]
mod tests;
