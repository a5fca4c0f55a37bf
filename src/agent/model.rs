//! `ModelAdapter`: one model turn over any provider, as ADK-shaped responses (contract A.11).
//!
//! Non-streaming, the whole provider stream is consumed and exactly one final response is
//! yielded. Streaming, each text delta is yielded at once as a partial response and the
//! final response repeats the whole text with the calls. Tool-call fragments are assembled
//! by index and appear only in the final response: a runner executes the calls of every
//! non-partial response, so announcing them earlier would run each tool twice.
//! A provider stream that stops without `Done` is an error: its text may be cut short and
//! its calls incomplete, and treating it as a finished turn would persist a broken answer.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::{BoxStream, Stream, StreamExt};
use serde_json::{Map, Value};

use super::{Content, LlmRequest, LlmResponse, ROLE_MODEL, convert_messages};
use crate::providers::{
    GenerateParams, Provider, ProviderError, ProviderEvent, ToolCallFragment, Usage,
};
use crate::session::{FunctionCall, IdSource, Part};

/// Why a model turn failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    /// The provider refused the request or failed during the stream.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The provider stream ended without its terminal `Done` event.
    #[error("model stream ended before the turn was complete")]
    StreamEndedWithoutDone,
}

/// Runs model turns on one provider.
#[derive(Clone)]
pub struct ModelAdapter {
    pub provider: Arc<dyn Provider>,
}

impl ModelAdapter {
    /// An adapter over `provider`.
    pub fn new(provider: Arc<dyn Provider>) -> Self {
        Self { provider }
    }

    /// The model used when a request names none.
    pub fn name(&self) -> &str {
        self.provider.model()
    }

    /// Runs one turn. The stream ends after the final response or after the first error.
    pub fn generate(
        &self,
        req: LlmRequest,
        stream: bool,
    ) -> impl Stream<Item = Result<LlmResponse, AgentError>> + Send + 'static {
        let params = GenerateParams {
            model: req.model,
            messages: convert_messages(&req.contents, req.system_instruction.as_ref()),
            tools: req.tools,
            temperature: req.temperature,
            max_tokens: req.max_tokens.filter(|n| *n > 0),
        };
        let start = State::Start {
            provider: Arc::clone(&self.provider),
            params,
        };
        futures_util::stream::unfold(start, move |state| next(state, stream))
    }
}

/// Where a turn's stream stands between two yielded responses.
enum State {
    Start {
        provider: Arc<dyn Provider>,
        params: GenerateParams,
    },
    Receiving {
        events: BoxStream<'static, ProviderEvent>,
        turn: Turn,
    },
    Finished,
}

type Step = Option<(Result<LlmResponse, AgentError>, State)>;

/// Advances the turn to its next response, if any.
async fn next(state: State, stream: bool) -> Step {
    let (mut events, mut turn) = match state {
        State::Start { provider, params } => match provider.generate(params).await {
            Ok(events) => (events, Turn::default()),
            Err(error) => return Some((Err(error.into()), State::Finished)),
        },
        State::Receiving { events, turn } => (events, turn),
        State::Finished => return None,
    };
    loop {
        let Some(event) = events.next().await else {
            return Some((Err(AgentError::StreamEndedWithoutDone), State::Finished));
        };
        match event {
            ProviderEvent::TextDelta(delta) if delta.is_empty() => {}
            ProviderEvent::TextDelta(delta) => {
                turn.text.push_str(&delta);
                if stream {
                    let partial = LlmResponse {
                        content: Some(model_content(vec![Part::Text(delta)])),
                        partial: true,
                        turn_complete: false,
                        usage: None,
                    };
                    return Some((Ok(partial), State::Receiving { events, turn }));
                }
            }
            ProviderEvent::ToolCallFragment(fragment) => turn.calls.add(fragment),
            // Each provider reports complete counts, so the latest report is the turn's.
            ProviderEvent::Usage(usage) => turn.usage = Some(usage),
            ProviderEvent::Done => return Some((Ok(turn.finish()), State::Finished)),
            ProviderEvent::Error(error) => return Some((Err(error.into()), State::Finished)),
        }
    }
}

fn model_content(parts: Vec<Part>) -> Content {
    Content {
        role: ROLE_MODEL.to_owned(),
        parts,
    }
}

/// What a turn has produced so far.
#[derive(Default)]
struct Turn {
    text: String,
    calls: CallAssembler,
    usage: Option<Usage>,
}

impl Turn {
    /// The final response: all text, then every assembled call.
    fn finish(self) -> LlmResponse {
        let mut parts = Vec::new();
        if !self.text.is_empty() {
            parts.push(Part::Text(self.text));
        }
        parts.extend(self.calls.finish().into_iter().map(Part::FunctionCall));
        LlmResponse {
            content: (!parts.is_empty()).then(|| model_content(parts)),
            partial: false,
            turn_complete: true,
            usage: self.usage,
        }
    }
}

/// Assembles streamed tool-call fragments into calls.
///
/// A fragment carrying an index, an id or a name starts a call or continues the call with
/// that index; one carrying only argument text continues the latest call (Anthropic and
/// OpenAI both send argument deltas right after their call's start). Argument text before
/// any start belongs to no call and is dropped.
#[derive(Default)]
struct CallAssembler {
    /// In order of first appearance.
    calls: Vec<PartialCall>,
    /// Provider index → position in `calls`.
    by_index: HashMap<usize, usize>,
    /// Position of the call the latest fragment went to.
    current: Option<usize>,
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

impl CallAssembler {
    fn add(&mut self, fragment: ToolCallFragment) {
        let starts = fragment.index.is_some()
            || fragment.id.as_deref().is_some_and(|id| !id.is_empty())
            || fragment
                .name
                .as_deref()
                .is_some_and(|name| !name.is_empty());
        let position = if starts {
            match fragment.index.and_then(|i| self.by_index.get(&i).copied()) {
                Some(existing) => existing,
                None => {
                    self.calls.push(PartialCall::default());
                    let position = self.calls.len() - 1;
                    if let Some(index) = fragment.index {
                        self.by_index.insert(index, position);
                    }
                    position
                }
            }
        } else {
            match self.current {
                Some(position) => position,
                None => {
                    tracing::warn!("tool-call argument fragment before any call; dropped");
                    return;
                }
            }
        };
        self.current = Some(position);
        let Some(call) = self.calls.get_mut(position) else {
            return;
        };
        if let Some(id) = fragment.id.filter(|id| !id.is_empty()) {
            call.id = id;
        }
        if let Some(name) = fragment.name.filter(|name| !name.is_empty()) {
            call.name = name;
        }
        call.arguments.push_str(&fragment.arguments);
    }

    /// The named calls, with ids generated where the provider sent none.
    fn finish(self) -> Vec<FunctionCall> {
        let mut ids = IdSource::random();
        self.calls
            .into_iter()
            .filter(|call| !call.name.is_empty())
            .map(|call| FunctionCall {
                id: if call.id.is_empty() {
                    ids.call_id(&call.name)
                } else {
                    call.id
                },
                args: parse_arguments(&call.name, &call.arguments),
                name: call.name,
            })
            .collect()
    }
}

/// The arguments object. Text that is not a JSON object gives no arguments: the tool then
/// reports the missing ones to the model, which can correct itself.
fn parse_arguments(name: &str, text: &str) -> Map<String, Value> {
    if text.trim().is_empty() {
        return Map::new();
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => map,
        _ => {
            tracing::warn!(
                tool = name,
                "tool-call arguments are not a JSON object; ignored"
            );
            Map::new()
        }
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
