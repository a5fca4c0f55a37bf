//! Anthropic Messages streams in the recorded format (`event:` name plus JSON `data:`).

use serde_json::{Value, json};

use super::fake_server::{FakeServer, Reply};
use super::*;

const KIND: ProviderKind = ProviderKind::Anthropic;

/// One SSE event named after its `type`, as Anthropic sends them.
fn event(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap_or_default()
    )
}

fn reply(events: &[Value]) -> Reply {
    let pieces: Vec<String> = events.iter().cloned().map(event).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    Reply::sse(&refs)
}

fn message_start() -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
           "content": [], "model": "test-model", "stop_reason": null,
           "usage": {"input_tokens": 25, "output_tokens": 1}}})
}

fn text_start(index: u64) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
}

fn text_delta(index: u64, text: &str) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}})
}

fn tool_start(index: u64, id: &str, name: &str) -> Value {
    json!({"type": "content_block_start", "index": index,
           "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})
}

fn json_delta(index: u64, partial: &str) -> Value {
    json!({"type": "content_block_delta", "index": index,
           "delta": {"type": "input_json_delta", "partial_json": partial}})
}

fn block_stop(index: u64) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn message_delta(output_tokens: u64) -> Value {
    json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
           "usage": {"output_tokens": output_tokens}})
}

fn message_stop() -> Value {
    json!({"type": "message_stop"})
}

#[tokio::test]
async fn request_carries_model_system_blocks_tools_and_key() {
    let server = FakeServer::start(vec![hi_reply(KIND)]).await;
    let mut params = conversation();
    params
        .messages
        .push(Message::text(Role::System, "Answer in French."));
    events(provider(KIND, &server, Some("sk-ant")).as_ref(), params).await;
    let request = &server.requests()[0];
    assert_eq!(request.target, "/v1/messages");
    assert_eq!(request.headers["x-api-key"], "sk-ant");
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    let body = &request.body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 100);
    assert_eq!(body["system"], "Be brief.\nAnswer in French.");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "{\"temp\":21}"}]},
        ])
    );
    assert_eq!(
        body["tools"][0],
        json!({"name": "weather", "description": "Current weather",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}})
    );
}

#[tokio::test]
async fn max_tokens_defaults_and_parallel_results_share_one_user_turn() {
    let server = FakeServer::start(vec![hi_reply(KIND)]).await;
    let mut params = conversation();
    params.max_tokens = None;
    params.messages[2].tool_calls.push(ToolCall {
        id: "call_2".into(),
        name: "weather".into(),
        arguments: r#"{"city":"Rome"}"#.into(),
    });
    params.messages.push(Message {
        role: Role::Tool,
        content: r#"{"temp":25}"#.into(),
        tool_calls: Vec::new(),
        tool_call_id: Some("call_2".into()),
        name: None,
    });
    events(provider(KIND, &server, None).as_ref(), params).await;
    let request = &server.requests()[0];
    assert!(!request.headers.contains_key("x-api-key"));
    assert_eq!(request.body["max_tokens"], 4096);
    let messages = request.body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 3);
    let results: Vec<&str> = messages[2]["content"]
        .as_array()
        .expect("blocks")
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(results, ["call_1", "call_2"]);
}

#[tokio::test]
async fn plain_text_with_usage_then_done() {
    let server = FakeServer::start(vec![reply(&[
        message_start(),
        text_start(0),
        json!({"type": "ping"}),
        text_delta(0, "Bonjour"),
        text_delta(0, " !"),
        block_stop(0),
        message_delta(7),
        message_stop(),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(
        got,
        [
            ProviderEvent::TextDelta("Bonjour".into()),
            ProviderEvent::TextDelta(" !".into()),
            ProviderEvent::Usage(Usage {
                input_tokens: 25,
                output_tokens: 7
            }),
            ProviderEvent::Done,
        ]
    );
}

#[tokio::test]
async fn tool_use_arguments_arrive_as_fragments_with_the_block_index() {
    let server = FakeServer::start(vec![reply(&[
        message_start(),
        text_start(0),
        text_delta(0, "Checking."),
        block_stop(0),
        tool_start(1, "toolu_01", "weather"),
        json_delta(1, ""),
        json_delta(1, "{\"city\": \"Pa"),
        json_delta(1, "ris\"}"),
        block_stop(1),
        message_delta(20),
        message_stop(),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(text(&got), "Checking.");
    let parts = fragments(&got);
    assert_eq!(
        parts[0],
        ToolCallFragment {
            index: Some(1),
            id: Some("toolu_01".into()),
            name: Some("weather".into()),
            arguments: String::new(),
        }
    );
    assert!(parts.iter().all(|f| f.index == Some(1)));
    let arguments: String = parts.iter().map(|f| f.arguments.as_str()).collect();
    assert_eq!(arguments, r#"{"city": "Paris"}"#);
    assert_eq!(got.last(), Some(&ProviderEvent::Done));
}

#[tokio::test]
async fn two_parallel_tool_uses_keep_their_indexes() {
    let server = FakeServer::start(vec![reply(&[
        message_start(),
        tool_start(0, "toolu_a", "weather"),
        json_delta(0, "{\"city\":\"Oslo\"}"),
        block_stop(0),
        tool_start(1, "toolu_b", "time"),
        json_delta(1, "{\"tz\":"),
        json_delta(1, "\"CET\"}"),
        block_stop(1),
        message_delta(30),
        message_stop(),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    let parts = fragments(&got);
    let starts: Vec<(Option<usize>, Option<&str>)> = parts
        .iter()
        .filter(|f| f.id.is_some())
        .map(|f| (f.index, f.id.as_deref()))
        .collect();
    assert_eq!(
        starts,
        [(Some(0), Some("toolu_a")), (Some(1), Some("toolu_b"))]
    );
    let args_of = |i| -> String {
        parts
            .iter()
            .filter(|f| f.index == Some(i))
            .map(|f| f.arguments.as_str())
            .collect()
    };
    assert_eq!(args_of(0), r#"{"city":"Oslo"}"#);
    assert_eq!(args_of(1), r#"{"tz":"CET"}"#);
}

#[tokio::test]
async fn an_error_event_ends_the_stream_with_its_status() {
    let server = FakeServer::start(vec![reply(&[
        message_start(),
        text_start(0),
        text_delta(0, "Par"),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        text_delta(0, "never seen"),
        message_stop(),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(got[0], ProviderEvent::TextDelta("Par".into()));
    match &got[1..] {
        [ProviderEvent::Error(error @ ProviderError::Http { status: 529, body })] => {
            assert!(body.contains("Overloaded"));
            assert!(error.is_retryable());
        }
        other => panic!("expected one overloaded error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stream_cut_before_message_stop_is_stream_ended() {
    let server = FakeServer::start(vec![reply(&[
        message_start(),
        tool_start(0, "toolu_a", "weather"),
        json_delta(0, "{\"city\":"),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(fragments(&got).len(), 2);
    assert_eq!(
        got.last(),
        Some(&ProviderEvent::Error(ProviderError::StreamEnded))
    );
}
