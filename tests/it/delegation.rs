//! Durable delegation: a call of a remote agent (`ask_<name>`) that a stop or a SIGKILL
//! cuts short is picked up when the calling server comes back — it follows the remote
//! task it recorded before waiting on it, or sends the same message again under the
//! same derived message id — and the task completes with the remote's answer. The
//! remote never sees a second message.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{App, HttpResponse, HttpServer, web};
use agent_a2a::config::{RemoteAgentSettings, Settings};
use agent_a2a::startup::Agent;
use serde_json::{Value, json};

use crate::agent::{FakeModel, delta, finish, with_model};
use crate::durability::start_server_configured;
use crate::support::{fresh_postgres, http_client, spawn_agent_in, user_message};

/// What the remote was asked.
#[derive(Default)]
struct Asked {
    /// The `messageId` of every `SendMessage`, in order.
    sends: Vec<String>,
    gets: usize,
    /// The task has ended: `GetTask` answers it completed.
    done: bool,
    /// The ids of every `CancelTask`; once asked, the task is canceled.
    cancels: Vec<String>,
}

/// A remote agent over JSON-RPC whose one task runs until [`SlowRemote::finish`]:
/// `SendMessage` answers it working (with `hold_first`, the first send is never
/// answered), `GetTask` answers it as it stands.
struct SlowRemote {
    card: String,
    asked: Arc<Mutex<Asked>>,
}

impl SlowRemote {
    fn start(hold_first: bool) -> SlowRemote {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let asked: Arc<Mutex<Asked>> = Arc::default();
        let (rpc_url, kept) = (format!("{base}/rpc"), asked.clone());
        let server = HttpServer::new(move || {
            let card = json!({
                "name": "billing", "description": "Refunds", "version": "1",
                "supportedInterfaces": [{"url": rpc_url, "protocolBinding": "JSONRPC",
                    "protocolVersion": "1.0"}],
                "capabilities": {}, "defaultInputModes": [], "defaultOutputModes": [],
                "skills": [],
            });
            let asked = kept.clone();
            App::new()
                .route(
                    "/card.json",
                    web::get().to(move || {
                        let card = card.clone();
                        async move { HttpResponse::Ok().json(card) }
                    }),
                )
                .route(
                    "/rpc",
                    web::post().to(move |body: web::Json<Value>| {
                        let asked = asked.clone();
                        async move { answer(&asked, hold_first, body.into_inner()).await }
                    }),
                )
        })
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
        actix_web::rt::spawn(server);
        SlowRemote {
            card: format!("{base}/card.json"),
            asked,
        }
    }

    fn settings(&self) -> RemoteAgentSettings {
        RemoteAgentSettings::new("billing", self.card.clone())
    }

    fn finish(&self) {
        self.asked.lock().unwrap().done = true;
    }

    fn sends(&self) -> Vec<String> {
        self.asked.lock().unwrap().sends.clone()
    }

    /// Waits until `seen` holds of what was asked.
    async fn wait_for(&self, what: &str, seen: impl Fn(&Asked) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !seen(&self.asked.lock().unwrap()) {
            assert!(Instant::now() < deadline, "the remote was never {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn answer(asked: &Mutex<Asked>, hold_first: bool, body: Value) -> HttpResponse {
    let task = |done: bool| {
        if !asked.lock().unwrap().cancels.is_empty() {
            json!({"id": "r-1", "contextId": "rc-1", "status": {"state": "TASK_STATE_CANCELED"}})
        } else if done {
            json!({"id": "r-1", "contextId": "rc-1",
                "status": {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "m-1",
                    "role": "ROLE_AGENT", "parts": [{"text": "refund issued"}]}},
                "artifacts": [{"artifactId": "a-1", "name": "receipt",
                    "parts": [{"text": "receipt 7"}]}]})
        } else {
            json!({"id": "r-1", "contextId": "rc-1", "status": {"state": "TASK_STATE_WORKING"}})
        }
    };
    let reply = |result: Value| {
        HttpResponse::Ok().json(json!({"jsonrpc": "2.0", "id": body["id"], "result": result}))
    };
    match body["method"].as_str() {
        Some("SendMessage") => {
            let (first, done) = {
                let mut asked = asked.lock().unwrap();
                let id = body["params"]["message"]["messageId"].as_str();
                asked.sends.push(id.unwrap_or_default().to_owned());
                (asked.sends.len() == 1, asked.done)
            };
            if hold_first && first {
                // Never answered: the caller stops while it waits.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            reply(json!({"task": task(done)}))
        }
        Some("CancelTask") => {
            let id = body["params"]["id"].as_str().unwrap_or_default().to_owned();
            asked.lock().unwrap().cancels.push(id);
            reply(task(false))
        }
        Some("GetTask") => {
            let done = {
                let mut asked = asked.lock().unwrap();
                asked.gets += 1;
                asked.done
            };
            reply(task(done))
        }
        _ => HttpResponse::BadRequest().finish(),
    }
}

/// A direct call of `ask_billing`, answered at once with its task (working).
fn direct_call() -> Value {
    json!({
        "message": {
            "messageId": uuid::Uuid::new_v4().to_string(),
            "role": "ROLE_USER",
            "parts": [{"data": {"tool": "ask_billing", "arguments": {"text": "refund order 7"}}}],
        },
        "configuration": {"returnImmediately": true},
    })
}

fn calling(remote: &SlowRemote) -> impl Fn(&mut Settings) + Clone + use<> {
    let remote = remote.settings();
    move |s: &mut Settings| {
        s.push.allow_loopback = true;
        s.agent.remote_agents = vec![remote.clone()];
    }
}

/// One JSON-RPC call to the server at `url`; its answer.
async fn rpc_at(url: &str, method: &str, params: Value) -> Value {
    http_client()
        .post(format!("{url}/"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("a JSON-RPC request")
        .json()
        .await
        .expect("a JSON-RPC answer")
}

/// Reads task `id` at `url` until it ends; the task.
async fn ended(url: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = rpc_at(url, "GetTask", json!({"id": id})).await;
        let state = r["result"]["status"]["state"].as_str().unwrap_or_default();
        if ["TASK_STATE_COMPLETED", "TASK_STATE_FAILED"].contains(&state) {
            return r["result"].clone();
        }
        assert!(Instant::now() < deadline, "the task never ended: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn started(r: &Value) -> String {
    r["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task in {r}"))
        .to_owned()
}

/// The text of every part of the task's artifacts, joined.
fn artifact_text(task: &Value) -> String {
    task["artifacts"].to_string()
}

#[actix_web::test]
async fn a_direct_call_cut_short_follows_the_remote_task_it_recorded() {
    let remote = SlowRemote::start(false);
    let app = spawn_agent_in(None, Agent::configured(), calling(&remote)).await;
    let task = started(&app.rpc("SendMessage", direct_call()).await);
    // The remote task is followed only once it is recorded in the caller's store.
    remote.wait_for("asked for its task", |a| a.gets > 0).await;
    let dir = app.stop().await;
    remote.finish();

    let app = spawn_agent_in(dir, Agent::configured(), calling(&remote)).await;
    let done = ended(&app.url, &task).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    let answer = &done["artifacts"][0]["parts"][0]["data"];
    assert_eq!(answer["text"], "refund issued", "{done}");
    assert_eq!(answer["taskId"], "r-1", "{done}");
    assert!(artifact_text(&done).contains("receipt 7"), "{done}");
    assert_eq!(remote.sends().len(), 1, "the message was sent once");
    // Counted (the recorder is the process's: other tests' resumed turns count too).
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let resumed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("agent_a2a_turns_resumed_total "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(resumed.is_some_and(|n| n >= 1), "{resumed:?}");
}

#[actix_web::test]
async fn a_send_cut_short_before_its_answer_is_sent_again_under_the_same_message_id() {
    let remote = SlowRemote::start(true);
    let app = spawn_agent_in(None, Agent::configured(), calling(&remote)).await;
    let task = started(&app.rpc("SendMessage", direct_call()).await);
    remote
        .wait_for("sent the message", |a| !a.sends.is_empty())
        .await;
    let dir = app.stop().await;
    remote.finish();

    let app = spawn_agent_in(dir, Agent::configured(), calling(&remote)).await;
    let done = ended(&app.url, &task).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    let sends = remote.sends();
    assert_eq!(sends.len(), 2, "{sends:?}");
    assert_eq!(
        sends[0], sends[1],
        "a server that honours message ids sees one message"
    );
}

/// The model asked the remote; the stop came while the remote worked. After the restart
/// the run answers the stored call from the remote task it recorded and asks the model
/// for the rest — the model is not asked the first question again.
#[actix_web::test]
async fn a_model_turn_cut_short_in_a_remote_call_is_picked_up_at_that_call() {
    let remote = SlowRemote::start(false);
    let model = FakeModel::start().await;
    model.script(&[
        delta(
            json!({"tool_calls": [{"index": 0, "id": "call_r1", "type": "function",
            "function": {"name": "ask_billing", "arguments": "{\"text\":\"refund order 7\"}"}}]}),
        ),
        finish("tool_calls"),
    ]);
    model.script(&[
        delta(json!({"content": "Your refund was issued."})),
        finish("stop"),
    ]);
    let settings = {
        let (calling, url) = (calling(&remote), model.url.clone());
        move |s: &mut Settings| {
            calling(s);
            with_model(&url)(s);
        }
    };
    let done = cut_short_and_restarted(&remote, settings).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert!(
        artifact_text(&done).contains("Your refund was issued."),
        "{done}"
    );
    assert_eq!(remote.sends().len(), 1, "the message was sent once");
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        2,
        "the model was asked once more, not again"
    );
    let tool = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap_or_default();
    assert_eq!(tool["tool_call_id"], "call_r1", "{tool}");
    assert!(
        tool["content"]
            .as_str()
            .unwrap_or_default()
            .contains("refund issued"),
        "{tool}"
    );
}

/// A turn the model handed to a remote sub-agent, stopped while the remote works: after
/// the restart the stored call follows the remote task it recorded (nothing is sent
/// again), the task completes with the remote's answer, and the model was asked only
/// the once (the transfer).
#[actix_web::test]
async fn a_turn_handed_to_a_remote_agent_is_picked_up_at_its_call() {
    let remote = SlowRemote::start(false);
    let model = FakeModel::start().await;
    model.script(&[
        delta(
            json!({"tool_calls": [{"index": 0, "id": "t1", "type": "function",
            "function": {"name": "transfer_to_agent", "arguments": "{\"agent_name\":\"billing\"}"}}]}),
        ),
        finish("tool_calls"),
    ]);
    let settings = {
        let (calling, url) = (calling(&remote), model.url.clone());
        move |s: &mut Settings| {
            calling(s);
            s.agent.sub_agents = vec![agent_a2a::config::SubAgentSettings::remote(
                "billing", "billing",
            )];
            with_model(&url)(s);
        }
    };
    let done = cut_short_and_restarted(&remote, settings).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert!(
        artifact_text(&done).contains(r"refund issued\nreceipt 7"),
        "{done}"
    );
    assert_eq!(remote.sends().len(), 1, "the message was sent once");
    assert_eq!(
        model.requests().len(),
        1,
        "the model was asked only for the transfer"
    );
}

/// "Please refund order 7." sent to a server of `settings` (a model turn), the server
/// stopped once the remote was asked for its task, the remote let finish, the server
/// started again on the same store: the task once it ended.
async fn cut_short_and_restarted(
    remote: &SlowRemote,
    settings: impl Fn(&mut Settings) + Clone,
) -> Value {
    let app = spawn_agent_in(None, Agent::configured(), settings.clone()).await;
    let r = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("Please refund order 7."),
                "configuration": {"returnImmediately": true}}),
        )
        .await;
    let task = started(&r);
    remote.wait_for("asked for its task", |a| a.gets > 0).await;
    let dir = app.stop().await;
    remote.finish();
    let app = spawn_agent_in(dir, Agent::configured(), settings).await;
    ended(&app.url, &task).await
}

/// Canceling our task while the remote works on its task cancels the remote task.
#[actix_web::test]
async fn canceling_the_task_cancels_the_remote_task_it_waits_on() {
    let remote = SlowRemote::start(false);
    let app = spawn_agent_in(None, Agent::configured(), calling(&remote)).await;
    let task = started(&app.rpc("SendMessage", direct_call()).await);
    remote.wait_for("asked for its task", |a| a.gets > 0).await;
    let r = app.rpc("CancelTask", json!({"id": task})).await;
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
    remote
        .wait_for("asked to cancel r-1", |a| a.cancels == ["r-1"])
        .await;
    // Nothing more is sent: the call, cut off, does not ask again.
    assert_eq!(remote.sends().len(), 1);
}

/// The real binary, killed with SIGKILL while the remote works on its task, then
/// started again on the same store: the task completes with the remote's answer and the
/// remote saw one message. SQLite and Postgres.
async fn sigkill_mid_delegation(env: &[(&str, &str)]) {
    let remote = SlowRemote::start(false);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\nenabled = false\n\n[push]\nallow_loopback = true\n\n\
             [[agent.remote_agents]]\nname = \"billing\"\ncard_url = \"{}\"\n",
            remote.card
        ),
    )
    .unwrap();
    let (mut child, url) = start_server_configured(dir.path(), env, &config);
    let task = started(&rpc_at(&url, "SendMessage", direct_call()).await);
    remote.wait_for("asked for its task", |a| a.gets > 0).await;
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    remote.finish();

    let (mut child, url) = start_server_configured(dir.path(), env, &config);
    let done = ended(&url, &task).await;
    child.kill().ok();
    child.wait().ok();
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(
        done["artifacts"][0]["parts"][0]["data"]["text"], "refund issued",
        "{done}"
    );
    assert_eq!(remote.sends().len(), 1, "the message was sent once");
}

#[actix_web::test]
async fn a_delegation_survives_sigkill_of_the_calling_server() {
    sigkill_mid_delegation(&[]).await;
}

#[actix_web::test]
async fn a_delegation_survives_sigkill_of_the_calling_server_on_postgres() {
    let Some(database) = fresh_postgres().await else {
        return;
    };
    sigkill_mid_delegation(&[("DATABASE_URL", database.url.as_str())]).await;
}
