//! Loading the settings: the layers and their order, typed environment values, errors
//! naming the key, and the repository's own `config.toml` and README held to the
//! defaults.

use super::*;

mod validation;

pub(super) fn load(env: &[(&str, &str)], overrides: Overrides) -> Result<Settings, ConfigError> {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Settings::load_from(&overrides, env)
}

pub(super) fn with_file(text: &str) -> (tempfile::TempDir, Overrides) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, text).unwrap();
    let o = Overrides {
        config_file: Some(path),
        ..Default::default()
    };
    (dir, o)
}

#[test]
fn a_partial_file_keeps_every_other_default() {
    let (_d, o) = with_file("auth.enabled = false\n[threads]\nhistory_window = 7\n");
    let s = load(&[], o).unwrap();
    assert_eq!(s.threads.history_window, 7);
    assert_eq!(s.server, ServerSettings::default());
}

#[test]
fn flags_beat_env_beat_file() {
    let (_d, mut o) = with_file("auth.enabled = false\n[server]\nbind = \"127.0.0.1:1000\"\n");
    let env = [("AGENT_A2A__SERVER__BIND", "127.0.0.1:2000")];
    assert_eq!(load(&env, o.clone()).unwrap().server.bind, "127.0.0.1:2000");
    o.bind = Some("127.0.0.1:3000".into());
    assert_eq!(load(&env, o).unwrap().server.bind, "127.0.0.1:3000");
}

#[test]
fn env_values_are_typed() {
    let env = [
        ("AGENT_A2A__THREADS__HISTORY_WINDOW", "9"),
        ("AGENT_A2A__LOG__FORMAT", "json"),
    ];
    let s = load(&env, Overrides::default()).unwrap();
    assert_eq!(s.threads.history_window, 9);
    assert_eq!(s.log.format, LogFormat::Json);
}

#[test]
fn database_url_env_selects_postgres_and_the_flag_beats_it() {
    let env = [("DATABASE_URL", "postgres://a@127.0.0.1/x")];
    let s = load(&env, Overrides::default()).unwrap();
    assert_eq!(s.store.database_url, "postgres://a@127.0.0.1/x");
    let o = Overrides {
        database_url: Some("sqlite:/tmp/x.db".into()),
        ..Default::default()
    };
    assert_eq!(
        load(&env, o).unwrap().store.database_url,
        "sqlite:/tmp/x.db"
    );
}

#[test]
fn invalid_values_name_the_key() {
    let (_d, o) = with_file("[threads]\nhistory_window = \"lots\"\n");
    let e = load(&[], o).unwrap_err().to_string();
    assert!(e.contains("threads.history_window"), "{e}");

    let (_d, o) = with_file("[threads]\nhistory_window = 0\n");
    let e = load(&[], o).unwrap_err().to_string();
    assert!(e.contains("threads.history_window"), "{e}");

    let e = load(
        &[("AGENT_A2A__SERVER__BIND", "nowhere")],
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("server.bind"), "{e}");
}

#[test]
fn unknown_keys_are_refused() {
    let (_d, o) = with_file("[threads]\nhistory_windo = 3\n");
    let e = load(&[], o).unwrap_err().to_string();
    assert!(e.contains("history_windo"), "{e}");
}

#[test]
fn a_missing_config_file_is_an_error() {
    let o = Overrides {
        config_file: Some("/nonexistent/agent-a2a.toml".into()),
        ..Default::default()
    };
    assert!(matches!(load(&[], o), Err(ConfigError::MissingFile(_))));
}

pub(super) const OLLAMA: &str = "auth.enabled = false\n[providers.default]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodel = \"llama3.1\"\n";

#[test]
fn the_readme_ollama_lines_configure_the_agent() {
    let text = format!("{OLLAMA}[agent]\nprovider = \"default\"\n");
    let (_d, o) = with_file(&text);
    let s = load(&[], o).unwrap();
    assert_eq!(s.agent.provider, "default");
    assert_eq!(s.providers["default"].model, "llama3.1");
    assert_eq!(
        s.providers["default"].max_retries, 2,
        "unset keys take defaults"
    );
    // The same through the environment only.
    let s = load(
        &[
            ("AGENT_A2A__PROVIDERS__DEFAULT__KIND", "openai"),
            (
                "AGENT_A2A__PROVIDERS__DEFAULT__BASE_URL",
                "http://127.0.0.1:11434/v1",
            ),
            ("AGENT_A2A__PROVIDERS__DEFAULT__MODEL", "llama3.1"),
            ("AGENT_A2A__AGENT__PROVIDER", "default"),
            ("AGENT_A2A__AUTH__ENABLED", "false"),
        ],
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(s.providers["default"].base_url, "http://127.0.0.1:11434/v1");
}

#[test]
fn each_of_the_readme_model_blocks_configures_the_agent_in_two_lines() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
    // The environment lines of each fenced block of the README, block by block.
    let mut blocks: Vec<Vec<(String, String)>> = Vec::new();
    let mut inside = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            inside = !inside;
            if inside {
                blocks.push(Vec::new());
            }
            continue;
        }
        let Some(l) = line.strip_prefix("export AGENT_A2A__") else {
            continue;
        };
        assert!(inside, "an environment line outside a code block: {line}");
        let (key, value) = l.split_once('=').unwrap();
        blocks.last_mut().unwrap().push((
            format!("AGENT_A2A__{key}"),
            value.trim_matches('\'').to_owned(),
        ));
    }
    blocks.retain(|b| !b.is_empty());
    let models: Vec<(String, String)> = blocks
        .into_iter()
        .map(|env| {
            assert_eq!(env.len(), 2, "a README block shows two lines: {env:?}");
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
            let o = Overrides {
                config_file: Some(path),
                ..Default::default()
            };
            let s = Settings::load_from(&o, env).unwrap();
            assert_eq!(s.agent.provider, "default");
            let provider = &s.providers["default"];
            assert_eq!(provider.kind, ProviderKind::Openai);
            let model = (provider.base_url.clone(), provider.model.clone());
            let mut rest = s.clone();
            rest.agent.provider = String::new();
            rest.providers.clear();
            let mut expected = Settings::default();
            expected.auth.enabled = false;
            assert_eq!(rest, expected, "nothing else changes");
            model
        })
        .collect();
    let expected = [
        ("http://127.0.0.1:11434/v1", "llama3.1"),
        ("http://127.0.0.1:8080/v1", "gemma"),
    ]
    .map(|(url, model)| (url.to_owned(), model.to_owned()));
    assert_eq!(models, expected, "Ollama's block, then llama.cpp's");
}

#[test]
fn the_repository_config_file_matches_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
    let o = Overrides {
        config_file: Some(path),
        ..Default::default()
    };
    // The one deliberate difference: the file is for local runs and turns auth off
    // (the server says so loudly at start-up); the built-in default keeps it on.
    let mut expected = Settings::default();
    expected.auth.enabled = false;
    assert_eq!(load(&[], o).unwrap(), expected);
}

/// The dotted path of every key in `table`: tables are walked into, anything else
/// (values, arrays) is a key.
fn key_paths(table: &toml::Table, prefix: &str, paths: &mut std::collections::BTreeSet<String>) {
    for (key, value) in table {
        let path = format!("{prefix}{key}");
        if let toml::Value::Table(inner) = value {
            key_paths(inner, &format!("{path}."), paths);
        }
        paths.insert(path);
    }
}

#[test]
fn the_repository_config_file_names_every_setting() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
    let file: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let defaults = toml::Table::try_from(Settings::default()).unwrap();
    let (mut in_file, mut in_defaults) = Default::default();
    key_paths(&file, "", &mut in_file);
    key_paths(&defaults, "", &mut in_defaults);
    let missing: Vec<_> = in_defaults.difference(&in_file).collect();
    assert!(missing.is_empty(), "config.toml lacks {missing:?}");
    // Keys the file has and `Settings` has not are refused by the value test above.
    assert_eq!(in_file, in_defaults);
}

/// The lines of `config.toml`'s commented-out example that starts with `first`.
fn commented_example(first: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != format!("# {first}"))
        .map_while(|l| l.strip_prefix("# "))
        .collect();
    assert!(!lines.is_empty(), "config.toml has no example {first}");
    lines.join("\n") + "\n"
}

#[test]
fn the_repository_config_file_examples_load() {
    let policy = commented_example("[[governance.policies]]");
    let (_d, o) = with_file(&format!("auth.enabled = false\n{policy}"));
    let s = load(&[], o).unwrap();
    let policy = &s.governance.policies[0];
    assert_eq!(
        (policy.layer, policy.mode),
        (PolicyLayer::Company, PolicyMode::Mandatory)
    );
    assert_eq!(policy.rules[0].operator, RuleOperator::MustNotMatch);

    let provider = commented_example("[providers.default]");
    let (_d, o) = with_file(&format!("auth.enabled = false\n{provider}"));
    let s = load(&[], o).unwrap();
    assert_eq!(s.providers["default"].kind, ProviderKind::Openai);
}
