//! Gemini `streamGenerateContent?alt=sse` streams in the recorded format: whole
//! `GenerateContentResponse` objects, no end marker, cumulative `usageMetadata`.

use serde_json::{Value, json};

use super::fake_server::{FakeServer, Reply};
use super::*;

const KIND: ProviderKind = ProviderKind::Gemini;

fn chunk(parts: Value, finish: Option<&str>, usage: Option<(u64, u64)>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(reason) = finish {
        candidate["finishReason"] = json!(reason);
    }
    let mut c = json!({"candidates": [candidate], "modelVersion": "test-model"});
    if let Some((prompt, output)) = usage {
        c["usageMetadata"] = json!({"promptTokenCount": prompt, "candidatesTokenCount": output,
                                    "totalTokenCount": prompt + output});
    }
    c
}

#[tokio::test]
async fn request_carries_contents_system_instruction_declarations_and_key() {
    let server = FakeServer::start(vec![hi_reply(KIND)]).await;
    events(
        provider(KIND, &server, Some("g-key")).as_ref(),
        conversation(),
    )
    .await;
    let request = &server.requests()[0];
    assert_eq!(
        request.target,
        "/v1/models/test-model:streamGenerateContent?alt=sse"
    );
    assert_eq!(request.headers["x-goog-api-key"], "g-key");
    let body = &request.body;
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "Be brief."}]})
    );
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
            // The tool message had no name: it is found through its call's id.
            {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"temp": 21}}}]},
        ])
    );
    let declaration = &body["tools"][0]["functionDeclarations"][0];
    assert_eq!(declaration["name"], "weather");
    assert_eq!(declaration["parametersJsonSchema"]["type"], "object");
    assert_eq!(body["generationConfig"]["maxOutputTokens"], 100);
    assert_eq!(body["generationConfig"]["temperature"], 0.5);
}

#[tokio::test]
async fn a_model_override_is_in_the_path_and_plain_results_are_wrapped() {
    let server = FakeServer::start(vec![hi_reply(KIND)]).await;
    let mut params = conversation();
    params.model = Some("gemini-other".into());
    params.messages[3].content = "21 degrees".into();
    params.messages[3].name = Some("weather".into());
    events(provider(KIND, &server, None).as_ref(), params).await;
    let request = &server.requests()[0];
    assert_eq!(
        request.target,
        "/v1/models/gemini-other:streamGenerateContent?alt=sse"
    );
    assert!(!request.headers.contains_key("x-goog-api-key"));
    assert_eq!(
        request.body["contents"][2]["parts"][0]["functionResponse"]["response"],
        json!({"result": "21 degrees"})
    );
}

#[tokio::test]
async fn plain_text_then_usage_once_then_done() {
    let server = FakeServer::start(vec![Reply::sse_data(&[
        chunk(json!([{"text": "Hello"}]), None, Some((10, 1))),
        chunk(json!([{"text": ", world"}]), None, Some((10, 3))),
        chunk(json!([{"text": "!"}]), Some("STOP"), Some((10, 4))),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(
        got,
        [
            ProviderEvent::TextDelta("Hello".into()),
            ProviderEvent::TextDelta(", world".into()),
            ProviderEvent::TextDelta("!".into()),
            ProviderEvent::Usage(Usage {
                input_tokens: 10,
                output_tokens: 4
            }),
            ProviderEvent::Done,
        ]
    );
}

#[tokio::test]
async fn parallel_function_calls_are_whole_fragments_with_unique_ids() {
    let server = FakeServer::start(vec![Reply::sse_data(&[
        chunk(json!([{"text": "Checking both."}]), None, None),
        chunk(
            json!([
                {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}},
                {"functionCall": {"name": "weather", "args": {"city": "Rome"}}},
            ]),
            None,
            None,
        ),
        chunk(
            json!([{"functionCall": {"name": "time", "args": {"tz": "CET"}, "id": "fc-given"}}]),
            Some("STOP"),
            None,
        ),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    let parts = fragments(&got);
    let summary: Vec<(Option<usize>, &str, &str)> = parts
        .iter()
        .map(|f| {
            (
                f.index,
                f.id.as_deref().unwrap_or_default(),
                f.name.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    // Same-tool calls still get distinct ids (unique across streams too: a later turn's
    // call never repeats an earlier one's id); an id Gemini does send is kept.
    assert_eq!(summary.len(), 3);
    assert_eq!((summary[0].0, summary[0].2), (Some(0), "weather"));
    assert_eq!((summary[1].0, summary[1].2), (Some(1), "weather"));
    assert!(summary[0].1.starts_with("call_weather_"), "{summary:?}");
    assert!(summary[1].1.starts_with("call_weather_"), "{summary:?}");
    assert_ne!(summary[0].1, summary[1].1);
    assert_eq!(summary[2], (Some(2), "fc-given", "time"));
    let args: Value = serde_json::from_str(&parts[1].arguments).expect("arguments are JSON");
    assert_eq!(args, json!({"city": "Rome"}));
    assert_eq!(got.last(), Some(&ProviderEvent::Done));
}

#[tokio::test]
async fn an_error_chunk_ends_the_stream_with_its_code() {
    let server = FakeServer::start(vec![Reply::sse_data(&[
        chunk(json!([{"text": "Par"}]), None, None),
        json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}),
        chunk(json!([{"text": "never seen"}]), Some("STOP"), None),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(got[0], ProviderEvent::TextDelta("Par".into()));
    match &got[1..] {
        [ProviderEvent::Error(ProviderError::Http { status: 503, body })] => {
            assert!(body.contains("overloaded"))
        }
        other => panic!("expected one 503 error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stream_without_a_finish_reason_is_stream_ended() {
    let server = FakeServer::start(vec![Reply::sse_data(&[
        chunk(json!([{"text": "Hel"}]), None, Some((5, 1))),
        chunk(json!([{"text": "lo"}]), None, Some((5, 2))),
    ])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(
        got,
        [
            ProviderEvent::TextDelta("Hel".into()),
            ProviderEvent::TextDelta("lo".into()),
            ProviderEvent::Error(ProviderError::StreamEnded),
        ]
    );
}

#[tokio::test]
async fn thought_parts_are_not_answer_text() {
    let server = FakeServer::start(vec![Reply::sse_data(&[chunk(
        json!([{"text": "thinking…", "thought": true}, {"text": "Answer"}]),
        Some("STOP"),
        None,
    )])])
    .await;
    let got = events(provider(KIND, &server, None).as_ref(), conversation()).await;
    assert_eq!(
        got,
        [
            ProviderEvent::TextDelta("Answer".into()),
            ProviderEvent::Done
        ]
    );
}
