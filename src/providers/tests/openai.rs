//! OpenAI Chat Completions streams as OpenAI (and vLLM/Ollama) send them.

use serde_json::json;

use super::fake_server::{FakeServer, Reply};
use super::*;

const KIND: ProviderKind = ProviderKind::Openai;

fn chunk(delta: serde_json::Value) -> serde_json::Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "test-model",
           "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
}

fn with_done(mut events: Vec<serde_json::Value>) -> Reply {
    let mut pieces: Vec<String> = events.drain(..).map(|e| format!("data: {e}\n\n")).collect();
    pieces.push("data: [DONE]\n\n".into());
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    Reply::sse(&refs)
}

#[tokio::test]
async fn request_carries_model_roles_tools_and_bearer_key() {
    let server = FakeServer::start(vec![hi_reply(KIND)]).await;
    events(
        provider(KIND, &server, Some("sk-test")).as_ref(),
        conversation(),
    )
    .await;
    let requests = server.requests();
    let request = &requests[0];
    assert_eq!(request.target, "/v1/chat/completions");
    assert_eq!(request.headers["authorization"], "Bearer sk-test");
    let body = &request.body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 100);
    assert_eq!(body["temperature"], 0.5);
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    let assistant = &body["messages"][2];
    assert_eq!(assistant["content"], serde_json::Value::Null);
    assert_eq!(
        assistant["tool_calls"][0],
        json!({"id": "call_1", "type": "function",
               "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}})
    );
    assert_eq!(body["messages"][3]["tool_call_id"], "call_1");
    assert_eq!(body["messages"][3]["content"], "{\"temp\":21}");
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "weather");
    assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
}

#[tokio::test]
async fn a_model_override_and_no_key_send_no_authorization() {
    let server = FakeServer::start(vec![hi_reply(KIND)]).await;
    let mut params = conversation();
    params.model = Some("other-model".into());
    params.tools.clear();
    events(provider(KIND, &server, None).as_ref(), params).await;
    let request = &server.requests()[0];
    assert_eq!(request.body["model"], "other-model");
    assert!(!request.headers.contains_key("authorization"));
    assert!(request.body.get("tools").is_none());
}

#[tokio::test]
async fn plain_text_streams_as_deltas_then_done() {
    let server = FakeServer::start(vec![with_done(vec![
        chunk(json!({"role": "assistant", "content": ""})),
        chunk(json!({"content": "Hello"})),
        chunk(json!({"content": ", world"})),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(
        got,
        [
            ProviderEvent::TextDelta("Hello".into()),
            ProviderEvent::TextDelta(", world".into()),
            ProviderEvent::Done,
        ]
    );
}

#[tokio::test]
async fn tool_call_arguments_arrive_in_fragments_split_across_reads() {
    // The second event is cut mid-line across two TCP writes.
    let server = FakeServer::start(vec![Reply::sse(&[
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"weather\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"argum",
        "ents\":\"{\\\"city\\\":\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    let parts = fragments(&got);
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[0].id.as_deref(), Some("call_a"));
    assert_eq!(parts[0].name.as_deref(), Some("weather"));
    assert!(parts.iter().all(|f| f.index == Some(0)));
    assert!(
        parts[1..]
            .iter()
            .all(|f| f.id.is_none() && f.name.is_none())
    );
    let arguments: String = parts.iter().map(|f| f.arguments.as_str()).collect();
    assert_eq!(arguments, r#"{"city":"Paris"}"#);
    assert_eq!(got.last(), Some(&ProviderEvent::Done));
}

#[tokio::test]
async fn two_parallel_calls_keep_their_indexes() {
    let call = |index: u64, id: Option<&str>, name: Option<&str>, args: &str| {
        let mut c = json!({"index": index, "function": {"arguments": args}});
        if let (Some(id), Some(name)) = (id, name) {
            c["id"] = json!(id);
            c["type"] = json!("function");
            c["function"]["name"] = json!(name);
        }
        chunk(json!({"tool_calls": [c]}))
    };
    let server = FakeServer::start(vec![with_done(vec![
        call(0, Some("call_a"), Some("weather"), "{\"city\":"),
        call(1, Some("call_b"), Some("time"), ""),
        call(0, None, None, "\"Oslo\"}"),
        call(1, None, None, "{\"tz\":\"CET\"}"),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    let parts = fragments(&got);
    let args_of = |i| -> String {
        parts
            .iter()
            .filter(|f| f.index == Some(i))
            .map(|f| f.arguments.as_str())
            .collect()
    };
    assert_eq!(args_of(0), r#"{"city":"Oslo"}"#);
    assert_eq!(args_of(1), r#"{"tz":"CET"}"#);
    assert_eq!(parts[1].id.as_deref(), Some("call_b"));
    assert_eq!(parts[1].name.as_deref(), Some("time"));
}

#[tokio::test]
async fn the_usage_chunk_becomes_a_usage_event() {
    let server = FakeServer::start(vec![with_done(vec![
        chunk(json!({"content": "ok"})),
        json!({"id": "chatcmpl-1", "choices": [],
               "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(
        got,
        [
            ProviderEvent::TextDelta("ok".into()),
            ProviderEvent::Usage(Usage {
                input_tokens: 12,
                output_tokens: 3
            }),
            ProviderEvent::Done,
        ]
    );
}

#[tokio::test]
async fn an_error_chunk_ends_the_stream_with_an_error() {
    let server = FakeServer::start(vec![with_done(vec![
        chunk(json!({"content": "partial"})),
        json!({"error": {"message": "The server had an error", "type": "server_error", "code": null}}),
        chunk(json!({"content": "never seen"})),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0], ProviderEvent::TextDelta("partial".into()));
    match &got[1] {
        ProviderEvent::Error(ProviderError::Http { status: 500, body }) => {
            assert!(body.contains("The server had an error"))
        }
        other => panic!("expected an Http error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stream_cut_before_done_is_stream_ended() {
    let server = FakeServer::start(vec![Reply::sse_data(&[
        chunk(json!({"content": "Hel"})),
        chunk(json!({"content": "lo"})),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(text(&got), "Hello");
    assert_eq!(
        got.last(),
        Some(&ProviderEvent::Error(ProviderError::StreamEnded))
    );
}

#[tokio::test]
async fn data_that_is_not_json_is_a_decode_error() {
    let server = FakeServer::start(vec![Reply::sse(&[
        "data: {not json\n\n",
        "data: [DONE]\n\n",
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert!(matches!(
        got.as_slice(),
        [ProviderEvent::Error(ProviderError::Decode(_))]
    ));
}
