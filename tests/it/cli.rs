//! The command line of the real binary: version, help, migrate, configuration errors
//! that stop start-up naming the key, and the card signature check.

use std::process::Command;

fn agent_a2a() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agent-a2a"));
    cmd.env_remove("DATABASE_URL")
        .env("AGENT_A2A__AUTH__ENABLED", "false")
        .env("RUST_LOG", "warn")
        .current_dir(std::env::temp_dir());
    cmd
}

#[test]
fn version_and_help() {
    let out = agent_a2a().arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
    let out = agent_a2a().arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "serve",
        "migrate",
        "verify-card",
        "--config",
        "--bind",
        "--grpc-bind",
        "--database-url",
        "--data-dir",
    ] {
        assert!(text.contains(word), "{word} missing from help: {text}");
    }
}

#[test]
fn migrate_applies_once_then_reports_up_to_date() {
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        agent_a2a()
            .args(["migrate", "--data-dir"])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let first = run();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(String::from_utf8_lossy(&first.stdout).contains("applied"));
    assert!(dir.path().join("agent-a2a.db").exists());
    let second = run();
    assert!(second.status.success());
    assert!(String::from_utf8_lossy(&second.stdout).contains("up to date"));
}

#[test]
fn invalid_configuration_stops_start_up_naming_the_key() {
    let out = agent_a2a()
        .env("AGENT_A2A__THREADS__HISTORY_WINDOW", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("threads.history_window"), "{err}");

    let out = agent_a2a()
        .args(["--bind", "not-an-address"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.bind"));

    let out = agent_a2a()
        .args(["--config", "/nonexistent/agent-a2a.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));

    // Without a configuration that says otherwise, auth is on and needs keys.
    let out = agent_a2a()
        .env_remove("AGENT_A2A__AUTH__ENABLED")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("auth.enabled"));
}

/// Settings whose rules belong to another module than `config` (a governance rule, an
/// API key's tenant) still stop start-up with an error naming what is wrong, before the
/// store is opened.
#[test]
fn settings_checked_outside_config_stop_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let run = |toml: &str| {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, toml).unwrap();
        agent_a2a()
            .env_remove("AGENT_A2A__AUTH__ENABLED")
            .arg("--config")
            .arg(&path)
            .args(["--bind", "127.0.0.1:0", "--grpc-bind", ""])
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .unwrap()
    };

    let policy = "[auth]\nenabled = false\n[[governance.policies]]\nid = \"no-secrets\"\n\
                  layer = \"company\"\n[[governance.policies.rules]]\nid = \"aws\"\n\
                  target = \"content\"\noperator = \"must_not_match\"\nvalue = \"(unclosed\"\n\
                  severity = \"block\"\nmessage = \"no keys\"\n";
    let out = run(policy);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`governance.policies` policy no-secrets: rule aws"),
        "{err}"
    );

    let tenant = "[auth]\nenabled = true\n[[auth.api_keys]]\nkey = \"k\"\ntenant = \"\"\n";
    let out = run(tenant);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid auth settings: api key tenant: must not be empty"),
        "{err}"
    );
    assert!(
        !dir.path().join("agent-a2a.db").exists(),
        "nothing was opened"
    );
}

/// `verify-card` accepts a card signed by a key of the set, and refuses a changed card,
/// an algorithm not allowed and a card without signatures, saying why, with exit code 1.
#[test]
fn verify_card_checks_a_signature_against_a_key_set() {
    use agent_a2a::a2a::signing::CardSigner;
    let pem = std::fs::read(format!(
        "{}/tests/fixtures/test-only-es256-a.pem",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let signer =
        CardSigner::new(jsonwebtoken::Algorithm::ES256, &pem, "k1", None).expect("test key");
    let mut card = serde_json::json!({
        "name": "remote", "description": "d", "version": "1",
        "supportedInterfaces": [{"url": "http://127.0.0.1:9", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": [],
    });
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, signer.jwks().to_string()).unwrap();
    let check = |card: &serde_json::Value, extra: &[&str]| {
        let path = dir.path().join("card.json");
        std::fs::write(&path, card.to_string()).unwrap();
        // A configuration that would stop the server does not matter here.
        agent_a2a()
            .env("AGENT_A2A__THREADS__HISTORY_WINDOW", "0")
            .arg("verify-card")
            .arg("--card")
            .arg(&path)
            .arg("--jwks")
            .arg(&jwks)
            .args(extra)
            .output()
            .unwrap()
    };

    let out = check(&card, &[]);
    assert_eq!(out.status.code(), Some(1), "unsigned");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no signature"));

    signer.sign(&mut card).unwrap();
    let out = check(&card, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid"));

    let out = check(&card, &["--algorithms", "RS256,EdDSA"]);
    assert_eq!(out.status.code(), Some(1));
    let out = check(&card, &["--algorithms", "HS256"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HS256"));

    // The same card with a field under its protobuf name: its 1.0 parse, which the
    // signature covers, reads the same, and it is refused all the same.
    let mut renamed = card.clone();
    let interfaces = renamed
        .as_object_mut()
        .unwrap()
        .remove("supportedInterfaces")
        .unwrap();
    renamed["supported_interfaces"] = interfaces;
    renamed["url"] = serde_json::json!("http://127.0.0.1:7");
    let out = check(&renamed, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not written in canonical form: `supported_interfaces`"),
        "{err}"
    );

    card["name"] = serde_json::json!("impostor");
    let out = check(&card, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no signature of the agent card is valid")
    );
}
