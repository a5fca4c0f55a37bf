//! The receiver policy against every kind of address and URL it judges.

use super::*;

fn policy(f: impl FnOnce(&mut PushSettings)) -> UrlPolicy {
    let mut s = PushSettings::default();
    f(&mut s);
    UrlPolicy::new(&s).expect("a valid policy")
}

#[test]
fn the_defaults_refuse_loopback_link_local_metadata_and_credentials() {
    let p = policy(|_| {});
    for bad in [
        "ftp://example.org/x",
        "http://user:pw@example.org/hook",
        "http://127.0.0.1:8080/hook",
        "http://[::1]/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[fe80::1]/x",
        "http://[::ffff:169.254.169.254]/x",
        "http://metadata.google.internal/computeMetadata/v1",
        "http://0.0.0.0/x",
        "http://0.0.0.1/x",
        "http://0.255.1.2:8080/x",
        "http://[::ffff:0.0.0.1]/x",
        "http://224.0.0.1/x",
        "not a url",
    ] {
        let e = p.check_url(bad).expect_err(bad);
        assert!(
            matches!(e, Error::InvalidParams(ref m) if m.starts_with("url:")),
            "{bad}: {e:?}"
        );
    }
    for good in [
        "https://example.org/hook",
        "http://10.1.2.3:8080/hook",
        "http://192.168.1.10/hook",
    ] {
        p.check_url(good).expect(good);
    }
}

#[test]
fn loopback_and_private_follow_their_switches() {
    let p = policy(|s| {
        s.allow_loopback = true;
        s.allow_private = false;
    });
    p.check_url("http://127.0.0.1:9/hook")
        .expect("loopback allowed");
    p.check_url("http://localhost:9/hook")
        .expect("localhost allowed");
    assert!(p.check_url("http://10.0.0.1/hook").is_err());
    assert!(p.check_url("http://100.64.0.1/hook").is_err());
    assert!(p.check_url("http://[fd00::1]/hook").is_err());
    // Link-local stays refused whatever the switches say.
    assert!(p.check_url("http://169.254.1.1/hook").is_err());
}

/// `v4` in every IPv6 form that carries an IPv4 address, written out per its RFC
/// (Teredo twice: as the server, and as the client beside a public server).
fn embeddings(v4: Ipv4Addr) -> Vec<(&'static str, Ipv6Addr)> {
    let [a, b, c, d] = v4.octets();
    let [na, nb, nc, nd] = (!u32::from(v4)).to_be_bytes();
    let public_client = !u32::from(Ipv4Addr::new(8, 8, 8, 8));
    let [pa, pb, pc, pd] = public_client.to_be_bytes();
    let v6 = |bytes: [u8; 16]| Ipv6Addr::from(bytes);
    vec![
        (
            "IPv4-mapped",
            v6([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d]),
        ),
        (
            "IPv4-compatible",
            v6([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, a, b, c, d]),
        ),
        (
            "IPv4-translated",
            v6([0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, a, b, c, d]),
        ),
        (
            "NAT64 /96",
            v6([0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, a, b, c, d]),
        ),
        (
            "NAT64 local /48",
            v6([0, 0x64, 0xff, 0x9b, 0, 1, a, b, 0, c, d, 0, 0, 0, 0, 0]),
        ),
        (
            "6to4",
            v6([0x20, 0x02, a, b, c, d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        ),
        (
            "Teredo server",
            v6([0x20, 0x01, 0, 0, a, b, c, d, 0, 0, 0, 0, pa, pb, pc, pd]),
        ),
        (
            "Teredo client",
            v6([0x20, 0x01, 0, 0, 8, 8, 4, 4, 0, 0, 0, 0, na, nb, nc, nd]),
        ),
    ]
}

#[test]
fn ipv6_forms_that_embed_an_ipv4_address_are_judged_by_it() {
    let strict = policy(|s| {
        s.allow_loopback = false;
        s.allow_private = false;
    });
    let defaults = policy(|_| {});
    let loose = policy(|s| {
        s.allow_loopback = true;
        s.allow_private = true;
    });
    // (address, refused with both switches off, refused by default, refused with both on)
    let table = [
        ("127.0.0.1", "loopback", true, true, false),
        ("127.1.2.3", "loopback", true, true, false),
        ("169.254.169.254", "link-local", true, true, true),
        ("100.100.100.200", "metadata", true, true, true),
        ("10.0.0.1", "private", true, false, false),
        ("172.16.0.1", "private", true, false, false),
        ("172.31.255.254", "private", true, false, false),
        ("192.168.1.1", "private", true, false, false),
        ("100.64.0.1", "private", true, false, false),
        ("8.8.8.8", "", false, false, false),
        ("203.0.113.9", "", false, false, false),
    ];
    for (v4, why, strictly, by_default, loosely) in table {
        let v4: Ipv4Addr = v4.parse().unwrap();
        for (form, v6) in embeddings(v4) {
            let ip = IpAddr::V6(v6);
            for (p, refused, name) in [
                (&strict, strictly, "strict"),
                (&defaults, by_default, "default"),
                (&loose, loosely, "loose"),
            ] {
                let answer = p.check_ip(ip);
                assert_eq!(
                    answer.is_err(),
                    refused,
                    "{v4} as {form} ({v6}), {name}: {answer:?}"
                );
                if let Err(text) = answer {
                    assert!(text.contains(why), "{v4} as {form}, {name}: {text}");
                }
                // The URL as registered, and at delivery, say the same.
                let url = format!("http://[{v6}]:8080/hook");
                assert_eq!(p.check_url(&url).is_err(), refused, "{url}, {name}");
                assert_eq!(
                    refused_at_delivery(p, &url).is_some(),
                    refused,
                    "{url}, {name}"
                );
            }
        }
    }
    for url in [
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://[2002:7f00:1::]/",
        "http://[64:ff9b:1:7f00:0:100::]/",
    ] {
        let e = defaults.check_url(url).expect_err(url).client_message();
        assert!(
            e.contains("127.0.0.1") && e.contains("loopback"),
            "{url}: {e}"
        );
    }
}

#[actix_web::test]
async fn the_delivery_resolver_refuses_a_name_for_an_embedded_address() {
    use reqwest::dns::Resolve;
    let resolver = CheckedResolver {
        policy: Arc::new(policy(|_| {})),
    };
    // The system lookup answers an address literal with itself.
    let resolve = |host: &str| resolver.resolve(host.parse().expect("a name"));
    for host in ["64:ff9b::7f00:1", "2002:a9fe:a9fe::", "::127.0.0.1"] {
        let e = resolve(host).await.err().expect(host).to_string();
        assert!(e.starts_with(POLICY_REFUSAL), "{host}: {e}");
    }
    let found: Vec<SocketAddr> = resolve("2002:808:808::").await.expect("public").collect();
    assert_eq!(found.len(), 1);
}

#[test]
fn allow_and_deny_lists_take_names_addresses_and_ranges() {
    let p = policy(|s| {
        s.allow_hosts = vec!["hooks.example.org".into(), "203.0.113.0/24".into()];
        s.deny_hosts = vec!["203.0.113.66".into(), "evil.example.org".into()];
    });
    p.check_url("https://hooks.example.org/x")
        .expect("named host");
    p.check_url("https://203.0.113.5/x").expect("in the range");
    assert!(p.check_url("https://203.0.113.66/x").is_err());
    assert!(p.check_url("https://evil.example.org/x").is_err());
    assert!(refused_at_delivery(&p, "https://198.51.100.1/x").is_some());
    assert!(refused_at_delivery(&p, "https://203.0.113.5/x").is_none());
    assert!(
        UrlPolicy::new(&PushSettings {
            deny_hosts: vec!["not a host/".into()],
            ..PushSettings::default()
        })
        .is_err()
    );
}
