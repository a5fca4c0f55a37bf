//! Provider tests against real HTTP servers on 127.0.0.1 (see `fake_server`): each provider's
//! recorded-format streams, and the retry policy every provider shares.

mod anthropic;
mod fake_server;
mod gemini;
mod openai;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use self::fake_server::{FakeServer, Reply};
use super::http::Transport;
use super::*;
use crate::config::{ProviderKind, ProviderSettings};

const ALL_KINDS: [ProviderKind; 3] = [
    ProviderKind::Openai,
    ProviderKind::Anthropic,
    ProviderKind::Gemini,
];

fn settings(kind: ProviderKind, base_url: &str) -> ProviderSettings {
    ProviderSettings {
        kind,
        base_url: base_url.to_owned(),
        model: "test-model".into(),
        api_key_env: String::new(),
        timeout_ms: 10_000,
        connect_timeout_ms: 2_000,
        max_retries: 2,
        // Keeps retry tests fast; the waits themselves are not asserted.
        retry_base_ms: 1,
        max_concurrency: 4,
    }
}

/// A provider of `kind` for `server` holding `key` (bypassing the environment).
fn provider(kind: ProviderKind, server: &FakeServer, key: Option<&str>) -> Arc<dyn Provider> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = settings(kind, &server.base_url());
    let transport = Transport::new(&settings).expect("transport");
    let key = key.map(str::to_owned);
    match kind {
        ProviderKind::Openai => {
            Arc::new(OpenAiProvider::new("p", &settings, key, transport).expect("provider"))
        }
        ProviderKind::Anthropic => {
            Arc::new(AnthropicProvider::new("p", &settings, key, transport).expect("provider"))
        }
        ProviderKind::Gemini => {
            Arc::new(GeminiProvider::new("p", &settings, key, transport).expect("provider"))
        }
    }
}

/// All events of one generation, checking the one-terminal-event contract on the way.
async fn events(provider: &dyn Provider, params: GenerateParams) -> Vec<ProviderEvent> {
    let stream = provider.generate(params).await.expect("stream starts");
    let events: Vec<ProviderEvent> = stream.collect().await;
    let terminals = events.iter().filter(|e| e.is_terminal()).count();
    assert_eq!(terminals, 1, "exactly one terminal event: {events:?}");
    assert!(
        events.last().is_some_and(ProviderEvent::is_terminal),
        "{events:?}"
    );
    events
}

/// A conversation with every role, a tool call and its result, and one tool.
fn conversation() -> GenerateParams {
    GenerateParams {
        model: None,
        messages: vec![
            Message::text(Role::System, "Be brief."),
            Message::text(Role::User, "Weather in Paris?"),
            Message {
                role: Role::Assistant,
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                }],
                tool_call_id: None,
                name: None,
            },
            Message {
                role: Role::Tool,
                content: r#"{"temp":21}"#.into(),
                tool_calls: Vec::new(),
                tool_call_id: Some("call_1".into()),
                name: None,
            },
        ],
        tools: vec![ToolDefinition {
            name: "weather".into(),
            description: "Current weather".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }],
        tool_choice: ToolChoice::Auto,
        temperature: Some(0.5),
        max_tokens: Some(100),
    }
}

fn text(events: &[ProviderEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ProviderEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn fragments(events: &[ProviderEvent]) -> Vec<ToolCallFragment> {
    events
        .iter()
        .filter_map(|e| match e {
            ProviderEvent::ToolCallFragment(f) => Some(f.clone()),
            _ => None,
        })
        .collect()
}

/// A complete one-word ("hi") answer in `kind`'s format.
fn hi_reply(kind: ProviderKind) -> Reply {
    match kind {
        ProviderKind::Openai => Reply::sse(&[
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
            "data: [DONE]\n\n",
        ]),
        ProviderKind::Anthropic => Reply::sse(&[
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ]),
        ProviderKind::Gemini => Reply::sse(&[
            "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"hi\"}]},\"finishReason\":\"STOP\"}]}\n\n",
        ]),
    }
}

/// Each API's way of saying "call a tool" and "call this tool"; the model's own choice is
/// each API's default, so it is sent as nothing.
#[tokio::test]
async fn a_tool_choice_is_sent_in_each_api_s_form() {
    let forced = |choice| GenerateParams {
        tool_choice: choice,
        ..conversation()
    };
    for kind in ALL_KINDS {
        let server = FakeServer::start((0..3).map(|_| hi_reply(kind)).collect()).await;
        let p = provider(kind, &server, None);
        for choice in [
            ToolChoice::Auto,
            ToolChoice::Required,
            ToolChoice::Tool("weather".into()),
        ] {
            events(p.as_ref(), forced(choice)).await;
        }
        let requests = server.requests();
        let choices: Vec<serde_json::Value> = requests
            .iter()
            .map(|r| match kind {
                ProviderKind::Openai | ProviderKind::Anthropic => r.body["tool_choice"].clone(),
                ProviderKind::Gemini => r.body["toolConfig"]["functionCallingConfig"].clone(),
            })
            .collect();
        let expected = match kind {
            ProviderKind::Openai => [
                json!(null),
                json!("required"),
                json!({"type": "function", "function": {"name": "weather"}}),
            ],
            ProviderKind::Anthropic => [
                json!(null),
                json!({"type": "any"}),
                json!({"type": "tool", "name": "weather"}),
            ],
            ProviderKind::Gemini => [
                json!(null),
                json!({"mode": "ANY"}),
                json!({"mode": "ANY", "allowedFunctionNames": ["weather"]}),
            ],
        };
        assert_eq!(choices, expected, "{kind:?}");
    }
    // No tools: nothing to choose from, so nothing is sent.
    let server = FakeServer::start(vec![hi_reply(ProviderKind::Openai)]).await;
    let p = provider(ProviderKind::Openai, &server, None);
    let params = GenerateParams {
        tools: Vec::new(),
        ..forced(ToolChoice::Required)
    };
    events(p.as_ref(), params).await;
    assert_eq!(server.requests()[0].body.get("tool_choice"), None);
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_then_streams() {
    for kind in ALL_KINDS {
        let server = FakeServer::start(vec![
            Reply::status(429, r#"{"error":"slow down"}"#).header("retry-after", "0"),
            hi_reply(kind),
        ])
        .await;
        let got = events(provider(kind, &server, None).as_ref(), conversation()).await;
        assert_eq!(text(&got), "hi", "{kind:?}");
        assert_eq!(got.last(), Some(&ProviderEvent::Done), "{kind:?}");
        assert_eq!(server.requests().len(), 2, "{kind:?}");
    }
}

#[tokio::test]
async fn a_500_is_retried_then_streams() {
    for kind in ALL_KINDS {
        let server = FakeServer::start(vec![Reply::status(500, "oops"), hi_reply(kind)]).await;
        let got = events(provider(kind, &server, None).as_ref(), conversation()).await;
        assert_eq!(text(&got), "hi", "{kind:?}");
        assert_eq!(server.requests().len(), 2, "{kind:?}");
    }
}

#[tokio::test]
async fn a_400_is_not_retried_and_keeps_its_body() {
    for kind in ALL_KINDS {
        let server = FakeServer::start(vec![
            Reply::status(400, r#"{"error":{"message":"bad tool schema"}}"#),
            hi_reply(kind),
        ])
        .await;
        let result = provider(kind, &server, None).generate(conversation()).await;
        match result {
            Err(ProviderError::Http { status: 400, body }) => {
                assert!(body.contains("bad tool schema"), "{kind:?}: {body}")
            }
            Err(other) => panic!("{kind:?}: unexpected error {other:?}"),
            Ok(_) => panic!("{kind:?}: a 400 produced a stream"),
        }
        assert_eq!(server.requests().len(), 1, "{kind:?}");
    }
}

#[tokio::test]
async fn rate_limit_that_outlasts_the_retries_is_reported() {
    let replies = (0..3)
        .map(|_| Reply::status(429, "{}").header("retry-after", "0"))
        .collect();
    let server = FakeServer::start(replies).await;
    let result = provider(ProviderKind::Openai, &server, None)
        .generate(conversation())
        .await;
    assert!(matches!(
        result,
        Err(ProviderError::RateLimited { retry_after: Some(d) }) if d == Duration::ZERO
    ));
    // One request and `max_retries` (2) retries.
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_retry_after_longer_than_we_wait_is_handed_to_the_caller() {
    let server = FakeServer::start(vec![
        Reply::status(429, "{}").header("retry-after", "3600"),
        hi_reply(ProviderKind::Openai),
    ])
    .await;
    let result = provider(ProviderKind::Openai, &server, None)
        .generate(conversation())
        .await;
    let Err(error) = result else {
        panic!("a 429 produced a stream");
    };
    assert_eq!(
        error,
        ProviderError::RateLimited {
            retry_after: Some(Duration::from_secs(3600))
        }
    );
    assert!(error.is_retryable());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn error_bodies_are_truncated() {
    let big = "x".repeat(20_000);
    let server = FakeServer::start(vec![Reply::status(422, &big)]).await;
    let result = provider(ProviderKind::Anthropic, &server, None)
        .generate(conversation())
        .await;
    match result {
        Err(ProviderError::Http { status: 422, body }) => assert_eq!(body.len(), 4096),
        _ => panic!("expected an Http error"),
    }
}

#[tokio::test]
async fn an_unreachable_provider_is_a_connect_error_after_retries() {
    // A port that was free a moment ago and has no listener now.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let settings = settings(ProviderKind::Openai, &format!("http://{addr}/v1"));
    let provider = build("local", &settings).expect("build");
    let result = provider.generate(conversation()).await;
    assert!(matches!(result, Err(ProviderError::Connect(_))));
}

#[test]
fn build_names_an_unset_key_variable() {
    let mut settings = settings(ProviderKind::Anthropic, "https://api.example.com/v1");
    settings.api_key_env = "AGENT_A2A_TEST_KEY_THAT_IS_NEVER_SET".into();
    match build("claude", &settings) {
        Err(ProviderError::Config(message)) => {
            assert!(
                message.contains("AGENT_A2A_TEST_KEY_THAT_IS_NEVER_SET"),
                "{message}"
            )
        }
        _ => panic!("an unset key variable must be a Config error"),
    }
}

#[test]
fn build_rejects_a_base_url_that_is_not_http() {
    let settings = settings(ProviderKind::Gemini, "ftp://example.com");
    assert!(matches!(
        build("g", &settings),
        Err(ProviderError::Config(_))
    ));
}

#[test]
fn build_without_a_key_variable_gives_the_configured_provider() {
    let settings = settings(ProviderKind::Gemini, "http://127.0.0.1:9/v1beta");
    let provider = build("gem", &settings).expect("build");
    assert_eq!(provider.id(), "gem");
    assert_eq!(provider.model(), "test-model");
}

#[test]
fn retryable_errors_are_the_transient_ones() {
    assert!(
        ProviderError::Http {
            status: 503,
            body: String::new()
        }
        .is_retryable()
    );
    assert!(
        !ProviderError::Http {
            status: 400,
            body: String::new()
        }
        .is_retryable()
    );
    assert!(ProviderError::Timeout.is_retryable());
    assert!(!ProviderError::Decode("x".into()).is_retryable());
    assert!(!ProviderError::Config("x".into()).is_retryable());
}

#[tokio::test]
async fn a_stream_that_already_started_is_never_retried() {
    // The first answer breaks off after some text; the second would succeed if asked for.
    let server = FakeServer::start(vec![
        Reply::sse(&["data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"]),
        hi_reply(ProviderKind::Openai),
    ])
    .await;
    let got = events(
        provider(ProviderKind::Openai, &server, None).as_ref(),
        conversation(),
    )
    .await;
    assert_eq!(
        got,
        [
            ProviderEvent::TextDelta("Hel".into()),
            ProviderEvent::Error(ProviderError::StreamEnded),
        ]
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn server_errors_that_outlast_the_retries_are_reported_with_their_body() {
    let replies = (0..3)
        .map(|n| Reply::status(502, &format!("bad gateway {n}")))
        .collect();
    let server = FakeServer::start(replies).await;
    let result = provider(ProviderKind::Gemini, &server, None)
        .generate(conversation())
        .await;
    match result {
        Err(ProviderError::Http { status: 502, body }) => assert_eq!(body, "bad gateway 2"),
        Err(other) => panic!("unexpected error {other:?}"),
        Ok(_) => panic!("a 502 produced a stream"),
    }
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn a_key_that_cannot_be_a_header_is_refused_when_the_provider_is_built() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    for kind in [
        ProviderKind::Openai,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
    ] {
        let settings = settings(kind, "https://api.example.com/v1");
        let transport = Transport::new(&settings).expect("transport");
        let key = Some("line\nbreak".to_owned());
        let built = match kind {
            ProviderKind::Openai => OpenAiProvider::new("p", &settings, key, transport).map(drop),
            ProviderKind::Anthropic => {
                AnthropicProvider::new("p", &settings, key, transport).map(drop)
            }
            ProviderKind::Gemini => GeminiProvider::new("p", &settings, key, transport).map(drop),
        };
        assert!(
            matches!(&built, Err(ProviderError::Config(m)) if m.contains("not a valid header")),
            "{kind:?}: {built:?}"
        );
    }
}
