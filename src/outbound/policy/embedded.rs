//! The IPv4 addresses an IPv6 address carries. A transition mechanism reaches the IPv4
//! host it embeds (a NAT64 gateway translates `64:ff9b::7f00:1` to 127.0.0.1, a 6to4
//! relay tunnels to the address in `2002:7f00:1::`), so the receiver policy judges those
//! IPv4 addresses by the same rules as a plain one.
//!
//! The forms, by their prefixes: IPv4-compatible `::/96` (RFC 4291 §2.5.5.1, without `::`
//! and `::1`), IPv4-translated `::ffff:0:0/96` (RFC 2765 §2.1), NAT64 `64:ff9b::/96`
//! (RFC 6052) and `64:ff9b:1::/48` (RFC 8215, with the /48 layout of RFC 6052 §2.2),
//! 6to4 `2002::/16` (RFC 3056 §2) and Teredo `2001::/32` (RFC 4380 §4: server and client).
//! IPv4-mapped addresses (`::ffff:0:0/96`) are not listed here: they are the IPv4 host
//! itself, and the policy judges them as that address.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The transition mechanism an IPv4 address is embedded by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Embedding {
    Compatible,
    Translated,
    Nat64,
    Nat64LocalUse,
    SixToFour,
    TeredoServer,
    TeredoClient,
}

impl fmt::Display for Embedding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Embedding::Compatible => "IPv4-compatible",
            Embedding::Translated => "IPv4-translated",
            Embedding::Nat64 => "NAT64, 64:ff9b::/96",
            Embedding::Nat64LocalUse => "NAT64, 64:ff9b:1::/48",
            Embedding::SixToFour => "6to4",
            Embedding::TeredoServer => "Teredo server",
            Embedding::TeredoClient => "Teredo client",
        })
    }
}

/// Every IPv4 address `v6` embeds (Teredo embeds two), with how; none for other
/// addresses.
pub(super) fn embedded_ipv4(v6: Ipv6Addr) -> Vec<(Embedding, Ipv4Addr)> {
    let o = v6.octets();
    let s = v6.segments();
    let v4 = |bytes: [u8; 4]| Ipv4Addr::from(bytes);
    let tail = v4([o[12], o[13], o[14], o[15]]);
    match s {
        // `::` and `::1` are the IPv6 unspecified and loopback addresses, judged as such.
        [0, 0, 0, 0, 0, 0, _, _] if u128::from(v6) > 1 => vec![(Embedding::Compatible, tail)],
        [0, 0, 0, 0, 0xffff, 0, _, _] => vec![(Embedding::Translated, tail)],
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => vec![(Embedding::Nat64, tail)],
        // RFC 6052 §2.2, prefix length 48: the address fills bits 48..64 and 72..88; bits
        // 64..72 (the "u" octet) stay out of it.
        [0x64, 0xff9b, 1, ..] => vec![(Embedding::Nat64LocalUse, v4([o[6], o[7], o[9], o[10]]))],
        [0x2002, ..] => vec![(Embedding::SixToFour, v4([o[2], o[3], o[4], o[5]]))],
        // The server in bits 32..64; the client in the last 32 bits, inverted.
        [0x2001, 0, ..] => vec![
            (Embedding::TeredoServer, v4([o[4], o[5], o[6], o[7]])),
            (Embedding::TeredoClient, Ipv4Addr::from(!u32::from(tail))),
        ],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedded(v6: &str) -> Vec<(Embedding, Ipv4Addr)> {
        embedded_ipv4(v6.parse().unwrap())
    }

    fn ip(v4: &str) -> Ipv4Addr {
        v4.parse().unwrap()
    }

    #[test]
    fn each_form_gives_the_address_its_rfc_puts_there() {
        assert_eq!(
            embedded("::127.0.0.1"),
            [(Embedding::Compatible, ip("127.0.0.1"))]
        );
        assert_eq!(
            embedded("::ffff:0:10.1.2.3"),
            [(Embedding::Translated, ip("10.1.2.3"))]
        );
        // RFC 6052 §2.4's example address, 192.0.2.33, under the well-known prefix and
        // under a /48 prefix (there `2001:db8:122::/48` → `2001:db8:122:c000:2:2100::`).
        assert_eq!(
            embedded("64:ff9b::192.0.2.33"),
            [(Embedding::Nat64, ip("192.0.2.33"))]
        );
        assert_eq!(
            embedded("64:ff9b:1:c000:2:2100::"),
            [(Embedding::Nat64LocalUse, ip("192.0.2.33"))]
        );
        assert_eq!(
            embedded("2002:7f00:1::"),
            [(Embedding::SixToFour, ip("127.0.0.1"))]
        );
        // RFC 4380's example: server 65.54.227.120, client 192.0.2.45 (`3fff:fdd2`
        // inverted).
        assert_eq!(
            embedded("2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            [
                (Embedding::TeredoServer, ip("65.54.227.120")),
                (Embedding::TeredoClient, ip("192.0.2.45")),
            ]
        );
    }

    #[test]
    fn other_addresses_embed_nothing() {
        for v6 in [
            "::",
            "::1",
            "::ffff:127.0.0.1", // IPv4-mapped: the policy takes it as the IPv4 address
            "64:ff9b:2::7f00:1",
            "2001:db8::7f00:1",
            "2001:1::7f00:1",
            "2606:4700:4700::1111",
            "fe80::1",
        ] {
            assert_eq!(embedded(v6), [], "{v6}");
        }
    }
}
