//! The agent loop end to end: the real server with `[agent] provider` pointing at an
//! OpenAI-compatible endpoint on loopback that replays recorded-format SSE streams.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpResponse, HttpServer, web};
use agent_a2a::cli::{Agent, SkillSource};
use agent_a2a::config::{ProviderKind, ProviderSettings, Settings};
use agent_a2a::error::Error;
use agent_a2a::runtime::{AgentExecutor, ExecutorSource, Turn, TurnSink};
use agent_a2a::session::{
    Content as AdkContent, Event, FunctionCall, FunctionResponse, Part as AdkPart, StoredMessage,
};
use agent_a2a::skills::{Caller, Skill, SkillError, SkillInfo, SkillRegistry, ToolSpec};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::support::{SseEvent, TestApp, spawn_agent_in, user_message};

/// A model endpoint answering each completion with the next scripted SSE body.
pub(crate) struct FakeModel {
    pub(crate) url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    /// Each request's `traceparent` header, if it had one.
    traceparents: Arc<Mutex<Vec<Option<String>>>>,
    scripts: Arc<Mutex<VecDeque<Option<String>>>>,
    handle: actix_web::dev::ServerHandle,
}

impl FakeModel {
    pub(crate) async fn start() -> FakeModel {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let traceparents = Arc::new(Mutex::new(Vec::new()));
        let scripts: Arc<Mutex<VecDeque<Option<String>>>> = Arc::default();
        let (r, t, s) = (requests.clone(), traceparents.clone(), scripts.clone());
        let server = HttpServer::new(move || {
            let (r, t, s) = (r.clone(), t.clone(), s.clone());
            App::new().route(
                "/v1/chat/completions",
                web::post().to(move |req: actix_web::HttpRequest, body: web::Json<Value>| {
                    let (r, t, s) = (r.clone(), t.clone(), s.clone());
                    async move {
                        r.lock().unwrap().push(body.into_inner());
                        let traceparent = req.headers().get("traceparent");
                        t.lock()
                            .unwrap()
                            .push(traceparent.map(|v| v.to_str().unwrap().to_owned()));
                        match s.lock().unwrap().pop_front() {
                            Some(Some(sse)) => HttpResponse::Ok()
                                .content_type("text/event-stream")
                                .body(sse),
                            Some(None) => HttpResponse::ServiceUnavailable().body("try again"),
                            None => HttpResponse::InternalServerError().body("no script left"),
                        }
                    }
                }),
            )
        })
        .workers(1)
        .bind("127.0.0.1:0")
        .unwrap();
        let addr = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        FakeModel {
            url: format!("http://{addr}/v1"),
            requests,
            traceparents,
            scripts,
            handle,
        }
    }

    pub(crate) fn script(&self, chunks: &[Value]) {
        let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        body.push_str("data: [DONE]\n\n");
        self.scripts.lock().unwrap().push_back(Some(body));
    }

    /// The next request is answered 503 (a provider's retryable failure).
    pub(crate) fn unavailable_once(&self) {
        self.scripts.lock().unwrap().push_back(None);
    }

    pub(crate) fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    /// Each request's `traceparent` header, in order.
    pub(crate) fn traceparents(&self) -> Vec<Option<String>> {
        self.traceparents.lock().unwrap().clone()
    }
}

pub(crate) fn delta(delta: Value) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})
}

pub(crate) fn finish(reason: &str) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

/// A skill with one tool, `weather`, that counts its calls.
pub(crate) struct WeatherSkill {
    info: SkillInfo,
    calls: AtomicUsize,
    pub(crate) cities: Mutex<Vec<String>>,
}

impl WeatherSkill {
    /// A fresh skill with no calls counted.
    pub(crate) fn counting() -> Arc<WeatherSkill> {
        Arc::new(WeatherSkill {
            info: SkillInfo::new("weather", "Weather", "Forecasts by city.")
                .with_tags(&["weather"]),
            calls: AtomicUsize::new(0),
            cities: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl Skill for WeatherSkill {
    fn info(&self) -> &SkillInfo {
        &self.info
    }
    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "weather".into(),
            description: "Today's forecast for a city.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"city": {"type": "string", "minLength": 1}},
                "required": ["city"],
                "additionalProperties": false
            }),
            output_schema: json!({"type": "object"}),
        }]
    }
    async fn invoke(
        &self,
        _tool: &str,
        arguments: Value,
        _caller: &Caller,
    ) -> Result<Value, SkillError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let city = arguments["city"].as_str().unwrap_or_default().to_owned();
        self.cities.lock().unwrap().push(city.clone());
        Ok(json!({"city": city, "forecast": "sunny"}))
    }
}

/// An agent whose one skill is `skill`.
pub(crate) fn agent(skill: &Arc<WeatherSkill>) -> Agent {
    let mut registry = SkillRegistry::default();
    registry.register(skill.clone());
    Agent {
        executor: ExecutorSource::Configured,
        skills: SkillSource::Registry(registry),
        cards: Vec::new(),
    }
}

pub(crate) fn with_model(url: &str) -> impl FnOnce(&mut Settings) + '_ {
    move |s: &mut Settings| {
        s.providers.insert(
            "default".into(),
            ProviderSettings {
                kind: ProviderKind::Openai,
                base_url: url.to_owned(),
                model: "test-model".into(),
                api_key_env: String::new(),
                timeout_ms: 10_000,
                connect_timeout_ms: 2_000,
                max_retries: 0,
                retry_base_ms: 10,
                max_concurrency: 4,
            },
        );
        s.agent.provider = "default".into();
        s.agent.instruction = "You forecast the weather.".into();
    }
}

async fn stream_message(app: &TestApp, message: Value) -> Vec<SseEvent> {
    app.rpc_stream("SendStreamingMessage", json!({"message": message}))
        .await
}

fn results(events: &[SseEvent]) -> Vec<Value> {
    events.iter().map(|e| e.data["result"].clone()).collect()
}

#[actix_web::test]
async fn a_streamed_turn_calls_the_tool_once_and_completes_with_the_answer() {
    let model = FakeModel::start().await;
    // Turn 1: text, then one call whose arguments arrive in two fragments.
    model.script(&[
        delta(json!({"role": "assistant", "content": "Let me check. "})),
        delta(
            json!({"tool_calls": [{"index": 0, "id": "call_w1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"ci"}}]}),
        ),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "ty\":\"Oslo\"}"}}]})),
        finish("tool_calls"),
    ]);
    // Turn 2: the answer, streamed.
    model.script(&[
        delta(json!({"content": "It is sunny "})),
        delta(json!({"content": "in Oslo."})),
        finish("stop"),
    ]);
    let skill = WeatherSkill::counting();
    let app = spawn_agent_in(None, agent(&skill), with_model(&model.url)).await;

    let mut first = user_message("What is the weather in Oslo?");
    first["contextId"] = json!("ctx-weather");
    let events = stream_message(&app, first).await;
    let results = results(&events);

    // working → artifact chunks → completed.
    assert!(results[0]["task"].is_object(), "{results:?}");
    let states: Vec<&str> = results
        .iter()
        .filter_map(|r| r["statusUpdate"]["status"]["state"].as_str())
        .collect();
    assert_eq!(
        states,
        ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
        "{results:?}"
    );
    let working = results
        .iter()
        .position(|r| r["statusUpdate"].is_object())
        .unwrap();
    let completed = results
        .iter()
        .rposition(|r| r["statusUpdate"].is_object())
        .unwrap();
    let chunks: Vec<&Value> = results[working..completed]
        .iter()
        .filter(|r| r["artifactUpdate"].is_object())
        .map(|r| &r["artifactUpdate"])
        .collect();
    assert!(!chunks.is_empty(), "{results:?}");
    let answer: String = chunks
        .iter()
        .map(|c| c["artifact"]["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(answer, "Let me check. \n\nIt is sunny in Oslo.");
    assert_eq!(chunks.last().unwrap()["lastChunk"], true);
    assert_eq!(chunks[0]["artifact"]["name"], "answer");

    // The tool ran exactly once, with the assembled arguments.
    assert_eq!(skill.calls.load(Ordering::SeqCst), 1);
    assert_eq!(*skill.cities.lock().unwrap(), ["Oslo"]);

    // The second model call saw the call and its result, paired by id.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[0]["content"], "You forecast the weather.");
    assert_eq!(messages[1]["content"], "What is the weather in Oslo?");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_w1");
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_call_id"], "call_w1");
    let result: Value = serde_json::from_str(messages[3]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result, json!({"city": "Oslo", "forecast": "sunny"}));
    assert_eq!(requests[1]["tools"][0]["function"]["name"], "weather");

    // The task, read back, holds the answer artifact.
    let task_id = results[0]["task"]["id"].as_str().unwrap().to_owned();
    let task = app.rpc("GetTask", json!({"id": task_id})).await;
    assert_eq!(task["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    let artifacts = task["result"]["artifacts"].as_array().unwrap();
    assert_eq!(
        artifacts.len(),
        1,
        "one answer artifact, built from the chunks"
    );
    let stored: String = artifacts[0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(stored, "Let me check. \n\nIt is sunny in Oslo.");

    // After a restart the thread's stored history is what the model sees again.
    let dir = app.stop().await;
    model.script(&[delta(json!({"content": "Still sunny."})), finish("stop")]);
    let app = spawn_agent_in(dir, agent(&skill), with_model(&model.url)).await;
    let mut second = user_message("And tomorrow?");
    second["contextId"] = json!("ctx-weather");
    let r = app.rpc("SendMessage", json!({"message": second})).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let (before, after) = history_reloaded(&model);
    assert_eq!(after[before.len()]["role"], "assistant");
    assert_eq!(after[before.len()]["content"], "It is sunny in Oslo.");
    assert_eq!(after[before.len() + 1]["content"], "And tomorrow?");
    assert_eq!(after.len(), before.len() + 2);
    assert_eq!(skill.calls.load(Ordering::SeqCst), 1, "no tool ran again");
    app.stop().await;
    model.handle.stop(false).await;
}

#[actix_web::test]
async fn a_failing_model_fails_the_task_with_an_error_code_and_no_internals() {
    let model = FakeModel::start().await; // no script: every call answers HTTP 500
    let skill = WeatherSkill::counting();
    let app = spawn_agent_in(None, agent(&skill), with_model(&model.url)).await;
    let r = app
        .rpc("SendMessage", json!({"message": user_message("hello")}))
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{r}");
    let status = &task["status"]["message"];
    assert_eq!(status["metadata"]["errorCode"], "MODEL_UNAVAILABLE", "{r}");
    let text = status["parts"][0]["text"].as_str().unwrap();
    assert!(text.contains("HTTP 500"), "{text}");
    assert!(
        !text.contains("no script left"),
        "provider bodies stay in the log: {text}"
    );
    app.stop().await;
    model.handle.stop(false).await;
}

#[actix_web::test]
async fn explicit_tool_calls_bypass_the_model() {
    let model = FakeModel::start().await;
    let skill = WeatherSkill::counting();
    let app = spawn_agent_in(None, agent(&skill), with_model(&model.url)).await;
    let task = crate::support::call_tool(&app, "weather", json!({"city": "Bergen"})).await;
    assert_eq!(crate::support::tool_result(&task)["forecast"], "sunny");
    assert!(model.requests().is_empty());
    app.stop().await;
    model.handle.stop(false).await;
}

#[actix_web::test]
async fn a_routing_model_turns_free_text_into_a_tool_call() {
    let model = FakeModel::start().await;
    model.script(&[
        delta(
            json!({"tool_calls": [{"index": 0, "id": "r1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\":\"Tromsø\"}"}}]}),
        ),
        finish("tool_calls"),
    ]);
    model.script(&[delta(json!({"content": "Which city?"})), finish("stop")]);
    let skill = WeatherSkill::counting();
    let url = model.url.clone();
    let app = spawn_agent_in(None, agent(&skill), move |s| {
        with_model(&url)(s);
        s.agent.provider = String::new();
        s.agent.routing_provider = "default".into();
        s.agent.routing_model = "tiny-router".into();
    })
    .await;
    let r = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("weather up north in Tromsø")}),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(task["artifacts"][0]["name"], "weather");
    assert_eq!(task["artifacts"][0]["parts"][0]["data"]["city"], "Tromsø");
    assert_eq!(*skill.cities.lock().unwrap(), ["Tromsø"]);
    // It saw only the skills and the tool schemas, and the routing model's name.
    let request = &model.requests()[0];
    assert_eq!(request["model"], "tiny-router");
    let messages = request["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("- Weather: Forecasts by city.")
    );
    assert_eq!(request["tools"][0]["function"]["name"], "weather");

    // Unclear text: no call, the task asks back in the model's words.
    let r = app
        .rpc("SendMessage", json!({"message": user_message("weather?")}))
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "Which city?");
    assert_eq!(skill.calls.load(Ordering::SeqCst), 1);
    app.stop().await;
    model.handle.stop(false).await;
}

#[actix_web::test]
async fn a_routing_tool_choice_forces_that_tool_and_an_unknown_one_stops_start_up() {
    let model = FakeModel::start().await;
    model.script(&[
        delta(
            json!({"tool_calls": [{"index": 0, "id": "r1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]}),
        ),
        finish("tool_calls"),
    ]);
    let skill = WeatherSkill::counting();
    let url = model.url.clone();
    let routed = |tool: &'static str| {
        let url = url.clone();
        move |s: &mut Settings| {
            with_model(&url)(s);
            s.agent.provider = String::new();
            s.agent.routing_provider = "default".into();
            s.agent.routing_tool_choice = tool.into();
        }
    };
    let app = spawn_agent_in(None, agent(&skill), routed("weather")).await;
    let r = app
        .rpc("SendMessage", json!({"message": user_message("Oslo")}))
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(*skill.cities.lock().unwrap(), ["Oslo"]);
    let request = &model.requests()[0];
    assert_eq!(
        request["tool_choice"],
        json!({"type": "function", "function": {"name": "weather"}})
    );
    let offered: Vec<&Value> = request["tools"].as_array().unwrap().iter().collect();
    assert_eq!(
        offered.len(),
        1,
        "only the forced tool is offered: {offered:?}"
    );
    app.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let mut settings = crate::support::test_settings(Some(&dir));
    routed("forecast")(&mut settings);
    let e = agent_a2a::startup::start(settings, agent(&skill))
        .await
        .err()
        .expect("start-up refuses a routing tool that is not registered")
        .to_string();
    assert!(e.contains("\"forecast\" is not registered"), "{e}");
    model.handle.stop(false).await;
}

/// A turn's history and state as the executor got them.
type TurnView = (Vec<StoredMessage>, serde_json::Map<String, Value>);

/// What a [`SessionExecutor`] saw at the start of each turn.
#[derive(Default)]
struct Seen {
    turns: Mutex<Vec<TurnView>>,
}

impl Seen {
    fn turns(&self) -> Vec<TurnView> {
        self.turns.lock().unwrap().clone()
    }
}

/// Records each turn's history and state, then writes events by the message text:
/// `save` a model answer with a state delta, `delta` a state-only event, `big` a delta
/// past the state limit; then completes.
struct SessionExecutor {
    seen: Arc<Seen>,
}

#[async_trait]
impl AgentExecutor for SessionExecutor {
    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<(), Error> {
        self.seen
            .turns
            .lock()
            .unwrap()
            .push((turn.history.clone(), turn.state.clone()));
        sink.working().await?;
        let now = agent_a2a::domain::Timestamp::now();
        let text = turn.message.text();
        let model = |parts: Vec<AdkPart>| AdkContent {
            role: "model".into(),
            parts,
        };
        match text.as_str() {
            "save" => {
                let mut event = Event::new(
                    "assistant",
                    Some(model(vec![
                        AdkPart::Text("Saving.".into()),
                        AdkPart::FunctionCall(FunctionCall {
                            id: "call-1".into(),
                            name: "note".into(),
                            args: json!({"text": "hi"}).as_object().unwrap().clone(),
                        }),
                    ])),
                    now,
                );
                event.actions.state_delta.insert("count".into(), json!(1));
                sink.append_event(event).await?;
                let response = AdkContent {
                    role: "user".into(),
                    parts: vec![AdkPart::FunctionResponse(FunctionResponse {
                        id: "call-1".into(),
                        name: "note".into(),
                        response: json!({"saved": true}).as_object().unwrap().clone(),
                    })],
                };
                sink.append_event(Event::new("assistant", Some(response), now))
                    .await?;
            }
            "delta" => {
                let mut event = Event::new("assistant", None, now);
                event
                    .actions
                    .state_delta
                    .insert("mood".into(), json!("calm"));
                sink.append_event(event).await?;
            }
            "big" => {
                let mut event = Event::new(
                    "assistant",
                    Some(model(vec![AdkPart::Text("x".into())])),
                    now,
                );
                event
                    .actions
                    .state_delta
                    .insert("blob".into(), json!("y".repeat(4096)));
                let refused = sink.append_event(event).await;
                let e = refused.expect_err("a delta past the state limit is refused");
                return sink.fail(sink.text(e.to_string())).await;
            }
            _ => {}
        }
        sink.complete(None).await
    }
}

fn session_agent(seen: &Arc<Seen>) -> Agent {
    Agent::new(Arc::new(SessionExecutor { seen: seen.clone() }))
}

async fn send_in(app: &TestApp, context: &str, text: &str) -> Value {
    let mut message = user_message(text);
    message["contextId"] = json!(context);
    app.rpc("SendMessage", json!({"message": message})).await
}

fn small_state(s: &mut Settings) {
    s.state.max_bytes = 1024;
}

#[actix_web::test]
async fn save_session() {
    let seen = Arc::new(Seen::default());
    let app = spawn_agent_in(None, session_agent(&seen), small_state).await;
    let r = send_in(&app, "ctx-s", "save").await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    send_in(&app, "ctx-s", "next").await;
    let turns = seen.turns();
    let (history, state) = &turns[1];
    // In memory at once: user "save", the model's call, the tool result, user "next".
    let roles: Vec<&str> = history.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"]);
    assert_eq!(history[1].content, "Saving.");
    assert_eq!(history[1].tool_calls[0].id, "call-1");
    assert_eq!(
        history[2].tool_calls[0].output.as_deref(),
        Some(r#"{"saved":true}"#)
    );
    let seqs: Vec<i64> = history.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(state["count"], 1);
    app.stop().await;
}

#[actix_web::test]
async fn load_session() {
    let seen = Arc::new(Seen::default());
    let app = spawn_agent_in(None, session_agent(&seen), small_state).await;
    send_in(&app, "ctx-l", "save").await;
    send_in(&app, "ctx-l", "delta").await;
    let dir = app.stop().await;
    let app = spawn_agent_in(dir, session_agent(&seen), small_state).await;
    send_in(&app, "ctx-l", "after restart").await;
    let turns = seen.turns();
    let (history, state) = turns.last().unwrap();
    let roles: Vec<&str> = history.iter().map(|m| m.role.as_str()).collect();
    // The state-only event left no message; everything else came back from the store.
    assert_eq!(roles, ["user", "assistant", "tool", "user", "user"]);
    assert_eq!(history[1].author.as_deref(), Some("assistant"));
    assert_eq!(history[1].tool_calls[0].name, "note");
    assert_eq!(state["count"], 1);
    assert_eq!(state["mood"], "calm");
    // The reloaded records rebuild into the ADK events the agent wrote.
    let events = agent_a2a::session::events(
        history,
        "assistant",
        &agent_a2a::session::HeuristicEstimator,
        &agent_a2a::session::HistoryConfig::default(),
    );
    let call = &events[1].content.as_ref().unwrap().parts[1];
    assert!(matches!(call, AdkPart::FunctionCall(c) if c.id == "call-1" && c.args["text"] == "hi"));
    let response = &events[2].content.as_ref().unwrap();
    assert_eq!(response.role, "function");
    app.stop().await;
}

#[actix_web::test]
async fn a_state_delta_past_the_limit_is_refused_and_the_state_kept() {
    let seen = Arc::new(Seen::default());
    let app = spawn_agent_in(None, session_agent(&seen), small_state).await;
    send_in(&app, "ctx-b", "save").await;
    let r = send_in(&app, "ctx-b", "big").await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{r}");
    let text = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("over the limit of 1024 bytes"), "{text}");
    send_in(&app, "ctx-b", "check").await;
    let turns = seen.turns();
    let (history, state) = turns.last().unwrap();
    assert_eq!(state.len(), 1, "the old state, unchanged: {state:?}");
    assert!(
        history.iter().all(|m| m.content != "x"),
        "the refused event left no message"
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_transfer_sticks_to_the_thread_for_the_next_turn() {
    let model = FakeModel::start().await;
    model.script(&[
        delta(json!({"tool_calls": [{"index": 0, "id": "t1", "type": "function",
            "function": {"name": "transfer_to_agent", "arguments": "{\"agent_name\":\"billing\"}"}}]})),
        finish("tool_calls"),
    ]);
    model.script(&[delta(json!({"content": "Billing here."})), finish("stop")]);
    model.script(&[delta(json!({"content": "Still billing."})), finish("stop")]);
    let skill = WeatherSkill::counting();
    let url = model.url.clone();
    let app = spawn_agent_in(None, agent(&skill), move |s| {
        with_model(&url)(s);
        s.agent.sub_agents = vec![agent_a2a::config::SubAgentSettings {
            name: "billing".into(),
            description: "Invoices and refunds.".into(),
            instruction: "You handle billing.".into(),
            provider: String::new(),
            model: String::new(),
            tools: Vec::new(),
            sub_agents: Vec::new(),
            remote: String::new(),
        }];
    })
    .await;
    let r = send_in(&app, "ctx-t", "my invoice is wrong").await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let r = send_in(&app, "ctx-t", "and the refund?").await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let system = |i: usize| {
        requests[i]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        system(0).starts_with("You forecast the weather."),
        "{}",
        system(0)
    );
    assert!(
        system(1).starts_with("You handle billing."),
        "{}",
        system(1)
    );
    assert!(
        system(2).starts_with("You handle billing."),
        "the next turn starts with billing"
    );
    app.stop().await;
    model.handle.stop(false).await;
}

/// The messages of the model's second and third requests, across a restart between
/// them: the third starts with the second's (the history the restart reloaded is the one
/// the model had).
pub(crate) fn history_reloaded(model: &FakeModel) -> (Vec<Value>, Vec<Value>) {
    let requests = model.requests();
    let before = requests[1]["messages"].as_array().unwrap().clone();
    let after = requests[2]["messages"].as_array().unwrap().clone();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the same history, reloaded"
    );
    (before, after)
}
