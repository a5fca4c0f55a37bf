//! Push-notification configs on the wire, per dialect, and the payloads delivered to
//! receivers.
//!
//! | dialect | config object | get / delete parameters |
//! |---|---|---|
//! | 1.0 | flat `TaskPushNotificationConfig{taskId, id, url, token, authentication{scheme, credentials}}` | `{taskId, id}` |
//! | 0.3 JSON-RPC | `{taskId, pushNotificationConfig{id, url, token, authentication{schemes[], credentials}}}` | `{id, pushNotificationConfigId}` |
//! | 0.3 REST | `{name: "tasks/{t}/pushNotificationConfigs/{c}", pushNotificationConfig{…}}`; a create body may wrap it in `config` | the path |
//! | 0.1 | `{id, pushNotificationConfig{url, token, authentication}}` | `{id}` |
//!
//! Decoding is lenient (both spellings of `scheme`/`schemes`, camelCase or snake_case);
//! values that end up in a request header to the receiver are refused if they hold a
//! CR or LF, so a config can never inject a header.
//!
//! A config's secrets go one way: the `token` and `authentication.credentials` a client
//! gives reach the receiver with every delivery, and never come back in an answer —
//! not from Create, Get or List, in any dialect (the A2A 1.1 direction, #1681/#1988: a
//! listing pasted into a log, a dashboard or a ticket must not hand out every
//! receiver's credentials). Neither the 1.0 conformance kit nor the SDK clients compare
//! them in what they read back.

use serde_json::{Map, Value, json};

use super::Dialect;
use super::encode::{encode_stream_event, encode_task};
use super::fields::{Fields, invalid, parse_id};
use crate::domain::{PushAuth, PushConfig, PushDialect, PushPayload, PushSpec, TaskId};
use crate::error::Error;

/// Longest config id a client may choose.
const MAX_CONFIG_ID: usize = 256;
/// Longest URL, token, scheme or credentials value.
const MAX_VALUE: usize = 4096;

/// Which payload a config registered in `d` receives.
pub fn push_dialect(d: Dialect) -> PushDialect {
    match d {
        Dialect::V1 => PushDialect::V1,
        Dialect::V03Rpc | Dialect::V03Rest | Dialect::V01 => PushDialect::V03,
    }
}

/// `CreateTaskPushNotificationConfig` (0.3 `tasks/pushNotificationConfig/set`, 0.1
/// `tasks/pushNotification/set`): the task and the config asked for.
pub fn decode_create_push(d: Dialect, params: &Value) -> Result<(TaskId, PushSpec), Error> {
    let f = Fields::root(params)?;
    let task = task_of(d, &f)?;
    let spec = match d {
        Dialect::V1 => decode_spec(d, &f)?,
        Dialect::V03Rest => {
            // `{config: {name, pushNotificationConfig}}` (the create request), or the
            // config resource itself.
            let wrapped = f.opt_child("config")?;
            let resource = wrapped.as_ref().unwrap_or(&f);
            let inner = resource
                .opt_child("pushNotificationConfig")?
                .ok_or_else(|| {
                    invalid(&resource.path_of("pushNotificationConfig"), "is required")
                })?;
            let mut spec = decode_spec(d, &inner)?;
            if spec.id.is_none() {
                spec.id = match f.opt_nonempty_str("configId")? {
                    Some(id) => Some(config_id(id, "configId")?),
                    None => None,
                };
            }
            spec
        }
        Dialect::V03Rpc | Dialect::V01 => {
            let inner = f
                .opt_child("pushNotificationConfig")?
                .ok_or_else(|| invalid("pushNotificationConfig", "is required"))?;
            decode_spec(d, &inner)?
        }
    };
    Ok((task, spec))
}

/// A config inside a send's `configuration` (1.0 `taskPushNotificationConfig`, 0.3
/// `pushNotificationConfig`, 0.1 `pushNotification`).
pub fn decode_send_push(d: Dialect, f: &Fields<'_>) -> Result<Option<PushSpec>, Error> {
    let key = match d {
        Dialect::V1 => "taskPushNotificationConfig",
        Dialect::V03Rpc | Dialect::V03Rest => "pushNotificationConfig",
        Dialect::V01 => "pushNotification",
    };
    match f.opt_child(key)? {
        Some(c) => decode_spec(d, &c).map(Some),
        None => Ok(None),
    }
}

/// `GetTaskPushNotificationConfig` and `DeleteTaskPushNotificationConfig`: the task and
/// the config id (`None` only in 0.3 and 0.1 `get`, which may leave it out).
pub fn decode_push_ref(d: Dialect, params: &Value) -> Result<(TaskId, Option<String>), Error> {
    let f = Fields::root(params)?;
    let task = task_of(d, &f)?;
    let key = match d {
        Dialect::V1 => "id",
        Dialect::V03Rpc | Dialect::V01 => "pushNotificationConfigId",
        Dialect::V03Rest => "configId",
    };
    let id = match f.opt_nonempty_str(key)? {
        Some(raw) => Some(config_id(raw, &f.path_of(key))?),
        None => None,
    };
    if d == Dialect::V1 && id.is_none() {
        return Err(invalid("id", "is required"));
    }
    Ok((task, id))
}

/// `ListTaskPushNotificationConfigs`: the task, page size and page token.
pub fn decode_list_push(
    d: Dialect,
    params: &Value,
) -> Result<(TaskId, Option<u32>, Option<String>), Error> {
    let f = Fields::root(params)?;
    let task = task_of(d, &f)?;
    let size = f.opt_count("pageSize")?;
    let token = f.opt_nonempty_str("pageToken")?.map(str::to_owned);
    Ok((task, size, token))
}

/// The task a push request is about: 1.0 `taskId`; 0.3 JSON-RPC `taskId` (set) or `id`;
/// 0.3 REST the path's `taskId` or a resource name; 0.1 `id`.
fn task_of(d: Dialect, f: &Fields<'_>) -> Result<TaskId, Error> {
    let keys: &[&str] = match d {
        Dialect::V1 => &["taskId"],
        Dialect::V03Rpc => &["taskId", "id"],
        Dialect::V03Rest => &["taskId", "parent", "name"],
        Dialect::V01 => &["id"],
    };
    for key in keys {
        if let Some(raw) = f.opt_nonempty_str(key)? {
            let raw = raw.strip_prefix("tasks/").unwrap_or(raw);
            let raw = raw.split('/').next().unwrap_or(raw);
            return parse_id(raw, &f.path_of(key), TaskId::parse);
        }
    }
    Err(invalid(&f.path_of(keys[0]), "is required"))
}

fn decode_spec(d: Dialect, f: &Fields<'_>) -> Result<PushSpec, Error> {
    let id = match f.opt_nonempty_str("id")? {
        Some(raw) => Some(config_id(raw, &f.path_of("id"))?),
        None => None,
    };
    let url = f.req_str("url")?;
    if url.trim().is_empty() {
        return Err(invalid(&f.path_of("url"), "is required"));
    }
    let url = header_safe(url, &f.path_of("url"))?;
    let token = match f.opt_nonempty_str("token")? {
        Some(t) => Some(header_safe(t, &f.path_of("token"))?),
        None => None,
    };
    let auth = match f.opt_child("authentication")? {
        None => None,
        Some(a) => decode_auth(&a)?,
    };
    Ok(PushSpec {
        id,
        url,
        token,
        auth,
        dialect: push_dialect(d),
    })
}

/// `{scheme, credentials}` (1.0) or `{schemes[], credentials}` (0.3, 0.1: the first
/// scheme is the one used). No scheme at all is no authentication.
fn decode_auth(a: &Fields<'_>) -> Result<Option<PushAuth>, Error> {
    let scheme = match a.opt_nonempty_str("scheme")? {
        Some(s) => Some(s.to_owned()),
        None => a.strings("schemes")?.into_iter().find(|s| !s.is_empty()),
    };
    let credentials = match a.opt_nonempty_str("credentials")? {
        Some(c) => Some(header_safe(c, &a.path_of("credentials"))?),
        None => None,
    };
    let Some(scheme) = scheme else {
        if credentials.is_some() {
            return Err(invalid(
                &a.path_of("scheme"),
                "is required with credentials",
            ));
        }
        return Ok(None);
    };
    let scheme = header_safe(&scheme, &a.path_of("scheme"))?;
    if scheme.contains(char::is_whitespace) {
        return Err(invalid(
            &a.path_of("scheme"),
            "must be one word (e.g. Bearer)",
        ));
    }
    Ok(Some(PushAuth {
        scheme,
        credentials,
    }))
}

fn config_id(raw: &str, path: &str) -> Result<String, Error> {
    if raw.len() > MAX_CONFIG_ID {
        return Err(invalid(
            path,
            format!("is longer than {MAX_CONFIG_ID} bytes"),
        ));
    }
    if raw.contains('/') || raw.chars().any(char::is_control) {
        return Err(invalid(path, "must not contain '/' or control characters"));
    }
    Ok(raw.to_owned())
}

/// A value that goes into a header of the delivery: no CR, LF or other control
/// characters, bounded.
fn header_safe(raw: &str, path: &str) -> Result<String, Error> {
    if raw.len() > MAX_VALUE {
        return Err(invalid(path, format!("is longer than {MAX_VALUE} bytes")));
    }
    if raw.chars().any(|c| c.is_control()) {
        return Err(invalid(
            path,
            "must not contain control characters (CR, LF, …)",
        ));
    }
    Ok(raw.to_owned())
}

/// A config as `d` shows it to a client: its id, URL and authentication scheme, never
/// its `token` or `credentials` (see the module's header).
pub fn encode_push_config(d: Dialect, config: &PushConfig) -> Value {
    let mut inner = Map::new();
    inner.insert("id".into(), json!(config.id));
    inner.insert("url".into(), json!(config.url));
    if let Some(auth) = &config.auth {
        let a = match d {
            Dialect::V1 => json!({"scheme": auth.scheme}),
            Dialect::V03Rpc | Dialect::V03Rest | Dialect::V01 => json!({"schemes": [auth.scheme]}),
        };
        inner.insert("authentication".into(), a);
    }
    match d {
        Dialect::V1 => {
            let mut out = Map::new();
            out.insert("taskId".into(), json!(config.task_id.as_str()));
            out.extend(inner);
            Value::Object(out)
        }
        Dialect::V03Rpc => json!({
            "taskId": config.task_id.as_str(),
            "pushNotificationConfig": inner,
        }),
        Dialect::V03Rest => json!({
            "name": format!("tasks/{}/pushNotificationConfigs/{}", config.task_id, config.id),
            "pushNotificationConfig": inner,
        }),
        Dialect::V01 => {
            inner.remove("id");
            json!({
                "id": config.task_id.as_str(),
                "pushNotificationConfig": inner,
            })
        }
    }
}

/// A page of configs: 1.0 and 0.3 REST `{configs, nextPageToken}`, 0.3 JSON-RPC a bare
/// array (its list has no paging).
pub fn encode_push_list(d: Dialect, configs: &[PushConfig], next_page_token: &str) -> Value {
    let items: Vec<Value> = configs.iter().map(|c| encode_push_config(d, c)).collect();
    match d {
        Dialect::V03Rpc | Dialect::V01 => Value::Array(items),
        Dialect::V1 | Dialect::V03Rest => json!({
            "configs": items,
            "nextPageToken": next_page_token,
        }),
    }
}

/// The body a receiver gets: a 1.0 `StreamResponse`, or the 0.3 `Task` (with `kind`).
pub fn encode_push_payload(payload: &PushPayload) -> Value {
    match payload {
        PushPayload::Event { event } => encode_stream_event(Dialect::V1, event),
        PushPayload::Task { task } => encode_task(Dialect::V03Rpc, task),
    }
}
