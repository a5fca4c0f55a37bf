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
            tool_choice: req.tool_choice,
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
mod tests {
    //! Contract A.11 scenarios for `ModelAdapter` (origins' `model_test.go` and accumulator tests).

    use futures_util::StreamExt;
    use serde_json::json;

    use super::*;
    use crate::providers::{Message, Role, ScriptedProvider};
    use crate::session::Part;

    fn provider(script: Result<Vec<ProviderEvent>, ProviderError>) -> Arc<ScriptedProvider> {
        Arc::new(ScriptedProvider::new("mock", "test-model", [script]))
    }

    fn user(text: &str) -> Content {
        Content {
            role: "user".into(),
            parts: vec![Part::Text(text.into())],
        }
    }

    fn request() -> LlmRequest {
        LlmRequest {
            contents: vec![user("hi")],
            ..LlmRequest::default()
        }
    }

    async fn run(
        provider: &Arc<ScriptedProvider>,
        req: LlmRequest,
        stream: bool,
    ) -> Vec<Result<LlmResponse, AgentError>> {
        let adapter = ModelAdapter::new(provider.clone());
        adapter.generate(req, stream).collect().await
    }

    fn text(delta: &str) -> ProviderEvent {
        ProviderEvent::TextDelta(delta.into())
    }

    fn fragment(
        index: Option<usize>,
        id: Option<&str>,
        name: Option<&str>,
        args: &str,
    ) -> ProviderEvent {
        ProviderEvent::ToolCallFragment(ToolCallFragment {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: args.into(),
        })
    }

    /// The final response's calls, asserting there is exactly one response in total.
    async fn single_turn_calls(events: Vec<ProviderEvent>) -> Vec<FunctionCall> {
        let responses = run(&provider(Ok(events)), request(), false).await;
        assert_eq!(responses.len(), 1, "{responses:?}");
        calls_of(responses[0].as_ref().unwrap())
    }

    fn calls_of(response: &LlmResponse) -> Vec<FunctionCall> {
        response
            .content
            .iter()
            .flat_map(|c| c.parts.iter())
            .filter_map(|p| match p {
                Part::FunctionCall(call) => Some(call.clone()),
                _ => None,
            })
            .collect()
    }

    fn text_of(response: &LlmResponse) -> String {
        response
            .content
            .iter()
            .flat_map(|c| c.parts.iter())
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn model_adapter_name() {
        let adapter = ModelAdapter::new(provider(Ok(vec![])));
        assert_eq!(adapter.name(), "test-model");
    }

    #[tokio::test]
    async fn model_adapter_text_delta() {
        let p = provider(Ok(vec![text("Hello "), text("world"), ProviderEvent::Done]));
        let responses = run(&p, request(), true).await;
        assert_eq!(responses.len(), 3, "{responses:?}");
        let first = responses[0].as_ref().unwrap();
        assert!(first.partial && !first.turn_complete);
        assert_eq!(text_of(first), "Hello ");
        assert_eq!(first.content.as_ref().unwrap().role, "model");
        let last = responses[2].as_ref().unwrap();
        assert!(last.turn_complete && !last.partial);
        assert_eq!(text_of(last), "Hello world");
    }

    #[tokio::test]
    async fn model_adapter_text_non_stream_yields_one_response() {
        let p = provider(Ok(vec![text("Hello "), text("world"), ProviderEvent::Done]));
        let responses = run(&p, request(), false).await;
        assert_eq!(responses.len(), 1);
        let only = responses[0].as_ref().unwrap();
        assert!(only.turn_complete && !only.partial);
        assert_eq!(text_of(only), "Hello world");
    }

    #[tokio::test]
    async fn model_adapter_tool_call() {
        let calls = single_turn_calls(vec![
            fragment(Some(0), Some("c1"), Some("exec"), r#"{"command":"ls"}"#),
            ProviderEvent::Done,
        ])
        .await;
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "exec");
        assert_eq!(calls[0].args["command"], json!("ls"));
    }

    #[tokio::test]
    async fn model_adapter_stream_tool_calls_only_in_final_response() {
        let p = provider(Ok(vec![
            text("Let me look."),
            fragment(Some(0), Some("c1"), Some("exec"), ""),
            fragment(Some(0), None, None, r#"{"command":"ls"}"#),
            ProviderEvent::Done,
        ]));
        let responses = run(&p, request(), true).await;
        assert_eq!(responses.len(), 2, "{responses:?}");
        assert!(calls_of(responses[0].as_ref().unwrap()).is_empty());
        let last = responses[1].as_ref().unwrap();
        assert_eq!(calls_of(last).len(), 1);
        assert_eq!(text_of(last), "Let me look.");
    }

    #[tokio::test]
    async fn model_adapter_stream_error() {
        let p = provider(Ok(vec![
            text("partial"),
            ProviderEvent::Error(ProviderError::Timeout),
            text("ignored"),
            ProviderEvent::Done,
        ]));
        let responses = run(&p, request(), true).await;
        assert_eq!(responses.len(), 2, "{responses:?}");
        assert!(responses[0].is_ok());
        assert_eq!(
            responses[1],
            Err(AgentError::Provider(ProviderError::Timeout))
        );
    }

    #[tokio::test]
    async fn model_adapter_provider_error() {
        for stream in [false, true] {
            let p = provider(Err(ProviderError::Connect("refused".into())));
            let responses = run(&p, request(), stream).await;
            let expected = Err(AgentError::Provider(ProviderError::Connect(
                "refused".into(),
            )));
            assert_eq!(responses, [expected]);
        }
    }

    #[tokio::test]
    async fn model_adapter_stream_without_done_is_an_error() {
        for stream in [false, true] {
            let p = provider(Ok(vec![
                text("cut"),
                fragment(Some(0), Some("c1"), Some("exec"), "{"),
            ]));
            let responses = run(&p, request(), stream).await;
            let last = responses.last().unwrap();
            assert_eq!(last, &Err(AgentError::StreamEndedWithoutDone));
            assert!(
                responses.iter().flatten().all(|r| !r.turn_complete),
                "no final response: {responses:?}"
            );
        }
    }

    #[tokio::test]
    async fn model_adapter_system_instruction() {
        let p = provider(Ok(vec![ProviderEvent::Done]));
        let req = LlmRequest {
            system_instruction: Some(Content {
                role: "system".into(),
                parts: vec![
                    Part::Text("You are a helpful assistant.".into()),
                    Part::Text("Always be concise.".into()),
                ],
            }),
            temperature: Some(0.2),
            max_tokens: Some(0),
            model: Some("other".into()),
            ..request()
        };
        run(&p, req, false).await;
        let sent = &p.requests()[0];
        assert_eq!(
            sent.messages,
            [
                Message::text(
                    Role::System,
                    "You are a helpful assistant.\nAlways be concise."
                ),
                Message::text(Role::User, "hi"),
            ]
        );
        assert_eq!(sent.temperature, Some(0.2));
        assert_eq!(sent.max_tokens, None, "0 means the provider's default");
        assert_eq!(sent.model.as_deref(), Some("other"));
    }

    #[tokio::test]
    async fn model_adapter_no_system_instruction() {
        let p = provider(Ok(vec![ProviderEvent::Done]));
        run(&p, request(), false).await;
        assert_eq!(p.requests()[0].messages, [Message::text(Role::User, "hi")]);
    }

    #[tokio::test]
    async fn model_adapter_usage_on_final_response() {
        let usage = Usage {
            input_tokens: 7,
            output_tokens: 3,
        };
        let p = provider(Ok(vec![
            text("x"),
            ProviderEvent::Usage(usage),
            ProviderEvent::Done,
        ]));
        let responses = run(&p, request(), false).await;
        assert_eq!(responses[0].as_ref().unwrap().usage, Some(usage));
    }

    #[tokio::test]
    async fn model_adapter_empty_turn_has_no_content() {
        let p = provider(Ok(vec![ProviderEvent::Done]));
        let responses = run(&p, request(), false).await;
        let only = responses[0].as_ref().unwrap();
        assert!(only.turn_complete && only.content.is_none());
    }

    #[tokio::test]
    async fn tool_call_accumulator_openai_streaming() {
        let calls = single_turn_calls(vec![
            fragment(Some(0), Some("call_abc"), Some("exec"), ""),
            fragment(Some(0), None, None, r#"{"comm"#),
            fragment(Some(0), None, None, r#"and":"ls"}"#),
            ProviderEvent::Done,
        ])
        .await;
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].id, "call_abc", "provider id kept");
        assert_eq!(calls[0].args["command"], json!("ls"));
    }

    #[tokio::test]
    async fn tool_call_accumulator_openai_multiple_calls() {
        let calls = single_turn_calls(vec![
            fragment(Some(0), Some("a"), Some("exec"), ""),
            fragment(Some(1), Some("b"), Some("read"), ""),
            fragment(Some(0), None, None, r#"{"command":"ls"}"#),
            fragment(Some(1), None, None, r#"{"path":"x"}"#),
            ProviderEvent::Done,
        ])
        .await;
        let summary: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|c| {
                (
                    c.id.as_str(),
                    c.name.as_str(),
                    Value::Object(c.args.clone()),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("a", "exec", json!({"command": "ls"})),
                ("b", "read", json!({"path": "x"})),
            ]
        );
    }

    #[tokio::test]
    async fn tool_call_accumulator_delta_without_index_continues_latest_call() {
        let calls = single_turn_calls(vec![
            fragment(None, Some("t1"), Some("search"), ""),
            fragment(None, None, None, r#"{"q":"#),
            fragment(None, None, None, r#""rust"}"#),
            ProviderEvent::Done,
        ])
        .await;
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].args["q"], json!("rust"));
    }

    #[tokio::test]
    async fn tool_call_accumulator_orphan_delta_dropped() {
        let calls = single_turn_calls(vec![
            fragment(None, None, None, r#"{"lost":true}"#),
            fragment(Some(0), Some("c1"), Some("exec"), r#"{"command":"ls"}"#),
            ProviderEvent::Done,
        ])
        .await;
        assert_eq!(calls.len(), 1);
        assert_eq!(
            Value::Object(calls[0].args.clone()),
            json!({"command": "ls"})
        );
    }

    #[tokio::test]
    async fn tool_call_accumulator_empty_name_dropped() {
        let calls = single_turn_calls(vec![
            fragment(Some(0), Some("c0"), None, "{}"),
            fragment(Some(1), Some("c1"), Some("exec"), "{}"),
            ProviderEvent::Done,
        ])
        .await;
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["exec"]);
    }

    #[tokio::test]
    async fn tool_call_accumulator_missing_ids_are_unique() {
        let calls = single_turn_calls(vec![
            fragment(Some(0), None, Some("search"), r#"{"q":"a"}"#),
            fragment(Some(1), None, Some("search"), r#"{"q":"b"}"#),
            ProviderEvent::Done,
        ])
        .await;
        assert_eq!(calls.len(), 2);
        assert!(calls.iter().all(|c| c.id.starts_with("call_search_")));
        assert_ne!(calls[0].id, calls[1].id);
    }

    #[tokio::test]
    async fn tool_call_accumulator_invalid_arguments_become_empty() {
        let calls = single_turn_calls(vec![
            fragment(Some(0), Some("c1"), Some("exec"), "{not json"),
            ProviderEvent::Done,
        ])
        .await;
        assert!(calls[0].args.is_empty());
    }
}
