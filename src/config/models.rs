//! `[providers.<name>]` and `[models]`: the model providers by name, and what every
//! provider's actor enforces (its circuit breaker).

use serde::{Deserialize, Serialize};

/// Which API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, llama.cpp, LM Studio, …).
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini `streamGenerateContent`.
    Gemini,
}

/// One model provider (`[providers.<name>]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    pub kind: ProviderKind,
    /// e.g. `http://127.0.0.1:11434/v1` for a local Ollama.
    pub base_url: String,
    pub model: String,
    /// Name of the environment variable holding the API key (empty: no key).
    #[serde(default)]
    pub api_key_env: String,
    /// Whole-request timeout (including the stream), in ms.
    #[serde(default = "ProviderSettings::default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "ProviderSettings::default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Retries of a request answered 429 or 5xx (or not connected), with backoff.
    #[serde(default = "ProviderSettings::default_max_retries")]
    pub max_retries: u32,
    /// First backoff delay in ms (doubled each retry; `Retry-After` wins when given).
    #[serde(default = "ProviderSettings::default_retry_base_ms")]
    pub retry_base_ms: u64,
    /// Requests to this provider at once.
    #[serde(default = "ProviderSettings::default_max_concurrency")]
    pub max_concurrency: usize,
}

impl ProviderSettings {
    fn default_timeout_ms() -> u64 {
        120_000
    }
    fn default_connect_timeout_ms() -> u64 {
        5_000
    }
    fn default_max_retries() -> u32 {
        2
    }
    fn default_retry_base_ms() -> u64 {
        500
    }
    fn default_max_concurrency() -> usize {
        8
    }
}

/// What every model provider's actor enforces (`[models]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSettings {
    /// Consecutive failed generations after which a provider's circuit opens.
    pub breaker_failures: u32,
    /// How long an open circuit fails calls at once before letting one through, in seconds.
    pub breaker_cooldown_secs: u64,
}

impl Default for ModelSettings {
    fn default() -> Self {
        Self {
            breaker_failures: 5,
            breaker_cooldown_secs: 30,
        }
    }
}
