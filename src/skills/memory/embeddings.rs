//! The optional embeddings client: an OpenAI-compatible `POST {url}/embeddings` with
//! `{"model", "input"}`, answered by `{"data": [{"embedding": [..]}]}` (OpenAI, Ollama's
//! `/v1`, vLLM, llama.cpp server, LiteLLM …).
//!
//! TLS is rustls with the ring provider (installed process-wide on first use; an
//! already installed provider is kept). Every request is bounded by the configured
//! timeout and every answer by [`MAX_RESPONSE_BYTES`]; a vector must be non-empty, at
//! most [`MAX_DIMENSIONS`] long and finite, so nothing downstream meets a NaN.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use crate::config::MemorySettings;

/// Largest embeddings response read.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// Longest vector accepted.
pub const MAX_DIMENSIONS: usize = 16_384;

/// Why no embedding was obtained.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbeddingsError {
    /// The settings cannot work (no model, a bad URL, a missing API key variable).
    #[error("embeddings misconfigured: {0}")]
    Config(String),
    /// The endpoint could not be reached or did not answer in time.
    #[error("embeddings request failed: {0}")]
    Request(String),
    /// The endpoint answered with an error status.
    #[error("embeddings endpoint answered HTTP {0}")]
    Status(u16),
    /// The answer was not a usable vector.
    #[error("embeddings response unusable: {0}")]
    Response(String),
}

/// A client for one endpoint and model.
#[derive(Debug, Clone)]
pub struct EmbeddingsClient {
    http: reqwest::Client,
    endpoint: String,
    model: String,
    api_key: Option<String>,
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingData>,
}

#[derive(Deserialize)]
struct EmbeddingData {
    embedding: Vec<f32>,
}

impl EmbeddingsClient {
    /// The client the settings ask for: `None` when `embeddings_url` is empty. The API
    /// key is read from the environment variable named by `embeddings_api_key_env`
    /// (when that is set, the variable must exist: a key that silently went missing
    /// would only show up later as 401s).
    pub fn from_settings(
        settings: &MemorySettings,
    ) -> Result<Option<EmbeddingsClient>, EmbeddingsError> {
        let url = settings.embeddings_url.trim();
        if url.is_empty() {
            return Ok(None);
        }
        let api_key = match settings.embeddings_api_key_env.trim() {
            "" => None,
            name => Some(std::env::var(name).map_err(|_| {
                EmbeddingsError::Config(format!(
                    "memory.embeddings_api_key_env names {name}, which is not set"
                ))
            })?),
        };
        let timeout = Duration::from_millis(settings.embeddings_timeout_ms);
        EmbeddingsClient::new(url, &settings.embeddings_model, api_key, timeout).map(Some)
    }

    /// A client posting to `{base_url}/embeddings`.
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<EmbeddingsClient, EmbeddingsError> {
        let base_url = base_url.trim().trim_end_matches('/');
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(EmbeddingsError::Config(
                "memory.embeddings_url must be an http:// or https:// URL".into(),
            ));
        }
        if model.trim().is_empty() {
            return Err(EmbeddingsError::Config(
                "memory.embeddings_model is required when embeddings_url is set".into(),
            ));
        }
        // Err means another part of the process installed a provider first: keep it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| EmbeddingsError::Config(format!("HTTP client: {e}")))?;
        Ok(EmbeddingsClient {
            http,
            endpoint: format!("{base_url}/embeddings"),
            model: model.trim().to_owned(),
            api_key,
        })
    }

    /// The embedding of `text`.
    pub async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbeddingsError> {
        let mut request = self
            .http
            .post(&self.endpoint)
            .json(&json!({"model": self.model, "input": text}));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| EmbeddingsError::Request(e.to_string()))?;
        if !response.status().is_success() {
            return Err(EmbeddingsError::Status(response.status().as_u16()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| EmbeddingsError::Request(e.to_string()))?
        {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(EmbeddingsError::Response(format!(
                    "larger than {MAX_RESPONSE_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        let parsed: EmbeddingsResponse =
            serde_json::from_slice(&body).map_err(|e| EmbeddingsError::Response(e.to_string()))?;
        let vector = parsed
            .data
            .into_iter()
            .next()
            .map(|d| d.embedding)
            .ok_or_else(|| EmbeddingsError::Response("no embedding in `data`".into()))?;
        if vector.is_empty() || vector.len() > MAX_DIMENSIONS {
            return Err(EmbeddingsError::Response(format!(
                "{} dimensions (expected 1 to {MAX_DIMENSIONS})",
                vector.len()
            )));
        }
        // Numbers beyond f32's range arrive as infinities.
        if !vector.iter().all(|x| x.is_finite()) {
            return Err(EmbeddingsError::Response("non-finite component".into()));
        }
        Ok(vector)
    }
}
