//! `[agent]` and `[history]`: the agent the card describes, its model-backed loop and
//! sub-agents, and the history its model sees.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ConfigError, McpServerSettings, ProviderSettings, positive};

/// The agent the card describes, and its model-backed loop when `provider` is set
/// (`[agent]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSettings {
    pub name: String,
    pub description: String,
    /// The agent's own version (not the protocol's).
    pub version: String,
    /// Media types accepted in message parts (`*/*` accepts any).
    pub input_modes: Vec<String>,
    pub output_modes: Vec<String>,
    /// Organization named in the card's `provider` (omitted when empty).
    pub provider_organization: String,
    pub provider_url: String,
    pub documentation_url: String,
    /// Add the 0.3 top-level fields to the card for 0.3 clients (strict 1.0 schema
    /// validators reject them; turn off for 1.0-only deployments).
    pub card_v03_fields: bool,
    /// The `[providers.<name>]` of the root agent's model; empty: no model, the server
    /// routes explicit tool calls only.
    pub provider: String,
    /// Model name sent to the provider; empty: the provider's `model`.
    pub model: String,
    /// The root agent's system instruction.
    pub instruction: String,
    /// Tools the root agent may call, by name; `"*"` stands for every registered tool.
    pub tools: Vec<String>,
    /// Agents the root agent can hand the conversation to (`transfer_to_agent`).
    pub sub_agents: Vec<SubAgentSettings>,
    /// Model calls one run may make (each tool round trip is one); past it the task fails.
    pub max_turns: u32,
    /// One tool call by the model may take this long; then the model gets an error result.
    pub tool_timeout_ms: u64,
    /// Streamed answer text is sent to clients at most this often (ms), in artifact chunks.
    pub stream_flush_ms: u64,
    /// Most output tokens per model call; 0: the provider's default.
    pub max_output_tokens: u32,
    /// A cheaper provider that turns free text into tool calls when no `provider` is set,
    /// seeing only skill descriptions and tool schemas; empty: none.
    pub routing_provider: String,
    /// Model name for the routing provider; empty: its `model`.
    pub routing_model: String,
    /// Whether the routing model must call a tool: `auto` (it may ask a question
    /// instead), `required` (some tool), or a tool's name (that tool, its arguments taken
    /// from the text).
    pub routing_tool_choice: String,
    /// The card's signature (`[agent.card_signing]`).
    pub card_signing: CardSigningSettings,
    /// Remote A2A agents the agent may ask, each as a tool `ask_<name>`
    /// (`[[agent.remote_agents]]`).
    pub remote_agents: Vec<RemoteAgentSettings>,
    /// Model Context Protocol servers whose tools the agent may call, each as
    /// `<name>__<tool>` (`[[agent.mcp_servers]]`).
    pub mcp_servers: Vec<McpServerSettings>,
}

/// A remote A2A agent, called as the tool `ask_<name>` (`[[agent.remote_agents]]`). Its
/// card and every address it names pass the push receivers' URL policy (`[push]`
/// `allow_loopback`, `allow_private`, `allow_hosts`, `deny_hosts`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteAgentSettings {
    /// Lowercase letters, digits, `_` and `-`: the tool is `ask_<name>`.
    pub name: String,
    /// Where its agent card is (`…/.well-known/agent-card.json`).
    pub card_url: String,
    /// Sent as `Authorization: Bearer <bearer>`; empty: none.
    #[serde(default)]
    pub bearer: String,
    /// Sent as `X-API-Key`; empty: none.
    #[serde(default)]
    pub api_key: String,
    /// What the model (and this server's card, which lists the tool) is told the agent
    /// does; empty: "Asks the remote A2A agent `<name>` and returns its answer."
    #[serde(default)]
    pub description: String,
    /// One call may take this long, the remote task followed to its end included; then
    /// the call fails. At most `skills.timeout_ms`, which ends every tool call.
    #[serde(default = "remote_timeout_ms")]
    pub timeout_ms: u64,
    /// The largest card or answer read from it; past it the call fails.
    #[serde(default = "remote_max_answer_bytes")]
    pub max_answer_bytes: usize,
    /// Calls failing in a row (unreachable, timed out, a server error) that open its
    /// breaker; while open, calls fail at once.
    #[serde(default = "remote_breaker_failures")]
    pub breaker_failures: u32,
    /// How long an open breaker stays open before one call may try again.
    #[serde(default = "remote_breaker_open_secs")]
    pub breaker_open_secs: u64,
    /// Require its card to be signed (A2A §8.4) by a key of this JWK Set: a file, or an
    /// http(s) URL read with the card (within the same URL policy); empty: not required.
    /// A card without a valid signature is not used.
    #[serde(default)]
    pub verify_with: String,
    /// A gRPC interface whose card `url` is `host:port` (no scheme, as A2A 1.0 writes
    /// it) is spoken over TLS; `false`: in clear text (h2c), for a remote on loopback or
    /// behind a mesh that encrypts. A URL written `https://` or `http://` says which
    /// itself.
    #[serde(default = "remote_grpc_tls")]
    pub grpc_tls: bool,
    /// How long the start waits for its card (read at start-up, all remote agents at
    /// once), whose description and skills then describe the tool to the model when
    /// `description` is empty; past it, or when the card cannot be read, the start goes
    /// on with the default description. 0: not read at start-up. At most `timeout_ms`.
    #[serde(default = "remote_card_wait_ms")]
    pub card_wait_ms: u64,
    /// A PEM file of certificate authorities its TLS certificates may also chain to (a
    /// private PKI), beside the platform's roots, for its card, its HTTP interfaces and
    /// its gRPC one; empty: the platform's roots only. Read at start: a file that cannot
    /// be read or holds no certificate stops the start.
    #[serde(default)]
    pub ca_file: String,
}

fn remote_timeout_ms() -> u64 {
    25_000
}
fn remote_max_answer_bytes() -> usize {
    1 << 20
}
fn remote_breaker_failures() -> u32 {
    5
}
fn remote_breaker_open_secs() -> u64 {
    30
}
fn remote_grpc_tls() -> bool {
    true
}
fn remote_card_wait_ms() -> u64 {
    3_000
}

impl std::fmt::Debug for RemoteAgentSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Credentials are never printed.
        let set = |v: &str| (!v.is_empty()).then_some("<set>");
        f.debug_struct("RemoteAgentSettings")
            .field("name", &self.name)
            .field("card_url", &self.card_url)
            .field("bearer", &set(&self.bearer))
            .field("api_key", &set(&self.api_key))
            .field("description", &self.description)
            .field("timeout_ms", &self.timeout_ms)
            .field("max_answer_bytes", &self.max_answer_bytes)
            .field("breaker_failures", &self.breaker_failures)
            .field("breaker_open_secs", &self.breaker_open_secs)
            .field("verify_with", &self.verify_with)
            .field("grpc_tls", &self.grpc_tls)
            .field("card_wait_ms", &self.card_wait_ms)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl RemoteAgentSettings {
    /// The remote agent `name` whose card is at `card_url`, with no credentials and the
    /// default bounds.
    pub fn new(name: impl Into<String>, card_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            card_url: card_url.into(),
            bearer: String::new(),
            api_key: String::new(),
            description: String::new(),
            timeout_ms: remote_timeout_ms(),
            max_answer_bytes: remote_max_answer_bytes(),
            breaker_failures: remote_breaker_failures(),
            breaker_open_secs: remote_breaker_open_secs(),
            verify_with: String::new(),
            grpc_tls: remote_grpc_tls(),
            card_wait_ms: remote_card_wait_ms(),
            ca_file: String::new(),
        }
    }

    fn validate(&self, seen: &mut Vec<String>) -> Result<(), ConfigError> {
        let key = "agent.remote_agents";
        let refuse = |problem: String| Err(ConfigError::Key { key, problem });
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 48
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !name_ok {
            return refuse(format!(
                "has the name {:?}: 1 to 48 lowercase letters, digits, `_` or `-` (the tool \
                 is `ask_<name>`)",
                self.name
            ));
        }
        if seen.contains(&self.name) {
            return refuse(format!("names {:?} twice", self.name));
        }
        seen.push(self.name.clone());
        let url = reqwest::Url::parse(&self.card_url).ok();
        if !url.is_some_and(|u| matches!(u.scheme(), "https" | "http") && u.host().is_some()) {
            return refuse(format!(
                "{}: `card_url` is {:?}, not an http(s) URL",
                self.name, self.card_url
            ));
        }
        for (field, value) in [("bearer", &self.bearer), ("api_key", &self.api_key)] {
            if value.chars().any(|c| c.is_control()) {
                return refuse(format!(
                    "{}: `{field}` holds a control character",
                    self.name
                ));
            }
        }
        for (field, value) in [
            ("timeout_ms", self.timeout_ms),
            ("max_answer_bytes", self.max_answer_bytes as u64),
            ("breaker_failures", u64::from(self.breaker_failures)),
            ("breaker_open_secs", self.breaker_open_secs),
        ] {
            if value == 0 {
                return refuse(format!("{}: `{field}` must be at least 1", self.name));
            }
        }
        if self.card_wait_ms > self.timeout_ms {
            return refuse(format!(
                "{}: `card_wait_ms` ({}) is longer than its `timeout_ms` ({})",
                self.name, self.card_wait_ms, self.timeout_ms
            ));
        }
        Ok(())
    }
}

/// The signature of the agent card (`[agent.card_signing]`, A2A §8.4): the public and
/// the extended card are signed when a key is given, and the key's public half is served
/// at `/.well-known/jwks.json`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CardSigningSettings {
    /// A PEM file holding the private key (EC and Ed25519: PKCS#8, EC also SEC1; RSA:
    /// PKCS#1 or PKCS#8); empty: `key_pem`, or no signing.
    pub key_file: String,
    /// The PEM text itself, for a key given by the environment
    /// (`AGENT_A2A__AGENT__CARD_SIGNING__KEY_PEM`); empty: `key_file`, or no signing.
    pub key_pem: String,
    /// ES256, ES384, RS256, RS384, RS512, PS256, PS384, PS512 or EdDSA.
    pub algorithm: String,
    /// The key's id, named in each signature's header and in the JWK Set; required with
    /// a key.
    pub kid: String,
    /// The JWK Set's URL, put in the signed header for verifiers that look keys up by
    /// it; empty: none.
    pub jku: String,
}

impl Default for CardSigningSettings {
    fn default() -> Self {
        Self {
            key_file: String::new(),
            key_pem: String::new(),
            algorithm: "ES256".into(),
            kid: String::new(),
            jku: String::new(),
        }
    }
}

impl std::fmt::Debug for CardSigningSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key itself is never printed.
        f.debug_struct("CardSigningSettings")
            .field("key_file", &self.key_file)
            .field("key_pem", &(!self.key_pem.is_empty()).then_some("<set>"))
            .field("algorithm", &self.algorithm)
            .field("kid", &self.kid)
            .field("jku", &self.jku)
            .finish()
    }
}

impl CardSigningSettings {
    /// Whether a key is configured.
    pub fn enabled(&self) -> bool {
        !self.key_file.is_empty() || !self.key_pem.is_empty()
    }

    /// The algorithm, as `validate` accepted it.
    pub fn algorithm(&self) -> Result<jsonwebtoken::Algorithm, ConfigError> {
        use jsonwebtoken::{Algorithm, AlgorithmFamily};
        let algorithm = self
            .algorithm
            .parse::<Algorithm>()
            .ok()
            .filter(|a| a.family() != AlgorithmFamily::Hmac);
        algorithm.ok_or_else(|| ConfigError::Key {
            key: "agent.card_signing.algorithm",
            problem: format!(
                "is {:?}: one of ES256, ES384, RS256, RS384, RS512, PS256, PS384, PS512, EdDSA",
                self.algorithm
            ),
        })
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !self.key_file.is_empty() && !self.key_pem.is_empty() {
            return Err(ConfigError::Key {
                key: "agent.card_signing.key_pem",
                problem: "and `agent.card_signing.key_file` are both set: give the key once".into(),
            });
        }
        if !self.enabled() {
            return Ok(());
        }
        self.algorithm()?;
        if self.kid.trim().is_empty() {
            return Err(ConfigError::Key {
                key: "agent.card_signing.kid",
                problem: "must name the signing key (verifiers pick keys by it)".into(),
            });
        }
        if !self.jku.is_empty() {
            let url = reqwest::Url::parse(&self.jku).ok();
            if !url.is_some_and(|u| matches!(u.scheme(), "https" | "http")) {
                return Err(ConfigError::Key {
                    key: "agent.card_signing.jku",
                    problem: format!("is {:?}: an http(s) URL or empty", self.jku),
                });
            }
        }
        Ok(())
    }
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            name: "agent-a2a".into(),
            description: "An A2A agent served by agent-a2a: durable threads, streaming, and \
                          skills callable as tools."
                .into(),
            version: env!("CARGO_PKG_VERSION").into(),
            input_modes: vec!["text/plain".into(), "application/json".into()],
            output_modes: vec!["text/plain".into(), "application/json".into()],
            provider_organization: String::new(),
            provider_url: String::new(),
            documentation_url: String::new(),
            card_v03_fields: true,
            provider: String::new(),
            model: String::new(),
            instruction: "You are a helpful assistant. Use the tools you are given when they \
                          help answer the user; answer concisely."
                .into(),
            tools: vec!["*".into()],
            sub_agents: Vec::new(),
            max_turns: 10,
            tool_timeout_ms: 30_000,
            stream_flush_ms: 100,
            max_output_tokens: 0,
            routing_provider: String::new(),
            routing_model: String::new(),
            routing_tool_choice: "auto".into(),
            card_signing: CardSigningSettings::default(),
            remote_agents: Vec::new(),
            mcp_servers: Vec::new(),
        }
    }
}

/// An agent the root agent can transfer to (`[[agent.sub_agents]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubAgentSettings {
    pub name: String,
    /// Shown to the model deciding whether to transfer.
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub instruction: String,
    /// Empty: the parent agent's provider.
    #[serde(default)]
    pub provider: String,
    /// Empty: the provider's `model`.
    #[serde(default)]
    pub model: String,
    /// Tools by name (`"*"`: all); none by default.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub sub_agents: Vec<SubAgentSettings>,
    /// The name of an `[[agent.remote_agents]]` entry: this agent *is* that remote A2A
    /// agent. A transfer to it sends it the user's message (through its `ask_<name>`,
    /// durably) and its answer is the turn's; the conversation goes back to the parent
    /// once it answered, or stays with it while it waits for the user's input. Its
    /// `instruction`, `provider`, `model`, `tools` and `sub_agents` are the remote's own:
    /// none may be set. Empty: an agent of this server.
    #[serde(default)]
    pub remote: String,
}

impl SubAgentSettings {
    /// The sub-agent `name` that is the configured remote agent `remote`, with the
    /// default description.
    pub fn remote(name: impl Into<String>, remote: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            instruction: String::new(),
            provider: String::new(),
            model: String::new(),
            tools: Vec::new(),
            sub_agents: Vec::new(),
            remote: remote.into(),
        }
    }
}

/// The history a model sees (`[history]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistorySettings {
    /// Tokens of history sent to a model (newest first until spent); 0 means 32000.
    pub token_budget: usize,
    /// Most history messages sent to a model on top of the budget; 0: no cap.
    pub max_messages: usize,
}

impl Default for HistorySettings {
    fn default() -> Self {
        Self {
            token_budget: 32_000,
            max_messages: 0,
        }
    }
}

impl AgentSettings {
    /// The agent has a name and bounds; providers named by agents exist in `providers`,
    /// agent names are unique, and sub-agents have a model.
    pub(super) fn validate(
        &self,
        providers: &BTreeMap<String, ProviderSettings>,
    ) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(ConfigError::Key {
                key: "agent.name",
                problem: "must not be empty".into(),
            });
        }
        self.card_signing.validate()?;
        let mut remote_names = Vec::new();
        for remote in &self.remote_agents {
            remote.validate(&mut remote_names)?;
        }
        let mut mcp_names = Vec::new();
        for server in &self.mcp_servers {
            server.validate(&mut mcp_names)?;
        }
        positive("agent.max_turns", u64::from(self.max_turns))?;
        positive("agent.tool_timeout_ms", self.tool_timeout_ms)?;
        let provider = |key: &'static str, name: &str| {
            if name.is_empty() || providers.contains_key(name) {
                Ok(())
            } else {
                Err(ConfigError::Key {
                    key,
                    problem: format!(
                        "names provider {name:?}, which no [providers.{name}] defines"
                    ),
                })
            }
        };
        provider("agent.provider", &self.provider)?;
        provider("agent.routing_provider", &self.routing_provider)?;
        let choice = &self.routing_tool_choice;
        if choice.is_empty() || choice.chars().any(char::is_whitespace) {
            return Err(ConfigError::Key {
                key: "agent.routing_tool_choice",
                problem: format!("{choice:?} is not \"auto\", \"required\" or a tool's name"),
            });
        }
        let mut names = vec![self.name.as_str()];
        let mut stack: Vec<(&SubAgentSettings, &str)> = self
            .sub_agents
            .iter()
            .map(|sub| (sub, self.provider.as_str()))
            .collect();
        while let Some((sub, parent_provider)) = stack.pop() {
            let sub_provider = if sub.provider.is_empty() {
                parent_provider
            } else {
                sub.provider.as_str()
            };
            if sub.name.trim().is_empty() {
                return Err(ConfigError::Key {
                    key: "agent.sub_agents",
                    problem: "an agent has an empty name".into(),
                });
            }
            if names.contains(&sub.name.as_str()) {
                return Err(ConfigError::Key {
                    key: "agent.sub_agents",
                    problem: format!("agent name {:?} is used twice", sub.name),
                });
            }
            names.push(&sub.name);
            if !sub.remote.is_empty() {
                self.check_remote_sub_agent(sub, parent_provider)?;
                continue;
            }
            provider("agent.sub_agents", &sub.provider)?;
            if sub_provider.is_empty() {
                return Err(ConfigError::Key {
                    key: "agent.sub_agents",
                    problem: format!(
                        "agent {:?} has no provider (set agent.provider or its own)",
                        sub.name
                    ),
                });
            }
            stack.extend(sub.sub_agents.iter().map(|s| (s, sub_provider)));
        }
        Ok(())
    }

    /// A sub-agent that is a remote agent names one configured, sets nothing of its own
    /// but its name and description, and has a parent parent has a model to hand it the conversation.
    fn check_remote_sub_agent(
        &self,
        sub: &SubAgentSettings,
        parent_provider: &str,
    ) -> Result<(), ConfigError> {
        let refuse = |problem: String| {
            Err(ConfigError::Key {
                key: "agent.sub_agents",
                problem,
            })
        };
        if !self.remote_agents.iter().any(|r| r.name == sub.remote) {
            return refuse(format!(
                "agent {:?} is the remote agent {:?}, which no [[agent.remote_agents]] names",
                sub.name, sub.remote
            ));
        }
        let own = [
            ("instruction", sub.instruction.is_empty()),
            ("provider", sub.provider.is_empty()),
            ("model", sub.model.is_empty()),
            ("tools", sub.tools.is_empty()),
            ("sub_agents", sub.sub_agents.is_empty()),
        ];
        if let Some((field, _)) = own.iter().find(|(_, empty)| !empty) {
            return refuse(format!(
                "agent {:?} is the remote agent {:?}: its {field} is the remote's own, and \
                 cannot be set here",
                sub.name, sub.remote
            ));
        }
        if parent_provider.is_empty() {
            return refuse(format!(
                "agent {:?} is the remote agent {:?}: the agent handing it the conversation \
                 needs a provider (set agent.provider)",
                sub.name, sub.remote
            ));
        }
        Ok(())
    }
}
