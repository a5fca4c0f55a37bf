//! The checks of each group of sections: every bound and every cross-reference refused
//! with an error naming its key.

use super::*;
use super::{OLLAMA, load, with_file};

#[test]
fn cluster_mode_needs_postgres_a_secret_and_a_heartbeat_inside_the_lease() {
    let base = [
        ("AGENT_A2A__CLUSTER__ENABLED", "true"),
        ("DATABASE_URL", "postgres://postgres@127.0.0.1/a2a"),
        ("AGENT_A2A__CLUSTER__SECRET", "sixteen-chars-ok"),
    ];
    let s = load(&base, Overrides::default()).unwrap();
    assert!(s.cluster.enabled);
    let refused = |extra: &[(&str, &str)], key: &str| {
        let mut env: Vec<(&str, &str)> = base.to_vec();
        env.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        env.extend_from_slice(extra);
        let e = load(&env, Overrides::default()).unwrap_err().to_string();
        assert!(e.contains(key), "{extra:?}: {e}");
    };
    refused(&[("DATABASE_URL", "")], "cluster.enabled");
    refused(&[("AGENT_A2A__CLUSTER__SECRET", "short")], "cluster.secret");
    refused(
        &[("AGENT_A2A__CLUSTER__NODE_ID", "a node")],
        "cluster.node_id",
    );
    refused(
        &[("AGENT_A2A__CLUSTER__ADVERTISE_URL", "10.0.0.5:8080")],
        "cluster.advertise_url",
    );
    refused(
        &[("AGENT_A2A__SERVER__BIND", "0.0.0.0:8080")],
        "cluster.advertise_url",
    );
    refused(
        &[("AGENT_A2A__CLUSTER__LEASE_TTL_MS", "999")],
        "cluster.lease_ttl_ms",
    );
    refused(
        &[("AGENT_A2A__CLUSTER__HEARTBEAT_MS", "0")],
        "cluster.heartbeat_ms",
    );
    refused(
        &[
            ("AGENT_A2A__CLUSTER__LEASE_TTL_MS", "3000"),
            ("AGENT_A2A__CLUSTER__HEARTBEAT_MS", "1001"),
        ],
        "cluster.heartbeat_ms",
    );
    refused(
        &[("AGENT_A2A__CLUSTER__FORWARD_TIMEOUT_SECS", "0")],
        "cluster.forward_timeout_secs",
    );
    for dead_after in ["1999", "60001"] {
        refused(
            &[("AGENT_A2A__CLUSTER__PEER_DEAD_AFTER_MS", dead_after)],
            "cluster.peer_dead_after_ms",
        );
    }
    refused(
        &[("AGENT_A2A__CLUSTER__STREAM_POLL_MS", "0")],
        "cluster.stream_poll_ms",
    );
    refused(
        &[("AGENT_A2A__CLUSTER__DRAIN_NOTICE_MS", "60001")],
        "cluster.drain_notice_ms",
    );
}

#[test]
fn the_grpc_binding_is_on_by_default_and_checked() {
    let s = load(&[], Overrides::default()).unwrap();
    assert_eq!(
        s.server.grpc_bind_addr().unwrap(),
        Some("127.0.0.1:8081".parse().unwrap())
    );
    let off = Overrides {
        grpc_bind: Some(String::new()),
        ..Default::default()
    };
    assert_eq!(
        load(&[], off).unwrap().server.grpc_bind_addr().unwrap(),
        None
    );
    let e = load(
        &[("AGENT_A2A__SERVER__GRPC_BIND", "nowhere")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("server.grpc_bind"), "{e}");
    for bad in ["http://h:1", "h", ":1", "h:port"] {
        let e = load(
            &[("AGENT_A2A__SERVER__GRPC_PUBLIC_ADDRESS", bad)],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("server.grpc_public_address"), "{bad}: {e}");
    }
    let s = load(
        &[(
            "AGENT_A2A__SERVER__GRPC_PUBLIC_ADDRESS",
            "a2a.example.org:443",
        )],
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(s.server.grpc_public_address, "a2a.example.org:443");
    let e = load(
        &[("AGENT_A2A__SERVER__GRPC_MAX_STREAMS_PER_CONNECTION", "0")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("server.grpc_max_streams_per_connection"), "{e}");
}

#[test]
fn progress_goes_out_at_most_once_a_second_by_default_and_at_least_once_a_minute() {
    let s = load(&[], Overrides::default()).unwrap();
    assert_eq!(s.streaming.progress_interval_ms, 1000);
    let off = load(
        &[("AGENT_A2A__STREAMING__PROGRESS_INTERVAL_MS", "0")],
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(off.streaming.progress_interval_ms, 0);
    let e = load(
        &[("AGENT_A2A__STREAMING__PROGRESS_INTERVAL_MS", "60001")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("streaming.progress_interval_ms"), "{e}");
}

#[test]
fn trusted_proxies_are_addresses_or_networks_and_the_header_wait_is_bounded() {
    let s = load(
        &[(
            "AGENT_A2A__SERVER__TRUSTED_PROXIES",
            "[\"10.0.0.0/8\", \"2001:db8::1\"]",
        )],
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(s.server.trusted_proxies, ["10.0.0.0/8", "2001:db8::1"]);
    let e = load(
        &[("AGENT_A2A__SERVER__TRUSTED_PROXIES", "[\"haproxy\"]")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("server.trusted_proxies") && e.contains("\"haproxy\" is neither"),
        "{e}"
    );
    for bad in ["0", "60001"] {
        let e = load(
            &[("AGENT_A2A__SERVER__PROXY_HEADER_TIMEOUT_MS", bad)],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`server.proxy_header_timeout_ms` must be from 1 to 60000"),
            "{e}"
        );
    }
}

#[test]
fn failed_authentications_have_a_positive_budget() {
    let e = load(
        &[("AGENT_A2A__AUTH__FAILURES_PER_MINUTE", "0")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("auth.failures_per_minute"), "{e}");
}

#[test]
fn retry_after_is_never_zero() {
    let e = load(
        &[("AGENT_A2A__SERVER__RETRY_AFTER_SECS", "0")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("server.retry_after_secs"), "{e}");
}

#[test]
fn the_answer_timeout_is_never_zero() {
    let e = load(
        &[("AGENT_A2A__STORE__ANSWER_TIMEOUT_MS", "0")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("store.answer_timeout_ms"), "{e}");
}

#[test]
fn the_card_bound_is_never_zero() {
    let e = load(
        &[("AGENT_A2A__SERVER__MAX_CARD_BYTES", "0")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("server.max_card_bytes"), "{e}");
}

#[test]
fn agent_settings_are_checked() {
    let cases = [
        ("[agent]\nprovider = \"nope\"\n", "agent.provider"),
        (
            "[agent]\nrouting_provider = \"nope\"\n",
            "agent.routing_provider",
        ),
        (
            "[agent]\nrouting_tool_choice = \"\"\n",
            "agent.routing_tool_choice",
        ),
        (
            "[agent]\nrouting_tool_choice = \"memory add\"\n",
            "agent.routing_tool_choice",
        ),
        ("[agent]\nmax_turns = 0\n", "agent.max_turns"),
        ("[agent]\ntool_timeout_ms = 0\n", "agent.tool_timeout_ms"),
        (
            "[[agent.sub_agents]]\nname = \"billing\"\n",
            "agent \"billing\" has no provider",
        ),
        (
            "[agent]\nprovider = \"default\"\n[[agent.sub_agents]]\nname = \"a\"\n[[agent.sub_agents]]\nname = \"a\"\n",
            "\"a\" is used twice",
        ),
        (
            "[agent]\nprovider = \"default\"\n[[agent.sub_agents]]\nname = \"agent-a2a\"\n",
            "is used twice",
        ),
    ];
    for (agent, expected) in cases {
        let (_d, o) = with_file(&format!("{OLLAMA}{agent}"));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(e.contains(expected), "{agent}: {e}");
    }
    // A sub-agent that is a remote agent: one configured, nothing of its own, a parent
    // with a model.
    let remote =
        "[[agent.remote_agents]]\nname = \"billing\"\ncard_url = \"https://b.example.org/card\"\n";
    let remote_cases = [
        (
            "[[agent.sub_agents]]\nname = \"b\"\nremote = \"nobody\"\n",
            "which no [[agent.remote_agents]] names",
        ),
        (
            "[[agent.sub_agents]]\nname = \"b\"\nremote = \"billing\"\ninstruction = \"x\"\n",
            "its instruction is the remote's own",
        ),
        (
            "[[agent.sub_agents]]\nname = \"b\"\nremote = \"billing\"\ntools = [\"x\"]\n",
            "its tools is the remote's own",
        ),
        (
            "[[agent.sub_agents]]\nname = \"b\"\nremote = \"billing\"\n[[agent.sub_agents.sub_agents]]\nname = \"c\"\n",
            "its sub_agents is the remote's own",
        ),
    ];
    for (sub, expected) in remote_cases {
        let text = format!("{OLLAMA}[agent]\nprovider = \"default\"\n{remote}{sub}");
        let (_d, o) = with_file(&text);
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("agent.sub_agents") && e.contains(expected),
            "{sub}: {e}"
        );
    }
    let (_d, o) = with_file(&format!(
        "{OLLAMA}{remote}[[agent.sub_agents]]\nname = \"b\"\nremote = \"billing\"\n"
    ));
    let e = load(&[], o).unwrap_err().to_string();
    assert!(e.contains("needs a provider"), "{e}");
    let (_d, o) = with_file(&format!(
        "{OLLAMA}[agent]\nprovider = \"default\"\n{remote}[[agent.sub_agents]]\nname = \"b\"\nremote = \"billing\"\n"
    ));
    assert_eq!(load(&[], o).unwrap().agent.sub_agents[0].remote, "billing");
    let nested = "[agent]\nprovider = \"default\"\n[[agent.sub_agents]]\nname = \"a\"\ntools = [\"memory_add\"]\n[[agent.sub_agents.sub_agents]]\nname = \"b\"\n";
    let (_d, o) = with_file(&format!("{OLLAMA}{nested}"));
    let s = load(&[], o).unwrap();
    assert_eq!(s.agent.sub_agents[0].sub_agents[0].name, "b");
}

#[test]
fn lifecycle_bounds_must_be_positive() {
    for (section, key) in [
        ("threads", "janitor_interval_secs"),
        ("threads", "janitor_batch"),
        ("threads", "recover_concurrency"),
        ("health", "timeout_ms"),
    ] {
        let (_d, o) = with_file(&format!("auth.enabled = false\n[{section}]\n{key} = 0\n"));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains(&format!("`{section}.{key}` must be greater than 0")),
            "{e}"
        );
    }
    // No eager recovery at all is a valid choice.
    let (_d, o) = with_file("auth.enabled = false\n[threads]\nrecover_eagerly = 0\n");
    assert_eq!(load(&[], o).unwrap().threads.recover_eagerly, 0);
}

#[test]
fn persistence_bounds_and_sqlite_synchronous_are_checked() {
    let (_d, o) = with_file("auth.enabled = false\n[persistence]\nstart_grace_ms = 10001\n");
    let e = load(&[], o).unwrap_err().to_string();
    assert!(
        e.contains("`persistence.start_grace_ms` must be at most 10000"),
        "{e}"
    );
    for bad in [0, 65] {
        let (_d, o) = with_file(&format!(
            "auth.enabled = false\n[persistence]\ncommits_in_flight = {bad}\n"
        ));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("`persistence.commits_in_flight` must be from 1 to 64"),
            "{e}"
        );
    }
    let (_d, o) = with_file("auth.enabled = false\n[store]\nlock_wait_ms = 600001\n");
    let e = load(&[], o).unwrap_err().to_string();
    assert!(
        e.contains("`store.lock_wait_ms` must be at most 600000"),
        "{e}"
    );
    for pages in [0, 1_048_577] {
        let (_d, o) = with_file(&format!(
            "auth.enabled = false\n[store]\nsqlite_checkpoint_pages = {pages}\n"
        ));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("`store.sqlite_checkpoint_pages` must be from 1 to 1048576"),
            "{e}"
        );
    }
    for pages in [999, 1_048_577] {
        let (_d, o) = with_file(&format!(
            "auth.enabled = false\n[store]\nsqlite_checkpoint_pages = 1000\nsqlite_max_wal_pages = {pages}\n"
        ));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("`store.sqlite_max_wal_pages` must be from store.sqlite_checkpoint_pages (1000) to 1048576"),
            "{e}"
        );
    }
    for buffer in [1023, (1 << 24) + 1] {
        let (_d, o) = with_file(&format!(
            "auth.enabled = false\n[store]\nsqlite_claim_buffer = {buffer}\n"
        ));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("`store.sqlite_claim_buffer` must be from 1024 to 16777216"),
            "{e}"
        );
    }
    for percent in [0, 101] {
        let (_d, o) = with_file(&format!(
            "auth.enabled = false\n[metrics]\ncensus_max_busy_percent = {percent}\n"
        ));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("`metrics.census_max_busy_percent` must be from 1 to 100"),
            "{e}"
        );
    }
    let (_d, o) = with_file("auth.enabled = false\n[idempotency]\nfilter_keys = 268435457\n");
    let e = load(&[], o).unwrap_err().to_string();
    assert!(
        e.contains("`idempotency.filter_keys` must be at most 268435456"),
        "{e}"
    );
    let (_d, o) = with_file("auth.enabled = false\n[idempotency]\nfilter_keys = 0\n");
    assert_eq!(load(&[], o).unwrap().idempotency.filter_keys, 0);
    let (_d, o) = with_file("auth.enabled = false\n[persistence]\nstart_grace_ms = 0\n");
    assert_eq!(load(&[], o).unwrap().persistence.start_grace_ms, 0);
    let (_d, o) = with_file("auth.enabled = false\n[store]\nsqlite_synchronous = \"full\"\n");
    assert_eq!(
        load(&[], o).unwrap().store.sqlite_synchronous,
        SqliteSynchronous::Full
    );
    let (_d, o) = with_file("auth.enabled = false\n[store]\nsqlite_synchronous = \"off\"\n");
    let e = load(&[], o).unwrap_err().to_string();
    assert!(e.contains("sqlite_synchronous"), "{e}");
}

#[test]
fn auth_is_on_by_default_and_needs_a_way_in() {
    assert!(Settings::default().auth.enabled);
    let (_d, o) = with_file("[server]\nworkers = 1\n");
    let e = load(&[], o).unwrap_err().to_string();
    assert!(e.contains("auth.enabled"), "{e}");
    let (_d, o) = with_file("[auth]\nenabled = false\n");
    assert!(!load(&[], o).unwrap().auth.enabled);
    // OIDC issuers alone are a way in; their own bounds are tested in `config/jwt.rs`.
    let (_d, o) = with_file(
        "[[auth.jwt]]\nissuer = \"https://id.example.com\"\naudience = \"a2a\"\n\
         jwks_url = \"https://id.example.com/jwks\"\n",
    );
    assert_eq!(load(&[], o).unwrap().auth.jwt[0].tenant_claim, "tenant");
    let (_d, o) = with_file(
        "[[auth.jwt]]\nissuer = \"https://id.example.com\"\naudience = \"a2a\"\n\
         jwks_url = \"https://id.example.com/jwks\"\nalgorithms = [\"HS256\"]\n",
    );
    let e = load(&[], o).unwrap_err().to_string();
    assert!(e.contains("`auth.jwt.algorithms` entry 1"), "{e}");
    let e = load(
        &[("AGENT_A2A__AUTH__FAILURE_TRACKING_MAX_ADDRESSES", "0")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("auth.failure_tracking_max_addresses"), "{e}");
}

#[test]
fn auth_and_rate_limit_settings_are_checked() {
    let on = "[auth]\nenabled = true\n";
    let cases = [
        (
            "[[auth.api_keys]]\ntenant = \"acme\"\n",
            "exactly one of key and key_sha256",
        ),
        (
            "[[auth.api_keys]]\nkey = \"k\"\nkey_sha256 = \"00\"\ntenant = \"acme\"\n",
            "exactly one of key and key_sha256",
        ),
        (
            "[[auth.api_keys]]\nkey_sha256 = \"xyz\"\ntenant = \"acme\"\n",
            "64 hex digits",
        ),
        (
            "[[auth.api_keys]]\nkey = \"k\"\ntenant = \"a\"\n[[auth.api_keys]]\nkey = \"k\"\ntenant = \"b\"\n",
            "listed twice",
        ),
        (
            "[auth.trusted_proxy]\ntenant_header = \"X-Tenant\"\naddresses = [\"proxy\"]\n",
            "not an IP address",
        ),
        (
            "[[auth.api_keys]]\nkey = \"k\"\ntenant = \"a\"\n[rate_limit]\ndefault_per_minute = 0\n",
            "rate_limit.default_per_minute",
        ),
        (
            "[[auth.api_keys]]\nkey = \"k\"\ntenant = \"a\"\n[rate_limit.tiers.pro]\nper_minute = 0\n",
            "rate_limit.tiers",
        ),
        (
            "[[auth.api_keys]]\nkey = \"k\"\ntenant = \"a\"\n[rate_limit.skills.memory]\nper_minute = 0\n",
            "rate_limit.skills",
        ),
    ];
    for (text, expected) in cases {
        let (_d, o) = with_file(&format!("{on}{text}"));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(e.contains(expected), "{text}: {e}");
    }
    // The example shape loads.
    let example = "[auth]\nenabled = true\n[[auth.api_keys]]\nkey = \"dev-key-1\"\ntenant = \"acme\"\ntier = \"free\"\n[rate_limit]\ndefault_per_minute = 100\n[rate_limit.tiers.pro]\nper_minute = 1000\n[rate_limit.skills.memory]\nper_minute = 600\n";
    let (_d, o) = with_file(example);
    let s = load(&[], o).unwrap();
    assert_eq!(s.auth.api_keys[0].tier, "free");
    assert_eq!(s.rate_limit.tiers["pro"].per_minute, 1000);
    assert_eq!(s.rate_limit.skills["memory"].per_minute, 600);
}

#[test]
fn connection_and_stream_bounds_are_checked() {
    for key in [
        "AGENT_A2A__SERVER__MAX_CONNECTIONS",
        "AGENT_A2A__SERVER__RESERVED_FDS",
        "AGENT_A2A__STREAMING__MAX_STREAMS",
    ] {
        let e = load(&[(key, "10000001")], Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be at most 10000000"), "{key}: {e}");
        assert!(
            load(&[(key, "10000000")], Overrides::default()).is_ok(),
            "{key}"
        );
    }
}

#[test]
fn retention_is_bounded_and_covers_the_idempotency_window() {
    for batch in [0, 10_001] {
        let (_d, o) = with_file(&format!(
            "auth.enabled = false\n[store]\nretention_batch = {batch}\n"
        ));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("`store.retention_batch` must be from 1 to 10000"),
            "{e}"
        );
    }
    // A thread deleted before its claims' window ends would leave a retry without its
    // task: the retention and the TTL together must cover the window.
    let (_d, o) = with_file(
        "auth.enabled = false\n[store]\nretention_secs = 60\n[threads]\nthread_ttl_secs = 3600\n[idempotency]\nwindow_secs = 7200\n",
    );
    let e = load(&[], o).unwrap_err().to_string();
    assert!(
        e.contains("`store.retention_secs` with threads.thread_ttl_secs (3600) must cover idempotency.window_secs (7200): at least 3600, or 0 to keep every thread"),
        "{e}"
    );
    for ok in [
        "[store]\nretention_secs = 3600\n[threads]\nthread_ttl_secs = 3600\n[idempotency]\nwindow_secs = 7200\n",
        "[store]\nretention_secs = 60\n[idempotency]\nenabled = false\n",
        "[store]\nretention_secs = 0\n[threads]\nthread_ttl_secs = 60\n",
    ] {
        let (_d, o) = with_file(&format!("auth.enabled = false\n{ok}"));
        load(&[], o).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    let (_d, o) = with_file("auth.enabled = false\n");
    let s = load(&[], o).unwrap();
    assert_eq!((s.store.retention_secs, s.store.retention_batch), (0, 100));
}

#[test]
fn the_postgres_analyze_interval_is_bounded() {
    let (_d, o) =
        with_file("auth.enabled = false\n[store]\npostgres_analyze_interval_secs = 3601\n");
    let e = load(&[], o).unwrap_err().to_string();
    assert!(
        e.contains(
            "`store.postgres_analyze_interval_secs` must be at most 3600 (an hour); 0 turns it off"
        ),
        "{e}"
    );
    for (text, secs) in [
        ("", 2),
        ("[store]\npostgres_analyze_interval_secs = 0\n", 0),
    ] {
        let (_d, o) = with_file(&format!("auth.enabled = false\n{text}"));
        assert_eq!(
            load(&[], o).unwrap().store.postgres_analyze_interval_secs,
            secs
        );
    }
}

#[test]
fn push_receiver_limits_and_breaker_are_bounded() {
    let refused = |toml: &str, key: &str, problem: &str| {
        let (_d, o) = with_file(&format!("auth.enabled = false\n[push]\n{toml}\n"));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(problem), "{toml}: {e}");
    };
    for key in [
        "max_concurrent_per_receiver",
        "breaker_failures",
        "breaker_open_ms",
    ] {
        refused(
            &format!("{key} = 0"),
            &format!("push.{key}"),
            "greater than 0",
        );
    }
    refused(
        "backoff_max_ms = 1000\nbreaker_open_ms = 1001",
        "push.breaker_open_ms",
        "at most push.backoff_max_ms",
    );
    // Below the per-receiver default, `max_concurrent` is the limit for one receiver too.
    let (_d, o) = with_file("auth.enabled = false\n[push]\nmax_concurrent = 4\n");
    let push = load(&[], o).unwrap().push;
    assert_eq!(
        (push.max_concurrent_per_receiver, push.breaker_failures),
        (64, 5)
    );
}

#[test]
fn card_signing_needs_one_key_a_kid_a_public_key_algorithm_and_an_http_jku() {
    let base = [
        (
            "AGENT_A2A__AGENT__CARD_SIGNING__KEY_FILE",
            "/etc/agent-a2a/card.pem",
        ),
        ("AGENT_A2A__AGENT__CARD_SIGNING__KID", "card-1"),
    ];
    let s = load(&base, Overrides::default()).unwrap();
    assert!(s.agent.card_signing.enabled());
    assert_eq!(
        s.agent.card_signing.algorithm().unwrap(),
        jsonwebtoken::Algorithm::ES256
    );
    assert!(!Settings::default().agent.card_signing.enabled());
    let refused = |extra: &[(&str, &str)], key: &str| {
        let mut env: Vec<(&str, &str)> = base.to_vec();
        env.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        env.extend_from_slice(extra);
        let e = load(&env, Overrides::default()).unwrap_err().to_string();
        assert!(e.contains(key), "{extra:?}: {e}");
    };
    refused(
        &[("AGENT_A2A__AGENT__CARD_SIGNING__KEY_PEM", "-----BEGIN …")],
        "agent.card_signing.key_pem",
    );
    refused(
        &[("AGENT_A2A__AGENT__CARD_SIGNING__KID", " ")],
        "agent.card_signing.kid",
    );
    for algorithm in ["HS256", "none", "es256x"] {
        refused(
            &[("AGENT_A2A__AGENT__CARD_SIGNING__ALGORITHM", algorithm)],
            "agent.card_signing.algorithm",
        );
    }
    refused(
        &[(
            "AGENT_A2A__AGENT__CARD_SIGNING__JKU",
            "ftp://keys.example.org",
        )],
        "agent.card_signing.jku",
    );
    // No key: nothing else is checked (the defaults leave signing off).
    let off = load(
        &[("AGENT_A2A__AGENT__CARD_SIGNING__ALGORITHM", "HS256")],
        Overrides::default(),
    );
    assert!(off.is_ok());
    // The key never shows in the settings' debug form.
    let s = load(
        &[
            ("AGENT_A2A__AGENT__CARD_SIGNING__KEY_PEM", "secret-pem-text"),
            ("AGENT_A2A__AGENT__CARD_SIGNING__KID", "k"),
        ],
        Overrides::default(),
    )
    .unwrap();
    assert!(!format!("{s:?}").contains("secret-pem-text"));
}

#[test]
fn remote_agents_need_a_tool_name_an_http_card_and_bounds_inside_the_tool_timeout() {
    let good = "auth.enabled = false\n[[agent.remote_agents]]\nname = \"billing\"\ncard_url = \"https://billing.example.org/.well-known/agent-card.json\"\nbearer = \"t0ken\"\n";
    let (_d, o) = with_file(good);
    let s = load(&[], o).unwrap();
    let remote = &s.agent.remote_agents[0];
    assert_eq!(
        (
            remote.timeout_ms,
            remote.max_answer_bytes,
            remote.breaker_failures
        ),
        (25_000, 1 << 20, 5)
    );
    assert!(
        !format!("{s:?}").contains("t0ken"),
        "credentials are not printed"
    );

    let refused = |text: &str, words: &str| {
        let (_d, o) = with_file(&format!("auth.enabled = false\n{text}"));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("agent.remote_agents") && e.contains(words),
            "{text}: {e}"
        );
    };
    let one = |name: &str, url: &str, extra: &str| {
        format!("[[agent.remote_agents]]\nname = \"{name}\"\ncard_url = \"{url}\"\n{extra}")
    };
    let url = "http://127.0.0.1:9000/.well-known/agent-card.json";
    refused(&one("Billing", url, ""), "lowercase");
    refused(&one("", url, ""), "lowercase");
    refused(&one("b c", url, ""), "lowercase");
    refused(
        &format!("{}{}", one("b", url, ""), one("b", url, "")),
        "twice",
    );
    refused(&one("b", "ftp://x/card", ""), "card_url");
    refused(&one("b", "not a url", ""), "card_url");
    refused(&one("b", url, "timeout_ms = 0\n"), "timeout_ms");
    refused(&one("b", url, "max_answer_bytes = 0\n"), "max_answer_bytes");
    refused(&one("b", url, "breaker_failures = 0\n"), "breaker_failures");
    refused(
        &one("b", url, "breaker_open_secs = 0\n"),
        "breaker_open_secs",
    );
    refused(&one("b", url, "bearer = \"a\\nb\"\n"), "control character");
    refused(
        &one("b", url, "timeout_ms = 40000\n"),
        "longer than skills.timeout_ms",
    );
    refused(&one("b", url, "colour = \"red\"\n"), "colour");
    refused(
        &one("b", url, "timeout_ms = 1000\ncard_wait_ms = 1001\n"),
        "`card_wait_ms` (1001) is longer than its `timeout_ms` (1000)",
    );
    assert_eq!(remote.card_wait_ms, 3_000);
}

#[test]
fn mcp_servers_need_a_name_one_transport_and_bounds_inside_the_tool_timeout() {
    let good = "auth.enabled = false\n[[agent.mcp_servers]]\nname = \"files\"\ncommand = \"npx\"\nargs = [\"-y\", \"server\"]\nenv = { TOKEN = \"s3cret-value\" }\n[[agent.mcp_servers]]\nname = \"tickets\"\nurl = \"https://tickets.example.org/mcp\"\nbearer_env = \"TICKETS_TOKEN\"\ntools = [\"search\"]\n";
    let (_d, o) = with_file(good);
    let s = load(&[], o).unwrap();
    let files = &s.agent.mcp_servers[0];
    assert_eq!(
        (
            files.timeout_ms,
            files.start_timeout_ms,
            files.max_result_bytes,
            files.max_concurrency,
            files.max_tools,
            files.restart_backoff_ms,
        ),
        (25_000, 10_000, 1 << 20, 4, 64, 500)
    );
    assert_eq!(files.tool_name("read_file"), "files__read_file");
    assert_eq!(s.agent.mcp_servers[1].tools, ["search"]);
    assert!(
        !format!("{s:?}").contains("s3cret-value"),
        "environment values are not printed"
    );

    let refused = |text: &str, words: &str| {
        let (_d, o) = with_file(&format!("auth.enabled = false\n{text}"));
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("agent.mcp_servers") && e.contains(words),
            "{text}: {e}"
        );
    };
    let one = |name: &str, extra: &str| {
        format!("[[agent.mcp_servers]]\nname = \"{name}\"\ncommand = \"server\"\n{extra}")
    };
    refused(&one("Files", ""), "lowercase");
    refused(&one("", ""), "lowercase");
    refused(&one("my__files", ""), "without `__`");
    refused(&format!("{}{}", one("f", ""), one("f", "")), "twice");
    refused(
        "[[agent.mcp_servers]]\nname = \"f\"\n",
        "set `command` (a server started over stdio) or `url`",
    );
    refused(
        &one("f", "url = \"https://x.example.org/mcp\"\n"),
        "not both",
    );
    refused(
        "[[agent.mcp_servers]]\nname = \"f\"\nurl = \"ftp://x/mcp\"\n",
        "not an http(s) URL",
    );
    refused(
        "[[agent.mcp_servers]]\nname = \"f\"\nurl = \"https://x.example.org/mcp\"\nargs = [\"a\"]\n",
        "are for a `command`",
    );
    refused(
        &one("f", "bearer_env = \"T\"\n"),
        "`bearer_env` is for a `url`",
    );
    refused(
        &one("f", "env = { \"A=B\" = \"x\" }\n"),
        "`env` holds the variable",
    );
    for field in [
        "timeout_ms",
        "start_timeout_ms",
        "max_result_bytes",
        "max_concurrency",
        "max_tools",
        "max_description_bytes",
        "max_schema_bytes",
        "restart_backoff_ms",
        "breaker_failures",
        "breaker_open_secs",
    ] {
        refused(
            &one("f", &format!("{field} = 0\n")),
            &format!("`{field}` must be at least 1"),
        );
    }
    refused(&one("f", "max_result_bytes = 16777217\n"), "over 16777216");
    refused(
        &one("f", "max_tools = 1\ntools = [\"a\", \"b\"]\n"),
        "lists 2 tools, more than its `max_tools` (1)",
    );
    refused(
        &one("f", "timeout_ms = 40000\n"),
        "longer than skills.timeout_ms",
    );
    refused(&one("f", "colour = \"red\"\n"), "colour");
}

#[test]
fn a_tenants_mcp_servers_are_configured_ones_and_its_keys_agree() {
    let server = "[[agent.mcp_servers]]\nname = \"files\"\ncommand = \"server\"\n";
    let key = |key: &str, tenant: &str, servers: &str| {
        format!("[[auth.api_keys]]\nkey = \"{key}\"\ntenant = \"{tenant}\"\n{servers}")
    };
    let (_d, o) = with_file(&format!(
        "{}{}{server}",
        key("k1", "acme", "mcp_servers = []\n"),
        key("k2", "globex", "")
    ));
    let s = load(&[], o).unwrap();
    assert_eq!(s.auth.api_keys[0].mcp_servers, Some(Vec::new()));
    assert_eq!(s.auth.api_keys[1].mcp_servers, None);

    let refused = |text: String, words: &str| {
        let (_d, o) = with_file(&text);
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("auth.api_keys") && e.contains(words),
            "{text}: {e}"
        );
    };
    refused(
        format!(
            "{}{server}",
            key("k1", "acme", "mcp_servers = [\"tickets\"]\n")
        ),
        "names \"tickets\", which no [[agent.mcp_servers]] names",
    );
    refused(
        format!(
            "{}{}{server}",
            key("k1", "acme", "mcp_servers = [\"files\"]\n"),
            key("k2", "acme", "")
        ),
        "the keys of tenant \"acme\" name different `mcp_servers`",
    );
}
