//! Wire -> domain for request parameters: `SendMessage`, `GetTask`, `CancelTask` /
//! `SubscribeToTask`, `ListTasks`, and the media-type check on incoming parts.
//!
//! The same functions serve JSON-RPC `params` and REST bodies / query strings (the http
//! layer folds path and query values into one object; query values arrive as strings,
//! which the lenient reader accepts). Every refusal is `Error::InvalidParams` naming the
//! field, except unaccepted media types (`Error::ContentTypeNotSupported`).
//!
//! `historyLength`: 1.0 and 0.1 read `0` as "no history"; 0.3 read `0` (like unset) as
//! "not limited", so 0.3 dialects decode `0` to `None`. Negative values are refused in
//! every dialect.

use serde_json::Value;

use super::Dialect;
use super::client_message::{decode_message, without_reserved_keys};
use super::enums::{parse_state, role_name};
use super::fields::{Fields, invalid, parse_id};
use super::push::decode_send_push;
use crate::domain::{
    ContextId, ListTasksQuery, Message, Role, SendConfig, SendMessage, TaskId, Timestamp,
};
use crate::error::Error;

/// `ListTasks` page size when the client gives none.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// Largest `ListTasks` page size a client may ask for.
pub const MAX_PAGE_SIZE: u32 = 100;

/// Decoded `GetTask` parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskQuery {
    /// The task asked for.
    pub id: TaskId,
    /// `None`: all history; `Some(0)`: none.
    pub history_length: Option<u32>,
}

/// Decodes `SendMessage` / `SendStreamingMessage` (0.3 `message/send`, 0.1 `tasks/send`)
/// parameters. The message must come from the user and have at least one part.
pub fn decode_send(d: Dialect, params: &Value) -> Result<SendMessage, Error> {
    let f = Fields::root(params)?;
    if d == Dialect::V01 {
        return decode_send_v01(&f);
    }
    // The 0.3 proto field is `request`, published under the JSON name `message`.
    let key = if d == Dialect::V03Rest && !f.has("message") && f.has("request") {
        "request"
    } else {
        "message"
    };
    let raw = f
        .get(key)
        .ok_or_else(|| invalid("message", "is required"))?;
    let message = decode_message(d, raw, "message")?;
    require_user(d, &message)?;
    let config = match f.opt_child("configuration")? {
        None => SendConfig::default(),
        Some(c) => SendConfig {
            push: decode_send_push(d, &c)?,
            // The task-generations extension's; read where its activation is known.
            if_generation_match: None,
            accepted_output_modes: c.strings("acceptedOutputModes")?,
            history_length: history_length(d, &c)?,
            // 0.3 had the opposite knob: `blocking` (default true).
            return_immediately: match d {
                Dialect::V1 => c.opt_bool("returnImmediately")?.unwrap_or(false),
                _ => c.opt_bool("blocking")? == Some(false),
            },
        },
    };
    Ok(SendMessage {
        message,
        config,
        metadata: without_reserved_keys(f.opt_metadata("metadata")?),
        create_missing_task: false,
        idempotency_key: None,
    })
}

/// 0.1 `TaskSendParams`: the client chooses the task id and may name a session.
fn decode_send_v01(f: &Fields<'_>) -> Result<SendMessage, Error> {
    let d = Dialect::V01;
    let id = parse_id(f.req_str("id")?, "id", TaskId::parse)?;
    let session = f
        .opt_nonempty_str("sessionId")?
        .map(|raw| parse_id(raw, "sessionId", ContextId::parse))
        .transpose()?;
    let raw = f
        .get("message")
        .ok_or_else(|| invalid("message", "is required"))?;
    let mut message = decode_message(d, raw, "message")?;
    require_user(d, &message)?;
    message.task_id = Some(id);
    if session.is_some() {
        message.context_id = session;
    }
    Ok(SendMessage {
        message,
        config: SendConfig {
            accepted_output_modes: f.strings("acceptedOutputModes")?,
            history_length: history_length(d, f)?,
            return_immediately: false,
            push: decode_send_push(d, f)?,
            if_generation_match: None,
        },
        metadata: without_reserved_keys(f.opt_metadata("metadata")?),
        create_missing_task: true,
        idempotency_key: None,
    })
}

fn require_user(d: Dialect, message: &Message) -> Result<(), Error> {
    match message.role {
        Role::User => Ok(()),
        Role::Agent => Err(invalid(
            "message.role",
            format!(
                "must be {} (clients send user messages)",
                role_name(d, Role::User)
            ),
        )),
    }
}

/// `historyLength` of `f`, with the 0.3 reading of `0`.
fn history_length(d: Dialect, f: &Fields<'_>) -> Result<Option<u32>, Error> {
    let n = f.opt_count("historyLength")?;
    Ok(match d {
        Dialect::V03Rpc | Dialect::V03Rest => n.filter(|&n| n > 0),
        Dialect::V1 | Dialect::V01 => n,
    })
}

/// Decodes `GetTask` (`tasks/get`) parameters: `{id, historyLength?}`.
pub fn decode_get_task(d: Dialect, params: &Value) -> Result<TaskQuery, Error> {
    let f = Fields::root(params)?;
    Ok(TaskQuery {
        id: task_id(&f)?,
        history_length: history_length(d, &f)?,
    })
}

/// Decodes the task id of `CancelTask` / `SubscribeToTask` (0.3 `tasks/cancel`,
/// `tasks/resubscribe`): `id`, also accepted as `taskId`.
pub fn decode_task_id(_d: Dialect, params: &Value) -> Result<TaskId, Error> {
    task_id(&Fields::root(params)?)
}

/// `id`, `taskId`, or a 0.3 REST resource name `tasks/{id}`.
fn task_id(f: &Fields<'_>) -> Result<TaskId, Error> {
    if let Some(raw) = f.opt_str("id")? {
        return parse_id(raw, "id", TaskId::parse);
    }
    if let Some(raw) = f.opt_str("taskId")? {
        return parse_id(raw, "taskId", TaskId::parse);
    }
    if let Some(name) = f.opt_str("name")? {
        let raw = name.strip_prefix("tasks/").unwrap_or(name);
        return parse_id(raw, "name", TaskId::parse);
    }
    Err(invalid("id", "is required"))
}

/// Decodes `ListTasks` parameters (JSON-RPC params or REST query values).
pub fn decode_list_tasks(d: Dialect, params: &Value) -> Result<ListTasksQuery, Error> {
    let f = Fields::root(params)?;
    let context_id = f
        .opt_nonempty_str("contextId")?
        .map(|raw| parse_id(raw, "contextId", ContextId::parse))
        .transpose()?;
    // An empty query value (`?status=`) means no filter; UNSPECIFIED / 0 is refused.
    let status = match f.get("status") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(raw) => Some(parse_state(raw, "status")?),
    };
    let page_size = match f.opt_int("pageSize")? {
        None => DEFAULT_PAGE_SIZE,
        Some(n) if (1..=i64::from(MAX_PAGE_SIZE)).contains(&n) => n as u32,
        Some(_) => {
            return Err(invalid(
                "pageSize",
                format!("must be between 1 and {MAX_PAGE_SIZE}"),
            ));
        }
    };
    let status_timestamp_after = f
        .opt_nonempty_str("statusTimestampAfter")?
        .map(|raw| {
            Timestamp::parse_rfc3339(raw)
                .ok_or_else(|| invalid("statusTimestampAfter", "must be an RFC 3339 timestamp"))
        })
        .transpose()?;
    Ok(ListTasksQuery {
        context_id,
        status,
        page_size,
        page_token: f.opt_nonempty_str("pageToken")?.map(str::to_owned),
        history_length: history_length(d, &f)?,
        status_timestamp_after,
        include_artifacts: f.opt_bool("includeArtifacts")?.unwrap_or(false),
    })
}

/// Refuses a message with a part whose `mediaType` the agent does not accept. A type is
/// accepted when `accepted` is empty, or lists it exactly, `*/*`, or `type/*`
/// (compared without parameters, case-insensitively). Parts without a media type pass.
pub fn check_input_modes(message: &Message, accepted: &[String]) -> Result<(), Error> {
    if accepted.is_empty() {
        return Ok(());
    }
    let accepted: Vec<String> = accepted.iter().map(|a| essence(a)).collect();
    for part in &message.parts {
        let Some(media_type) = &part.media_type else {
            continue;
        };
        let wanted = essence(media_type);
        let family = wanted.split('/').next().unwrap_or_default();
        let ok = accepted.iter().any(|a| {
            *a == wanted || a == "*/*" || a.strip_suffix("/*").is_some_and(|f| f == family)
        });
        if !ok {
            return Err(Error::ContentTypeNotSupported(media_type.clone()));
        }
    }
    Ok(())
}

/// `Text/Plain; charset=utf-8` -> `text/plain`.
fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    //! Specifications of request decoding (`params.rs`): what each dialect accepts, what it
    //! refuses, and that every refusal names the field.

    use serde_json::{Value, json};

    use super::*;
    use crate::domain::{Part, PartContent, TaskState};

    fn invalid_params(result: Result<impl std::fmt::Debug, Error>) -> String {
        match result {
            Err(Error::InvalidParams(text)) => text,
            other => panic!("expected invalid params, got {other:?}"),
        }
    }

    fn v1_send() -> Value {
        json!({
            "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 2,
                              "returnImmediately": true},
            "metadata": {"trace": "abc"}
        })
    }

    #[test]
    fn v1_send_decodes_message_configuration_and_metadata() {
        let send = decode_send(Dialect::V1, &v1_send()).unwrap();
        assert_eq!(send.message.parts, vec![Part::text("hi")]);
        assert_eq!(
            send.config.accepted_output_modes,
            vec!["text/plain".to_owned()]
        );
        assert_eq!(send.config.history_length, Some(2));
        assert!(send.config.return_immediately);
        assert_eq!(send.metadata.unwrap()["trace"], json!("abc"));
        assert!(!send.create_missing_task);
    }

    #[test]
    fn v1_send_accepts_snake_case_numbers_and_strings() {
        let params = json!({
            "message": {"message_id": "m-1", "role": 1, "parts": [{"text": "hi"}]},
            "configuration": {"history_length": "0", "return_immediately": "false"},
            "tenant": "", "unknown": [1, 2, 3]
        });
        let send = decode_send(Dialect::V1, &params).unwrap();
        assert_eq!(
            send.config.history_length,
            Some(0),
            "1.0: zero means no history"
        );
        assert!(!send.config.return_immediately);
    }

    #[test]
    fn send_without_configuration_is_blocking_with_full_history() {
        let params =
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}});
        assert_eq!(
            decode_send(Dialect::V1, &params).unwrap().config,
            SendConfig::default()
        );
    }

    #[test]
    fn send_refusals_name_the_field() {
        assert_eq!(
            invalid_params(decode_send(Dialect::V1, &json!({}))),
            "message: is required"
        );
        assert_eq!(
            invalid_params(decode_send(Dialect::V1, &Value::Null)),
            "message: is required",
            "an empty REST body"
        );
        let mut negative = v1_send();
        negative["configuration"]["historyLength"] = json!(-1);
        assert_eq!(
            invalid_params(decode_send(Dialect::V1, &negative)),
            "configuration.historyLength: must not be negative"
        );
        let mut no_parts = v1_send();
        no_parts["message"]["parts"] = json!([]);
        assert_eq!(
            invalid_params(decode_send(Dialect::V1, &no_parts)),
            "message.parts: at least one part is required"
        );
        let mut bad_config = v1_send();
        bad_config["configuration"] = json!("fast");
        assert_eq!(
            invalid_params(decode_send(Dialect::V1, &bad_config)),
            "configuration: must be an object"
        );
    }

    #[test]
    fn agent_role_messages_from_a_client_are_invalid_params() {
        let mut agent = v1_send();
        agent["message"]["role"] = json!("ROLE_AGENT");
        assert_eq!(
            invalid_params(decode_send(Dialect::V1, &agent)),
            "message.role: must be ROLE_USER (clients send user messages)"
        );
        let v03 = json!({"message": {"kind": "message", "messageId": "m", "role": "agent",
                                     "parts": [{"kind": "text", "text": "x"}]}});
        assert_eq!(
            invalid_params(decode_send(Dialect::V03Rpc, &v03)),
            "message.role: must be user (clients send user messages)"
        );
    }

    #[test]
    fn v03_blocking_false_means_return_immediately_and_zero_history_means_unlimited() {
        let params = json!({
            "message": {"kind": "message", "messageId": "m", "role": "user",
                        "parts": [{"kind": "text", "text": "x"}]},
            "configuration": {"blocking": false, "historyLength": 0}
        });
        let send = decode_send(Dialect::V03Rpc, &params).unwrap();
        assert!(send.config.return_immediately);
        assert_eq!(send.config.history_length, None);
        let blocking = json!({"message": params["message"], "configuration": {"blocking": true}});
        assert!(
            !decode_send(Dialect::V03Rpc, &blocking)
                .unwrap()
                .config
                .return_immediately
        );
    }

    #[test]
    fn v03_rest_send_reads_the_proto_shape() {
        let params = json!({
            "request": {"messageId": "m", "role": "ROLE_USER",
                        "content": [{"file": {"fileWithUri": "https://x/y.pdf",
                                              "mimeType": "application/pdf"}}]},
            "configuration": {"blocking": false}
        });
        let send = decode_send(Dialect::V03Rest, &params).unwrap();
        assert_eq!(
            send.message.parts[0].content,
            PartContent::Url("https://x/y.pdf".into())
        );
        assert_eq!(
            send.message.parts[0].media_type.as_deref(),
            Some("application/pdf")
        );
        assert!(send.config.return_immediately);
    }

    #[test]
    fn v01_send_uses_the_client_task_id_and_session() {
        let params = json!({
            "id": "client-task", "sessionId": "session-1", "historyLength": 0,
            "acceptedOutputModes": ["text/plain"],
            "message": {"role": "user", "parts": [{"type": "text", "text": "hello"}]}
        });
        let send = decode_send(Dialect::V01, &params).unwrap();
        assert!(send.create_missing_task);
        assert_eq!(send.message.task_id.unwrap().as_str(), "client-task");
        assert_eq!(send.message.context_id.unwrap().as_str(), "session-1");
        assert_eq!(send.config.history_length, Some(0));
        assert_eq!(
            send.config.accepted_output_modes,
            vec!["text/plain".to_owned()]
        );
        assert_eq!(
            invalid_params(decode_send(
                Dialect::V01,
                &json!({"message": params["message"]})
            )),
            "id: is required"
        );
        let empty_id = json!({"id": "", "message": params["message"]});
        assert_eq!(
            invalid_params(decode_send(Dialect::V01, &empty_id)),
            "id: must not be empty"
        );
    }

    #[test]
    fn get_task_reads_id_and_history_length() {
        let q = decode_get_task(Dialect::V1, &json!({"id": "t-1", "historyLength": "3"})).unwrap();
        assert_eq!(
            q,
            TaskQuery {
                id: TaskId::parse("t-1").unwrap(),
                history_length: Some(3)
            }
        );
        let zero = decode_get_task(Dialect::V1, &json!({"id": "t", "history_length": 0})).unwrap();
        assert_eq!(zero.history_length, Some(0));
        let v03 =
            decode_get_task(Dialect::V03Rpc, &json!({"id": "t", "historyLength": 0})).unwrap();
        assert_eq!(v03.history_length, None, "0.3: zero means not limited");
        let named = decode_get_task(Dialect::V03Rest, &json!({"name": "tasks/t-9"})).unwrap();
        assert_eq!(named.id.as_str(), "t-9");
    }

    #[test]
    fn get_task_refusals_name_the_field() {
        assert_eq!(
            invalid_params(decode_get_task(Dialect::V1, &json!({}))),
            "id: is required"
        );
        assert_eq!(
            invalid_params(decode_get_task(Dialect::V1, &json!({"id": ""}))),
            "id: must not be empty"
        );
        assert_eq!(
            invalid_params(decode_get_task(Dialect::V1, &json!({"id": 7}))),
            "id: must be a string"
        );
        assert_eq!(
            invalid_params(decode_get_task(
                Dialect::V1,
                &json!({"id": "t", "historyLength": -2})
            )),
            "historyLength: must not be negative"
        );
        assert_eq!(
            invalid_params(decode_get_task(
                Dialect::V03Rpc,
                &json!({"id": "t", "historyLength": "-1"})
            )),
            "historyLength: must not be negative"
        );
    }

    #[test]
    fn task_id_params_accept_id_task_id_and_snake_case() {
        for params in [
            json!({"id": "t"}),
            json!({"taskId": "t"}),
            json!({"task_id": "t"}),
        ] {
            assert_eq!(
                decode_task_id(Dialect::V1, &params).unwrap().as_str(),
                "t",
                "{params}"
            );
        }
        assert_eq!(
            invalid_params(decode_task_id(Dialect::V1, &Value::Null)),
            "id: is required"
        );
    }

    #[test]
    fn list_tasks_defaults() {
        let q = decode_list_tasks(Dialect::V1, &json!({})).unwrap();
        assert_eq!(q.page_size, DEFAULT_PAGE_SIZE);
        assert_eq!(
            q,
            ListTasksQuery {
                page_size: 50,
                ..ListTasksQuery::default()
            }
        );
    }

    #[test]
    fn list_tasks_reads_every_filter_from_query_strings() {
        let q = decode_list_tasks(
            Dialect::V1,
            &json!({"contextId": "ctx", "status": "TASK_STATE_WORKING", "pageSize": "10",
                    "pageToken": "abc", "historyLength": "1",
                    "statusTimestampAfter": "2026-01-01T00:00:00Z", "includeArtifacts": "true"}),
        )
        .unwrap();
        assert_eq!(q.context_id.unwrap().as_str(), "ctx");
        assert_eq!(q.status, Some(TaskState::Working));
        assert_eq!(q.page_size, 10);
        assert_eq!(q.page_token.as_deref(), Some("abc"));
        assert_eq!(q.history_length, Some(1));
        assert_eq!(
            q.status_timestamp_after,
            Timestamp::parse_rfc3339("2026-01-01T00:00:00Z")
        );
        assert!(q.include_artifacts);
    }

    #[test]
    fn list_tasks_status_accepts_numbers_and_refuses_unspecified() {
        let by_number = decode_list_tasks(Dialect::V1, &json!({"status": 3})).unwrap();
        assert_eq!(by_number.status, Some(TaskState::Completed));
        let snake =
            decode_list_tasks(Dialect::V1, &json!({"status": "TASK_STATE_CANCELLED"})).unwrap();
        assert_eq!(snake.status, Some(TaskState::Canceled));
        for bad in [
            json!(0),
            json!("0"),
            json!("TASK_STATE_UNSPECIFIED"),
            json!("sleeping"),
        ] {
            let text = invalid_params(decode_list_tasks(Dialect::V1, &json!({"status": bad})));
            assert!(text.starts_with("status: "), "{text}");
        }
    }

    #[test]
    fn list_tasks_page_size_bounds() {
        for ok in [1, 100] {
            assert_eq!(
                decode_list_tasks(Dialect::V1, &json!({"pageSize": ok}))
                    .unwrap()
                    .page_size,
                ok
            );
        }
        for bad in [json!(0), json!(101), json!(-5), json!("0")] {
            assert_eq!(
                invalid_params(decode_list_tasks(Dialect::V1, &json!({"pageSize": bad}))),
                "pageSize: must be between 1 and 100"
            );
        }
    }

    #[test]
    fn list_tasks_refuses_bad_history_timestamp_and_boolean() {
        let cases = [
            (
                json!({"historyLength": -1}),
                "historyLength: must not be negative",
            ),
            (
                json!({"statusTimestampAfter": "last tuesday"}),
                "statusTimestampAfter: must be an RFC 3339 timestamp",
            ),
            (
                json!({"includeArtifacts": "maybe"}),
                "includeArtifacts: must be true or false",
            ),
            (json!({"pageSize": "ten"}), "pageSize: must be an integer"),
        ];
        for (params, expected) in cases {
            assert_eq!(
                invalid_params(decode_list_tasks(Dialect::V1, &params)),
                expected
            );
        }
    }

    fn message_with_types(types: &[Option<&str>]) -> Message {
        let parts = types
            .iter()
            .map(|t| Part {
                media_type: t.map(str::to_owned),
                ..Part::text("x")
            })
            .collect();
        Message {
            parts,
            ..Message::agent(ContextId::generate(), None, vec![])
        }
    }

    #[test]
    fn input_modes_accept_exact_wildcard_and_family_matches() {
        let accepted = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let m = message_with_types(&[Some("text/plain; charset=utf-8"), None]);
        assert!(
            check_input_modes(&m, &[]).is_ok(),
            "empty list accepts anything"
        );
        assert!(check_input_modes(&m, &accepted(&["Text/Plain"])).is_ok());
        assert!(check_input_modes(&m, &accepted(&["*/*"])).is_ok());
        assert!(check_input_modes(&m, &accepted(&["text/*"])).is_ok());
        let image = message_with_types(&[Some("image/png")]);
        assert_eq!(
            check_input_modes(
                &image,
                &accepted(&["text/plain", "text/*", "application/json"])
            ),
            Err(Error::ContentTypeNotSupported("image/png".into()))
        );
        let untyped = message_with_types(&[None]);
        assert!(check_input_modes(&untyped, &accepted(&["text/plain"])).is_ok());
    }

    #[test]
    fn a_push_config_in_a_send_is_decoded_in_every_dialect() {
        use crate::domain::{PushAuth, PushDialect};
        let mut v1 = v1_send();
        v1["configuration"]["taskPushNotificationConfig"] = json!({
            "id": "c-1", "url": "https://example.org/hook", "token": "tok",
            "authentication": {"scheme": "Bearer", "credentials": "secret"},
        });
        let push = decode_send(Dialect::V1, &v1)
            .unwrap()
            .config
            .push
            .expect("a config");
        assert_eq!(push.id.as_deref(), Some("c-1"));
        assert_eq!(push.url, "https://example.org/hook");
        assert_eq!(push.token.as_deref(), Some("tok"));
        assert_eq!(
            push.auth,
            Some(PushAuth {
                scheme: "Bearer".into(),
                credentials: Some("secret".into())
            })
        );
        assert_eq!(push.dialect, PushDialect::V1);
        let mut snake = v1_send();
        snake["configuration"]["task_push_notification_config"] = json!({"url": "https://h/x"});
        let push = decode_send(Dialect::V1, &snake)
            .unwrap()
            .config
            .push
            .expect("a config");
        assert_eq!((push.id, push.url.as_str()), (None, "https://h/x"));
        // 0.3's name and `schemes`, and 0.1's field beside the message: the 0.3 payload.
        let v03 = json!({
            "message": {"kind": "message", "messageId": "m-1", "role": "user",
                        "parts": [{"kind": "text", "text": "hi"}]},
            "configuration": {"pushNotificationConfig": {
                "url": "https://h/x", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}},
        });
        let push = decode_send(Dialect::V03Rpc, &v03)
            .unwrap()
            .config
            .push
            .expect("a config");
        assert_eq!(push.dialect, PushDialect::V03);
        assert_eq!(push.auth.map(|a| a.scheme), Some("Bearer".into()));
        let v01 = json!({
            "id": "t-1",
            "message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]},
            "pushNotification": {"url": "https://h/x"},
        });
        assert!(
            decode_send(Dialect::V01, &v01)
                .unwrap()
                .config
                .push
                .is_some()
        );
        // An explicit null is no config.
        let mut null = v1_send();
        null["configuration"]["taskPushNotificationConfig"] = Value::Null;
        assert!(
            decode_send(Dialect::V1, &null)
                .unwrap()
                .config
                .push
                .is_none()
        );
    }

    #[test]
    fn push_values_that_would_inject_a_header_are_refused() {
        for (field, value) in [
            ("token", json!("a\r\nX-Evil: 1")),
            ("url", json!("https://h/x\nX-Evil: 1")),
            (
                "authentication",
                json!({"scheme": "Bearer", "credentials": "c\r\nX: y"}),
            ),
            ("authentication", json!({"scheme": "Bearer x"})),
            ("authentication", json!({"credentials": "no scheme"})),
            ("url", json!("")),
        ] {
            let mut v1 = v1_send();
            v1["configuration"]["taskPushNotificationConfig"] = json!({"url": "https://h/x"});
            v1["configuration"]["taskPushNotificationConfig"][field] = value.clone();
            let err = decode_send(Dialect::V1, &v1).expect_err(&format!("{field}: {value}"));
            assert!(matches!(err, Error::InvalidParams(_)), "{field}: {err:?}");
        }
    }

    #[test]
    fn push_ids_and_values_past_their_limits_are_refused() {
        let long_id = "c".repeat(257);
        let long_token = "t".repeat(4097);
        for (field, value) in [("id", long_id), ("token", long_token)] {
            let mut v1 = v1_send();
            v1["configuration"]["taskPushNotificationConfig"] = json!({"url": "https://h/x"});
            v1["configuration"]["taskPushNotificationConfig"][field] = json!(value);
            let err = decode_send(Dialect::V1, &v1).expect_err(field);
            assert!(
                matches!(&err, Error::InvalidParams(m) if m.contains("longer than")),
                "{field}: {err:?}"
            );
        }
    }
}
