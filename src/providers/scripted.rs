//! A provider that plays back scripted answers, for tests of everything that consumes
//! provider streams (the model actor, the agent loop). It is never built from
//! configuration: tests construct it with the exact events each call should produce, and
//! read back the requests it received.

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use super::{GenerateParams, Provider, ProviderError, ProviderEvent};

/// One scripted answer: a stream of events, or a failure before any stream.
pub type Script = Result<Vec<ProviderEvent>, ProviderError>;

/// Answers each `generate` with the next script, in order.
pub struct ScriptedProvider {
    id: String,
    model: String,
    scripts: Mutex<VecDeque<Script>>,
    requests: Mutex<Vec<GenerateParams>>,
}

impl ScriptedProvider {
    pub fn new(id: &str, model: &str, scripts: impl IntoIterator<Item = Script>) -> Self {
        Self {
            id: id.to_owned(),
            model: model.to_owned(),
            scripts: Mutex::new(scripts.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<GenerateParams> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn id(&self) -> &str {
        &self.id
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn generate(
        &self,
        params: GenerateParams,
    ) -> Result<BoxStream<'static, ProviderEvent>, ProviderError> {
        if let Ok(mut requests) = self.requests.lock() {
            requests.push(params);
        }
        let next = self
            .scripts
            .lock()
            .ok()
            .and_then(|mut scripts| scripts.pop_front())
            .unwrap_or_else(|| Err(ProviderError::Config("no scripted answer left".into())));
        Ok(futures_util::stream::iter(next?).boxed())
    }
}
