//! The client's address, as far as it can be believed.
//!
//! Behind a load balancer every connection comes from the balancer, so the failed-
//! authentication budget (`auth.failures_per_minute`), the logs and the traces would
//! see one client: anyone sending bad keys would get every client of the node refused.
//! The proxies named in `server.trusted_proxies` (addresses or CIDRs) may say who the
//! client is, in two ways, on both bindings:
//!
//! - the **PROXY protocol v2** header HAProxy sends first on a connection
//!   (`send-proxy-v2`), read from trusted peers only and before any HTTP byte
//!   ([`read_proxy_header`]); a `LOCAL` header (a health check) names no client;
//! - the **`Forwarded`** (RFC 7239, its `for=` parameters) or, without it,
//!   **`X-Forwarded-For`** header (gRPC: metadata) of a request.
//!
//! [`TrustedProxies::client`] walks the hops from the connection's peer towards the
//! client and stops at the first address that is not a trusted proxy: the rightmost
//! untrusted hop. A client cannot forge its way past that: whatever it puts in the
//! headers lies to the left of the hop that reached the first trusted proxy. With no
//! trusted proxies the client is the peer, and nothing is read or parsed.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;
use tokio::net::TcpStream;

/// The first twelve bytes of every PROXY protocol v2 header; no HTTP/1 request and no
/// HTTP/2 preface begins with them.
const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The largest PROXY header read (addresses and TLVs); HAProxy's are far smaller.
const MAX_HEADER_BYTES: usize = 4096;

/// `server.trusted_proxies`: the peers whose word on the client's address is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// Parses addresses (`10.0.0.5`, `::1`) and networks (`10.0.0.0/8`); the error names
    /// the entry.
    pub fn new(entries: &[String]) -> Result<Self, String> {
        let nets = entries
            .iter()
            .map(|entry| {
                let entry = entry.trim();
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("{entry:?} is neither an IP address nor a CIDR network"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { nets })
    }

    /// Whether there are any (with none, the client is always the peer).
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is a trusted proxy (an IPv4-mapped IPv6 address as its IPv4 one).
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// The client of a request that reached this server from `peer`, through the
    /// connection's PROXY header (`proxied`, read from a trusted peer only) and the
    /// request's `Forwarded` / `X-Forwarded-For` values (every header line, in order):
    /// the rightmost hop that is not a trusted proxy.
    pub fn client(
        &self,
        peer: IpAddr,
        proxied: Option<IpAddr>,
        forwarded: &[&str],
        x_forwarded_for: &[&str],
    ) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.trusts(client) {
            return client;
        }
        if let Some(proxied) = proxied {
            client = proxied.to_canonical();
            if !self.trusts(client) {
                return client;
            }
        }
        // RFC 7239 first: a proxy that speaks it is the more recent one.
        let hops: Vec<IpAddr> = if forwarded.is_empty() {
            x_forwarded_for
                .iter()
                .flat_map(|line| line.split(','))
                .map(|hop| parse_node(hop.trim()))
                .collect::<Option<_>>()
                .unwrap_or_default()
        } else {
            forwarded
                .iter()
                .flat_map(|line| line.split(','))
                .map(forwarded_for)
                .collect::<Option<_>>()
                .unwrap_or_default()
        };
        // A hop that cannot be read ends the walk where it stands: what lies beyond it
        // was written by whoever wrote the garbage.
        for hop in hops.into_iter().rev() {
            client = hop.to_canonical();
            if !self.trusts(client) {
                return client;
            }
        }
        client
    }
}

/// The `for=` node of one `Forwarded` element; `None` when it has none or it is not an
/// IP address (`unknown`, an obfuscated name).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| parse_node(value.trim().trim_matches('"')))
            .flatten()
    })
}

/// An address as proxies write it: `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:5678`.
fn parse_node(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(socket) = node.parse::<SocketAddr>() {
        return Some(socket.ip());
    }
    node.strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|ip| ip.parse::<std::net::Ipv6Addr>().ok())
        .map(IpAddr::V6)
}

/// Reads the PROXY protocol v2 header a trusted proxy sent at the start of `stream`,
/// leaving the stream at the first byte after it: the client's address, or `None` when
/// the peer is not trusted (nothing is read), sent no header (nothing is consumed), or
/// sent a `LOCAL` one or one without an IP source (a health check). A header that does
/// not parse, or does not arrive within `timeout`, is an error: the connection is
/// dropped.
pub async fn read_proxy_header(
    stream: &mut TcpStream,
    trusted: &TrustedProxies,
    timeout: Duration,
) -> io::Result<Option<SocketAddr>> {
    let peer = stream.peer_addr()?;
    if !trusted.trusts(peer.ip()) {
        return Ok(None);
    }
    match tokio::time::timeout(timeout, read_header(stream)).await {
        Ok(read) => read,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no PROXY header or request within server.proxy_header_timeout_ms",
        )),
    }
}

async fn read_header(stream: &mut TcpStream) -> io::Result<Option<SocketAddr>> {
    use tokio::io::AsyncReadExt;
    // Peek until the first bytes tell a PROXY header from a request (HAProxy sends the
    // header in one segment, so this is one call; a trickle waits a millisecond a step).
    let mut start = [0u8; 16];
    loop {
        let n = stream.peek(&mut start).await?;
        let seen = n.min(SIGNATURE.len());
        if n == 0 || start[..seen] != SIGNATURE[..seen] {
            return Ok(None);
        }
        if n == start.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let length = usize::from(u16::from_be_bytes([start[14], start[15]]));
    if length > MAX_HEADER_BYTES {
        return Err(invalid(format!("a PROXY header of {length} bytes")));
    }
    let mut header = vec![0u8; start.len() + length];
    stream.read_exact(&mut header).await?;
    let parsed = ppp::v2::Header::try_from(header.as_slice())
        .map_err(|e| invalid(format!("a PROXY header that does not parse: {e}")))?;
    if parsed.command == ppp::v2::Command::Local {
        return Ok(None);
    }
    Ok(match parsed.addresses {
        ppp::v2::Addresses::IPv4(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
        ppp::v2::Addresses::IPv6(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
        ppp::v2::Addresses::Unspecified | ppp::v2::Addresses::Unix(_) => None,
    })
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(entries: &[&str]) -> TrustedProxies {
        TrustedProxies::new(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_are_addresses_or_networks() {
        let p = proxies(&["10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1"]);
        for trusted in [
            "10.1.2.3",
            "192.0.2.7",
            "2001:db8::5",
            "::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(p.trusts(ip(trusted)), "{trusted}");
        }
        for not in ["11.0.0.1", "192.0.2.8", "2001:db9::1", "127.0.0.1"] {
            assert!(!p.trusts(ip(not)), "{not}");
        }
        let e = TrustedProxies::new(&["10.0.0.0/33".into()]).unwrap_err();
        assert!(e.contains("10.0.0.0/33"), "{e}");
        assert!(TrustedProxies::new(&["proxy.local".into()]).is_err());
    }

    #[test]
    fn the_client_is_the_rightmost_untrusted_hop() {
        let p = proxies(&["10.0.0.0/8"]);
        // (peer, PROXY source, Forwarded lines, X-Forwarded-For lines, client)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            &'a [&'a str],
            &'a [&'a str],
            &'a str,
        );
        let cases: &[Case] = &[
            // Not from a proxy: whatever the headers say.
            ("198.51.100.1", None, &[], &["203.0.113.9"], "198.51.100.1"),
            (
                "198.51.100.1",
                None,
                &["for=203.0.113.9"],
                &[],
                "198.51.100.1",
            ),
            // From a proxy, no word on the client: the proxy.
            ("10.0.0.2", None, &[], &[], "10.0.0.2"),
            // The PROXY header names the client.
            (
                "10.0.0.2",
                Some("203.0.113.9"),
                &[],
                &["192.0.2.1"],
                "203.0.113.9",
            ),
            // ... or another trusted proxy, whose headers are then believed.
            (
                "10.0.0.2",
                Some("10.0.0.3"),
                &[],
                &["192.0.2.1"],
                "192.0.2.1",
            ),
            // X-Forwarded-For: the rightmost untrusted, past the client's own forgeries.
            (
                "10.0.0.2",
                None,
                &[],
                &["6.6.6.6, 203.0.113.9"],
                "203.0.113.9",
            ),
            (
                "10.0.0.2",
                None,
                &[],
                &["6.6.6.6", "203.0.113.9, 10.0.0.7"],
                "203.0.113.9",
            ),
            ("10.0.0.2", None, &[], &["203.0.113.9:4711"], "203.0.113.9"),
            (
                "10.0.0.2",
                None,
                &[],
                &["[2001:db8::9]:4711"],
                "2001:db8::9",
            ),
            // Every hop trusted: the leftmost.
            ("10.0.0.2", None, &[], &["10.9.9.9, 10.0.0.7"], "10.9.9.9"),
            // Forwarded is preferred, its for= in any case and quoted.
            (
                "10.0.0.2",
                None,
                &["for=6.6.6.6, For=\"[2001:db8::9]:80\";proto=http"],
                &["192.0.2.1"],
                "2001:db8::9",
            ),
            (
                "10.0.0.2",
                None,
                &["proto=https;for=203.0.113.9"],
                &[],
                "203.0.113.9",
            ),
            // Garbage in the chain: nothing of it is believed.
            (
                "10.0.0.2",
                None,
                &[],
                &["203.0.113.9, nonsense"],
                "10.0.0.2",
            ),
            ("10.0.0.2", None, &["for=unknown"], &[], "10.0.0.2"),
        ];
        for (peer, proxied, forwarded, xff, client) in cases {
            assert_eq!(
                p.client(ip(peer), proxied.map(ip), forwarded, xff),
                ip(client),
                "peer {peer}, PROXY {proxied:?}, Forwarded {forwarded:?}, X-Forwarded-For {xff:?}"
            );
        }
        // No trusted proxies: always the peer.
        assert_eq!(
            TrustedProxies::default().client(ip("10.0.0.2"), None, &[], &["203.0.113.9"]),
            ip("10.0.0.2")
        );
    }

    /// A connected pair: the server's end and the client's.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (accepted.unwrap().0, client.unwrap())
    }

    async fn read_after(
        bytes: &[u8],
        trusted: &[&str],
    ) -> (io::Result<Option<SocketAddr>>, Vec<u8>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut server, mut client) = pair().await;
        client.write_all(bytes).await.unwrap();
        client.shutdown().await.unwrap();
        let read = read_proxy_header(&mut server, &proxies(trusted), Duration::from_secs(5)).await;
        let mut rest = Vec::new();
        server.read_to_end(&mut rest).await.unwrap();
        (read, rest)
    }

    fn v2(addresses: ppp::v2::Addresses, command: ppp::v2::Command) -> Vec<u8> {
        ppp::v2::Builder::with_addresses(
            ppp::v2::Version::Two | command,
            ppp::v2::Protocol::Stream,
            addresses,
        )
        .build()
        .unwrap()
    }

    #[tokio::test]
    async fn a_trusted_peer_s_proxy_header_is_read_and_the_request_left_intact() {
        let source: SocketAddr = "203.0.113.9:4711".parse().unwrap();
        let target: SocketAddr = "10.0.0.1:8080".parse().unwrap();
        let mut bytes = v2((source, target).into(), ppp::v2::Command::Proxy);
        bytes.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let (read, rest) = read_after(&bytes, &["127.0.0.1"]).await;
        assert_eq!(read.unwrap(), Some(source));
        assert_eq!(rest, b"GET / HTTP/1.1\r\n\r\n");

        let v6: SocketAddr = "[2001:db8::9]:4711".parse().unwrap();
        let (read, _) = read_after(
            &v2(
                (v6, "[2001:db8::1]:80".parse::<SocketAddr>().unwrap()).into(),
                ppp::v2::Command::Proxy,
            ),
            &["127.0.0.1"],
        )
        .await;
        assert_eq!(read.unwrap(), Some(v6));

        // A health check's LOCAL header names nobody, and is consumed.
        let mut local = v2(ppp::v2::Addresses::Unspecified, ppp::v2::Command::Local);
        local.extend_from_slice(b"GET /health/ready HTTP/1.1\r\n\r\n");
        let (read, rest) = read_after(&local, &["127.0.0.1"]).await;
        assert_eq!(read.unwrap(), None);
        assert_eq!(rest, b"GET /health/ready HTTP/1.1\r\n\r\n");
    }

    #[tokio::test]
    async fn without_a_header_or_trust_nothing_is_consumed_and_a_bad_header_is_refused() {
        let (read, rest) = read_after(b"POST / HTTP/1.1\r\n\r\n", &["127.0.0.1"]).await;
        assert_eq!(read.unwrap(), None);
        assert_eq!(rest, b"POST / HTTP/1.1\r\n\r\n");
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let (read, rest) = read_after(preface, &["127.0.0.1"]).await;
        assert_eq!(read.unwrap(), None);
        assert_eq!(rest, preface);

        // From a peer that is not trusted, a header is not read: it stays, and the HTTP
        // layer refuses it as the garbage it is there.
        let source: SocketAddr = "203.0.113.9:4711".parse().unwrap();
        let header = v2((source, source).into(), ppp::v2::Command::Proxy);
        let (read, rest) = read_after(&header, &["10.0.0.0/8"]).await;
        assert_eq!(read.unwrap(), None);
        assert_eq!(rest, header);

        // The signature, then nonsense.
        let mut bad = SIGNATURE.to_vec();
        bad.extend_from_slice(&[0x2f, 0x11, 0x00, 0x0c]);
        bad.extend_from_slice(&[0; 12]);
        let (read, _) = read_after(&bad, &["127.0.0.1"]).await;
        assert!(read.is_err());
        // The signature and a header that never ends (the peer closed).
        let mut short = SIGNATURE.to_vec();
        short.extend_from_slice(&[0x21, 0x11, 0x00, 0x0c, 1, 2]);
        let (read, _) = read_after(&short, &["127.0.0.1"]).await;
        assert!(read.is_err());
    }
}
