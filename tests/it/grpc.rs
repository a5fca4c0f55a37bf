//! The gRPC binding with a real tonic client (the official Rust SDK's generated
//! `A2AServiceClient`) against the real server: every RPC, errors with `ErrorInfo`,
//! auth and tenants from metadata, rate limits, versions, the message size limit,
//! streaming order, resumption, health, metrics and the card.

use std::time::Duration;

use a2a_pb::proto::{self, a2a_service_client::A2aServiceClient, stream_response::Payload};
use agent_a2a::config::{ApiKeySettings, Settings};
use agent_a2a::grpc::EVENT_ID_KEY;
use futures_util::StreamExt;
use serde_json::Value;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

use crate::support::{Backend, TestApp, spawn_app, spawn_app_with};

/// A gRPC client of `app`.
pub(crate) async fn client(app: &TestApp) -> A2aServiceClient<Channel> {
    let addr = app.grpc_addr.expect("gRPC is on in tests");
    A2aServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("gRPC connects")
}

/// A request with metadata.
pub(crate) fn call<T>(message: T, metadata: &[(&'static str, &str)]) -> Request<T> {
    let mut request = Request::new(message);
    for (key, value) in metadata {
        request
            .metadata_mut()
            .insert(*key, value.parse().expect("metadata value"));
    }
    request
}

fn text_message(text: &str) -> proto::Message {
    proto::Message {
        message_id: format!("grpc-{}", uuid::Uuid::new_v4()),
        role: proto::Role::User as i32,
        parts: vec![proto::Part {
            content: Some(proto::part::Content::Text(text.into())),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn send(text: &str) -> proto::SendMessageRequest {
    proto::SendMessageRequest {
        message: Some(text_message(text)),
        ..Default::default()
    }
}

/// The status's code and `ErrorInfo` reason (asserting the A2A domain).
fn reason(status: &Status) -> (Code, String) {
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.domain, "a2a-protocol.org");
    (status.code(), info.reason)
}

fn state(task: &proto::Task) -> proto::TaskState {
    proto::TaskState::try_from(task.status.as_ref().expect("status").state).expect("a state")
}

fn text_of(parts: &[proto::Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match &p.content {
            Some(proto::part::Content::Text(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

async fn completed_task(client: &mut A2aServiceClient<Channel>, text: &str) -> proto::Task {
    let response = client.send_message(send(text)).await.expect("sent");
    match response.into_inner().payload {
        Some(proto::send_message_response::Payload::Task(task)) => task,
        other => panic!("expected a task, got {other:?}"),
    }
}

/// The event's id (`EVENT_ID_KEY` in the payload's metadata), `None` for a message.
pub(crate) fn event_id(event: &proto::StreamResponse) -> Option<i64> {
    let metadata = match event.payload.as_ref()? {
        Payload::Task(t) => t.metadata.as_ref(),
        Payload::StatusUpdate(s) => s.metadata.as_ref(),
        Payload::ArtifactUpdate(a) => a.metadata.as_ref(),
        Payload::Message(_) => return None,
    }?;
    match metadata.fields.get(EVENT_ID_KEY)?.kind.as_ref()? {
        prost_types::value::Kind::StringValue(s) => s.parse().ok(),
        _ => None,
    }
}

pub(crate) fn kind(event: &proto::StreamResponse) -> &'static str {
    match event.payload.as_ref().expect("payload") {
        Payload::Task(_) => "task",
        Payload::Message(_) => "message",
        Payload::StatusUpdate(_) => "statusUpdate",
        Payload::ArtifactUpdate(_) => "artifactUpdate",
    }
}

async fn collect(
    stream: tonic::Streaming<proto::StreamResponse>,
) -> Result<Vec<proto::StreamResponse>, Status> {
    let mut stream = stream;
    let mut events = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the stream moves")
    {
        events.push(item?);
    }
    Ok(events)
}

#[actix_web::test]
async fn send_get_list_and_cancel_answer_like_the_http_bindings() {
    let app = spawn_app().await;
    let mut c = client(&app).await;

    let task = completed_task(&mut c, "complete").await;
    assert_eq!(state(&task), proto::TaskState::Completed);
    assert_eq!(text_of(&task.artifacts[0].parts), "done");
    let reply = task.status.as_ref().unwrap().message.as_ref().unwrap();
    assert_eq!(text_of(&reply.parts), "ok");
    assert!(task.status.as_ref().unwrap().timestamp.is_some());

    // The same task over JSON-RPC: one operation layer, one answer.
    let over_http = app.rpc("GetTask", serde_json::json!({"id": task.id})).await;
    assert_eq!(over_http["result"]["contextId"], task.context_id.as_str());
    assert_eq!(
        over_http["result"]["artifacts"][0]["artifactId"],
        task.artifacts[0].artifact_id.as_str()
    );

    let got = c
        .get_task(proto::GetTaskRequest {
            id: task.id.clone(),
            history_length: Some(1),
            ..Default::default()
        })
        .await
        .expect("GetTask")
        .into_inner();
    assert_eq!(got.id, task.id);
    assert_eq!(got.history.len(), 1, "historyLength applies");

    let page = c
        .list_tasks(proto::ListTasksRequest {
            context_id: task.context_id.clone(),
            ..Default::default()
        })
        .await
        .expect("ListTasks")
        .into_inner();
    assert_eq!(page.tasks.len(), 1);
    assert_eq!(page.tasks[0].id, task.id);

    let e = c
        .cancel_task(proto::CancelTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        reason(&e),
        (Code::FailedPrecondition, "TASK_NOT_CANCELABLE".into())
    );

    // A task that is still working can be canceled.
    let waiting = c
        .send_message(proto::SendMessageRequest {
            message: Some(text_message("wait")),
            configuration: Some(proto::SendMessageConfiguration {
                return_immediately: true,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("sent")
        .into_inner();
    let Some(proto::send_message_response::Payload::Task(waiting)) = waiting.payload else {
        panic!("a task");
    };
    let canceled = c
        .cancel_task(proto::CancelTaskRequest {
            id: waiting.id.clone(),
            ..Default::default()
        })
        .await
        .expect("CancelTask")
        .into_inner();
    assert_eq!(state(&canceled), proto::TaskState::Canceled);
}

#[actix_web::test]
async fn a_reply_without_a_task_is_a_message() {
    let app = spawn_app().await;
    let mut c = client(&app).await;
    let response = c.send_message(send("reply")).await.unwrap().into_inner();
    match response.payload {
        Some(proto::send_message_response::Payload::Message(m)) => {
            assert_eq!(text_of(&m.parts), "hello back");
            assert_eq!(m.role, proto::Role::Agent as i32);
        }
        other => panic!("expected a message, got {other:?}"),
    }
}

#[actix_web::test]
async fn errors_carry_the_status_of_the_table_and_an_error_info() {
    let app = spawn_app().await;
    let mut c = client(&app).await;

    let e = c
        .get_task(proto::GetTaskRequest {
            id: "no-such-task".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), (Code::NotFound, "TASK_NOT_FOUND".into()));
    let info = e.get_details_error_info().unwrap();
    assert_eq!(info.metadata["taskId"], "no-such-task");

    // What the JSON decoders refuse is refused alike.
    let e = c
        .send_message(proto::SendMessageRequest::default())
        .await
        .unwrap_err();
    assert_eq!(reason(&e), (Code::InvalidArgument, "INVALID_PARAMS".into()));
    let mut empty = text_message("x");
    empty.parts.clear();
    let e = c
        .send_message(proto::SendMessageRequest {
            message: Some(empty),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), (Code::InvalidArgument, "INVALID_PARAMS".into()));

    // The agent refusing the request.
    let e = c.send_message(send("reject-request")).await.unwrap_err();
    assert_eq!(reason(&e), (Code::InvalidArgument, "INVALID_PARAMS".into()));

    let e = c
        .get_extended_agent_card(proto::GetExtendedAgentCardRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        reason(&e),
        (Code::FailedPrecondition, "UNSUPPORTED_OPERATION".into())
    );

    let e = c
        .get_task(call(
            proto::GetTaskRequest {
                id: "x".into(),
                ..Default::default()
            },
            &[("a2a-version", "2.0")],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        reason(&e),
        (Code::FailedPrecondition, "VERSION_NOT_SUPPORTED".into())
    );
    let e = c
        .get_task(call(
            proto::GetTaskRequest {
                id: "no-such-task".into(),
                ..Default::default()
            },
            &[("a2a-version", "1.0")],
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "1.0 is spoken");
}

#[actix_web::test]
async fn with_push_off_every_config_rpc_and_a_send_carrying_one_are_refused() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.push.enabled = false).await;
    let mut c = client(&app).await;
    let config = proto::TaskPushNotificationConfig {
        task_id: "t".into(),
        url: "https://example.org/hook".into(),
        ..Default::default()
    };
    let expected = (
        Code::FailedPrecondition,
        "PUSH_NOTIFICATION_NOT_SUPPORTED".to_owned(),
    );
    let e = c
        .create_task_push_notification_config(config.clone())
        .await
        .unwrap_err();
    assert_eq!(reason(&e), expected);
    // A push config riding on a send is refused too, not dropped.
    let e = c
        .send_message(proto::SendMessageRequest {
            message: Some(text_message("complete")),
            configuration: Some(proto::SendMessageConfiguration {
                task_push_notification_config: Some(config),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), expected);
    let e = c
        .get_task_push_notification_config(proto::GetTaskPushNotificationConfigRequest {
            task_id: "t".into(),
            id: "c".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), expected);
    let e = c
        .list_task_push_notification_configs(proto::ListTaskPushNotificationConfigsRequest {
            task_id: "t".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), expected);
    let e = c
        .delete_task_push_notification_config(proto::DeleteTaskPushNotificationConfigRequest {
            task_id: "t".into(),
            id: "c".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), expected);
}

#[actix_web::test]
async fn push_configs_are_created_read_listed_and_deleted() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.push.allow_loopback = true).await;
    let mut c = client(&app).await;
    let task = completed_task(&mut c, "complete").await;
    let created = c
        .create_task_push_notification_config(proto::TaskPushNotificationConfig {
            task_id: task.id.clone(),
            id: "hook-1".into(),
            url: "https://hooks.example.org/a2a".into(),
            token: "tok".into(),
            authentication: Some(proto::AuthenticationInfo {
                scheme: "Bearer".into(),
                credentials: "secret".into(),
            }),
            ..Default::default()
        })
        .await
        .expect("created")
        .into_inner();
    assert_eq!(
        (created.id.as_str(), created.task_id.as_str()),
        ("hook-1", task.id.as_str())
    );
    assert_eq!(
        created.authentication.map(|a| a.scheme),
        Some("Bearer".into())
    );
    // The server names a config the client did not.
    let named = c
        .create_task_push_notification_config(proto::TaskPushNotificationConfig {
            task_id: task.id.clone(),
            url: "https://hooks.example.org/other".into(),
            ..Default::default()
        })
        .await
        .expect("created")
        .into_inner();
    assert!(!named.id.is_empty());
    let got = c
        .get_task_push_notification_config(proto::GetTaskPushNotificationConfigRequest {
            task_id: task.id.clone(),
            id: "hook-1".into(),
            ..Default::default()
        })
        .await
        .expect("read")
        .into_inner();
    assert_eq!(got.url, "https://hooks.example.org/a2a");
    let page = c
        .list_task_push_notification_configs(proto::ListTaskPushNotificationConfigsRequest {
            task_id: task.id.clone(),
            page_size: 1,
            ..Default::default()
        })
        .await
        .expect("listed")
        .into_inner();
    assert_eq!(page.configs.len(), 1);
    assert!(!page.next_page_token.is_empty());
    let rest = c
        .list_task_push_notification_configs(proto::ListTaskPushNotificationConfigsRequest {
            task_id: task.id.clone(),
            page_size: 1,
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await
        .expect("listed")
        .into_inner();
    assert_eq!(rest.configs.len(), 1);
    assert!(rest.next_page_token.is_empty());
    assert_ne!(rest.configs[0].id, page.configs[0].id);
    c.delete_task_push_notification_config(proto::DeleteTaskPushNotificationConfigRequest {
        task_id: task.id.clone(),
        id: "hook-1".into(),
        ..Default::default()
    })
    .await
    .expect("deleted");
    let e = c
        .get_task_push_notification_config(proto::GetTaskPushNotificationConfigRequest {
            task_id: task.id.clone(),
            id: "hook-1".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), (Code::InvalidArgument, "INVALID_PARAMS".into()));
    // A task that does not exist, and a receiver the policy refuses.
    let e = c
        .create_task_push_notification_config(proto::TaskPushNotificationConfig {
            task_id: "no-such-task".into(),
            url: "https://hooks.example.org/a2a".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), (Code::NotFound, "TASK_NOT_FOUND".into()));
    let e = c
        .create_task_push_notification_config(proto::TaskPushNotificationConfig {
            task_id: task.id.clone(),
            url: "http://169.254.169.254/latest".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), (Code::InvalidArgument, "INVALID_PARAMS".into()));
}

#[actix_web::test]
async fn internal_errors_never_carry_internal_text() {
    let app = spawn_app().await;
    let mut c = client(&app).await;
    match c.send_message(send("internal")).await {
        Err(e) => {
            assert_eq!(e.code(), Code::Internal);
            assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
        }
        Ok(response) => {
            let text = format!("{:?}", response.into_inner());
            assert!(!text.contains("hunter2"), "{text}");
        }
    }
}

#[actix_web::test]
async fn a_message_over_the_size_limit_is_refused() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.server.max_body_bytes = 4096).await;
    let mut c = client(&app).await;
    let e = c.send_message(send(&"x".repeat(8192))).await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    // Nothing was stored.
    let page = c
        .list_tasks(proto::ListTasksRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(page.tasks.is_empty());
}

#[actix_web::test]
async fn a_stream_carries_the_sse_events_in_the_same_order() {
    let app = spawn_app().await;
    let mut c = client(&app).await;
    let stream = c
        .send_streaming_message(send("chunks"))
        .await
        .expect("stream opens")
        .into_inner();
    let events = collect(stream).await.expect("no error");
    let kinds: Vec<&str> = events.iter().map(kind).collect();
    let sse = app
        .rpc_stream(
            "SendStreamingMessage",
            serde_json::json!({"message": crate::support::user_message("chunks")}),
        )
        .await;
    let sse_kinds: Vec<String> = sse
        .iter()
        .map(|e| {
            let result = e.data["result"].as_object().expect("an event");
            result.keys().next().unwrap().clone()
        })
        .collect();
    assert_eq!(kinds, sse_kinds);
    assert_eq!(kinds.first(), Some(&"task"));
    let ids: Vec<i64> = events.iter().map(|e| event_id(e).expect("an id")).collect();
    let sse_ids: Vec<i64> = sse.iter().map(|e| e.id.parse().unwrap()).collect();
    assert_eq!(
        ids, sse_ids,
        "the ids of the durable log, as SSE gives them"
    );
    let Some(Payload::StatusUpdate(last)) = &events.last().unwrap().payload else {
        panic!("ends with a status update");
    };
    assert_eq!(
        last.status.as_ref().unwrap().state,
        proto::TaskState::Completed as i32
    );

    // A message-only turn: exactly one message event, without an id.
    let stream = c
        .send_streaming_message(send("reply"))
        .await
        .unwrap()
        .into_inner();
    let events = collect(stream).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(kind(&events[0]), "message");
    assert_eq!(event_id(&events[0]), None);
}

#[actix_web::test]
async fn subscribing_resumes_after_the_last_event_id_without_gap_or_duplicate() {
    let app = spawn_app().await;
    let mut c = client(&app).await;
    let stream = c
        .send_streaming_message(send("chunks"))
        .await
        .unwrap()
        .into_inner();
    let events = collect(stream).await.unwrap();
    let Some(Payload::Task(task)) = &events[0].payload else {
        panic!("starts with the task");
    };
    assert!(events.len() >= 5);
    // The connection broke after the second event; the task finished meanwhile.
    let seen = event_id(&events[1]).unwrap().to_string();
    let stream = c
        .subscribe_to_task(call(
            proto::SubscribeToTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
            &[("last-event-id", &seen)],
        ))
        .await
        .expect("resumes")
        .into_inner();
    let replay = collect(stream).await.unwrap();
    let replay_ids: Vec<Option<i64>> = replay.iter().map(event_id).collect();
    let expected: Vec<Option<i64>> = events[2..].iter().map(event_id).collect();
    assert_eq!(replay_ids, expected);
    assert_eq!(replay, events[2..], "the same events, byte for byte");

    // A live subscription: the snapshot, then the turn's events as they happen.
    let waiting = c
        .send_message(proto::SendMessageRequest {
            message: Some(text_message("wait")),
            configuration: Some(proto::SendMessageConfiguration {
                return_immediately: true,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let Some(proto::send_message_response::Payload::Task(waiting)) = waiting.payload else {
        panic!("a task");
    };
    let mut live = c
        .subscribe_to_task(proto::SubscribeToTaskRequest {
            id: waiting.id.clone(),
            ..Default::default()
        })
        .await
        .expect("subscribes")
        .into_inner();
    let first = live.next().await.unwrap().unwrap();
    assert_eq!(kind(&first), "task", "a subscription starts with the task");
    app.release.notify_one();
    let rest = collect(live).await.unwrap();
    let kinds: Vec<&str> = rest.iter().map(kind).collect();
    assert_eq!(kinds.last(), Some(&"statusUpdate"));
    let mut ids: Vec<i64> = std::iter::once(&first)
        .chain(&rest)
        .map(|e| event_id(e).unwrap())
        .collect();
    let sorted = {
        let mut s = ids.clone();
        s.sort();
        s.dedup();
        s
    };
    assert_eq!(ids, sorted, "in order, no duplicate");
    ids.clear();

    // A bad id is the client's error.
    let e = c
        .subscribe_to_task(call(
            proto::SubscribeToTaskRequest {
                id: waiting.id.clone(),
                ..Default::default()
            },
            &[("last-event-id", "yesterday")],
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&e), (Code::InvalidArgument, "INVALID_PARAMS".into()));
}

pub(crate) const ACME: &str = "key-acme";
pub(crate) const GLOBEX: &str = "key-globex";

pub(crate) fn keys(s: &mut Settings, per_minute: u32) {
    s.auth.enabled = true;
    s.auth.api_keys = [(ACME, "acme"), (GLOBEX, "globex")]
        .into_iter()
        .map(|(key, tenant)| ApiKeySettings {
            key: key.into(),
            key_sha256: String::new(),
            tenant: tenant.into(),
            tier: "default".into(),
            mcp_servers: None,
        })
        .collect();
    s.rate_limit.default_per_minute = per_minute;
    s.auth.failures_per_minute = 10_000;
}

#[actix_web::test]
async fn credentials_come_from_metadata_and_tenants_stay_apart() {
    let app = spawn_app_with(Backend::Sqlite, |s| keys(s, 10_000)).await;
    let mut c = client(&app).await;

    let e = c.send_message(send("complete")).await.unwrap_err();
    assert_eq!(
        reason(&e),
        (Code::Unauthenticated, "UNAUTHENTICATED".into())
    );
    let e = c
        .send_message(call(send("complete"), &[("authorization", "Bearer wrong")]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);

    let bearer = format!("Bearer {ACME}");
    let response = c
        .send_message(call(send("complete"), &[("authorization", &bearer)]))
        .await
        .expect("a bearer key is accepted")
        .into_inner();
    let Some(proto::send_message_response::Payload::Task(task)) = response.payload else {
        panic!("a task");
    };
    let get = |key: (&'static str, &str)| {
        call(
            proto::GetTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
            &[key],
        )
    };
    c.get_task(get(("x-api-key", ACME)))
        .await
        .expect("the x-api-key form too");
    // Another tenant: not found, as everywhere else — even when it names the tenant.
    let e = c.get_task(get(("x-api-key", GLOBEX))).await.unwrap_err();
    assert_eq!(reason(&e), (Code::NotFound, "TASK_NOT_FOUND".into()));
    let mut request = get(("x-api-key", GLOBEX));
    request.get_mut().tenant = "acme".into();
    let e = c.get_task(request).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let listed = c
        .list_tasks(call(
            proto::ListTasksRequest::default(),
            &[("x-api-key", GLOBEX)],
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(listed.tasks.is_empty());
    let e = c
        .subscribe_to_task(call(
            proto::SubscribeToTaskRequest {
                id: task.id.clone(),
                ..Default::default()
            },
            &[("x-api-key", GLOBEX)],
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

#[actix_web::test]
async fn an_authenticated_caller_gets_the_extended_card() {
    let app = spawn_app_with(Backend::Sqlite, |s| keys(s, 10_000)).await;
    let mut c = client(&app).await;
    let e = c
        .get_extended_agent_card(proto::GetExtendedAgentCardRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    let card = c
        .get_extended_agent_card(call(
            proto::GetExtendedAgentCardRequest::default(),
            &[("x-api-key", GLOBEX)],
        ))
        .await
        .expect("the extended card")
        .into_inner();
    let capabilities = card.capabilities.expect("capabilities");
    assert_eq!(capabilities.extended_agent_card, Some(true));
    let tenant = capabilities
        .extensions
        .iter()
        .find(|e| e.uri == "urn:agent-a2a:tenant:v1")
        .expect("the tenant extension");
    let params = tenant.params.as_ref().expect("params");
    let text = |key: &str| match params.fields[key].kind.as_ref() {
        Some(prost_types::value::Kind::StringValue(s)) => s.clone(),
        other => panic!("{key}: {other:?}"),
    };
    assert_eq!(text("tenant"), "globex");
    assert!(
        card.supported_interfaces
            .iter()
            .any(|i| i.protocol_binding == "GRPC")
    );
}

#[actix_web::test]
async fn over_the_rate_limit_is_resource_exhausted_with_the_delay() {
    let app = spawn_app_with(Backend::Sqlite, |s| keys(s, 2)).await;
    let mut c = client(&app).await;
    let get = || {
        call(
            proto::GetTaskRequest {
                id: "t".into(),
                ..Default::default()
            },
            &[("x-api-key", ACME)],
        )
    };
    for _ in 0..2 {
        assert_eq!(c.get_task(get()).await.unwrap_err().code(), Code::NotFound);
    }
    let e = c.get_task(get()).await.unwrap_err();
    assert_eq!(
        reason(&e),
        (Code::ResourceExhausted, "RATE_LIMIT_EXCEEDED".into())
    );
    let delay = e
        .get_details_retry_info()
        .and_then(|r| r.retry_delay)
        .expect("RetryInfo with the delay");
    assert!(delay >= Duration::from_secs(1), "{delay:?}");
}

#[actix_web::test]
async fn health_metrics_and_the_card_know_the_binding() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let app = spawn_app().await;
    let addr = app.grpc_addr.unwrap();
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    // Start-up recovery may still run: watch until the server says it serves.
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("watched")
        .into_inner();
    let serving = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(update) = watch.next().await {
            if update.expect("an update").status == ServingStatus::Serving as i32 {
                return true;
            }
        }
        false
    })
    .await
    .expect("serving within 10 s");
    assert!(serving);
    for service in ["", "lf.a2a.v1.A2AService"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("checked")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    let e = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    let mut c = client(&app).await;
    completed_task(&mut c, "complete").await;
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("agent_a2a_http_requests_total")
                && l.contains(r#"binding="grpc""#)
                && l.contains(r#"method="SendMessage""#)
                && l.contains(r#"status="OK""#)),
        "{metrics}"
    );

    let card: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    let grpc: Vec<&Value> = card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["protocolBinding"] == "GRPC")
        .collect();
    assert_eq!(grpc.len(), 1);
    assert_eq!(grpc[0]["url"], addr.to_string());
    assert_eq!(grpc[0]["protocolVersion"], "1.0");
}

#[actix_web::test]
async fn with_grpc_off_nothing_listens_and_the_card_says_so() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.server.grpc_bind = String::new()).await;
    assert!(app.grpc_addr.is_none());
    let card: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    let bindings: Vec<&str> = card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["protocolBinding"].as_str().unwrap())
        .collect();
    assert!(!bindings.contains(&"GRPC"), "{bindings:?}");
}

#[actix_web::test]
async fn a_connection_carries_at_most_its_streams_at_once() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        s.server.grpc_max_streams_per_connection = 1
    })
    .await;
    let mut c = client(&app).await;
    let waiting = c
        .send_message(proto::SendMessageRequest {
            message: Some(text_message("wait")),
            configuration: Some(proto::SendMessageConfiguration {
                return_immediately: true,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let Some(proto::send_message_response::Payload::Task(task)) = waiting.payload else {
        panic!("a task");
    };
    let mut live = c
        .subscribe_to_task(proto::SubscribeToTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    live.next().await.unwrap().unwrap();
    // The one stream is taken: a second call on this connection cannot start.
    let get = || proto::GetTaskRequest {
        id: task.id.clone(),
        ..Default::default()
    };
    let mut blocked = Request::new(get());
    blocked.set_timeout(Duration::from_millis(300));
    assert!(c.get_task(blocked).await.is_err(), "no stream was free");
    // Once the subscription ends, the connection takes calls again.
    app.release.notify_one();
    collect(live).await.unwrap();
    let got = c
        .get_task(get())
        .await
        .expect("a stream is free")
        .into_inner();
    assert_eq!(state(&got), proto::TaskState::Completed);
}
