//! The protocol seam: A2A wire formats <-> the version-neutral domain.
//!
//! Four dialects are understood. 1.0 ProtoJSON ([`Dialect::V1`]) is the current
//! protocol; 0.3 JSON-RPC ([`Dialect::V03Rpc`]) and 0.3 HTTP+JSON ([`Dialect::V03Rest`])
//! keep 0.3 clients working; 0.1 `tasks/send` ([`Dialect::V01`]) serves the oldest
//! clients. Everything here is a pure function over `serde_json::Value` and domain
//! types: the http layer picks the dialect (from the method name or route and
//! [`version::negotiate`]), decodes with [`decode_send`] and friends, calls the runtime,
//! and encodes with [`encode_task`] and friends.
//!
//! **Architecture invariant:** this module knows nothing of actix or SQL; replacing the
//! web framework or the store does not touch it.
//!
//! Decoding is liberal (camelCase and snake_case, enum names and numbers, `null` as
//! unset, strings for numbers and booleans, both base64 alphabets, unknown fields
//! ignored); encoding is strict per dialect.

pub mod card;
mod client_message;
mod encode;
mod enums;
pub mod errors;
mod fast_send;
mod fields;
pub mod generations;
pub mod jsonrpc;
mod params;
mod parts;
mod push;
pub mod signing;
pub mod version;

#[cfg(test)]
pub(crate) mod strategies;
#[cfg(test)]
mod tests;

pub(crate) use client_message::without_reserved_keys;
pub use encode::{
    EventWire, MessageWire, OutcomeWire, PageWire, TRANSITIONS_KEY, TaskWire, encode_message,
    encode_send_outcome, encode_stream_event, encode_task, encode_task_page,
};
pub(crate) use enums::{role_name, state_name};
pub use fast_send::{FastSend, fast_send};
pub use params::{
    DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, TaskQuery, check_input_modes, decode_get_task,
    decode_list_tasks, decode_send, decode_task_id,
};
pub use push::{
    decode_create_push, decode_list_push, decode_push_ref, encode_push_config, encode_push_list,
    encode_push_payload, push_dialect,
};

/// A wire format: one protocol version in one binding's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// A2A 1.0 ProtoJSON (JSON-RPC and HTTP+JSON share the shapes).
    V1,
    /// A2A 0.3 JSON-RPC JSON (`kind` discriminators, lowercase states).
    V03Rpc,
    /// A2A 0.3 HTTP+JSON under `/v1/...` (0.3 proto JSON: `content`, `msg`,
    /// `TASK_STATE_CANCELLED`).
    V03Rest,
    /// A2A 0.1 `tasks/send` / `tasks/sendSubscribe` (client-chosen task ids, `sessionId`,
    /// parts tagged by `type`).
    V01,
}

/// An A2A operation, whatever its name in a given version and binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Run a turn and answer with a task or a message.
    SendMessage,
    /// Run a turn and stream its events.
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    /// Stream an existing task's events, starting with a snapshot.
    SubscribeToTask,
    /// The four push-notification config operations.
    CreatePushConfig,
    GetPushConfig,
    ListPushConfigs,
    DeletePushConfig,
    GetExtendedAgentCard,
}

/// Resolves a JSON-RPC method name to its operation and the dialect its name implies.
///
/// 1.0 names are PascalCase (`SendMessage`, ...); 0.3 names are slash style
/// (`message/send`, ...); 0.1's `tasks/send` and `tasks/sendSubscribe` (and its
/// `tasks/pushNotification/set|get`) select the 0.1 dialect. 0.1's `tasks/get`,
/// `tasks/cancel` and `tasks/resubscribe` share their names with 0.3 and are answered
/// in 0.3 shapes. The grammars are disjoint, so the name alone decides.
pub fn method(name: &str) -> Option<(Operation, Dialect)> {
    use Dialect::{V01, V1, V03Rpc};
    use Operation::*;
    let found = match name {
        "SendMessage" => (SendMessage, V1),
        "SendStreamingMessage" => (SendStreamingMessage, V1),
        "GetTask" => (GetTask, V1),
        "ListTasks" => (ListTasks, V1),
        "CancelTask" => (CancelTask, V1),
        "SubscribeToTask" => (SubscribeToTask, V1),
        "CreateTaskPushNotificationConfig" => (CreatePushConfig, V1),
        "GetTaskPushNotificationConfig" => (GetPushConfig, V1),
        "ListTaskPushNotificationConfigs" => (ListPushConfigs, V1),
        "DeleteTaskPushNotificationConfig" => (DeletePushConfig, V1),
        "GetExtendedAgentCard" => (GetExtendedAgentCard, V1),

        "message/send" => (SendMessage, V03Rpc),
        "message/stream" => (SendStreamingMessage, V03Rpc),
        "tasks/get" => (GetTask, V03Rpc),
        "tasks/list" => (ListTasks, V03Rpc),
        "tasks/cancel" => (CancelTask, V03Rpc),
        "tasks/resubscribe" => (SubscribeToTask, V03Rpc),
        "tasks/pushNotificationConfig/set" => (CreatePushConfig, V03Rpc),
        "tasks/pushNotificationConfig/get" => (GetPushConfig, V03Rpc),
        "tasks/pushNotificationConfig/list" => (ListPushConfigs, V03Rpc),
        "tasks/pushNotificationConfig/delete" => (DeletePushConfig, V03Rpc),
        "agent/getAuthenticatedExtendedCard" => (GetExtendedAgentCard, V03Rpc),

        "tasks/send" => (SendMessage, V01),
        "tasks/sendSubscribe" => (SendStreamingMessage, V01),
        "tasks/pushNotification/set" => (CreatePushConfig, V01),
        "tasks/pushNotification/get" => (GetPushConfig, V01),
        _ => return None,
    };
    Some(found)
}
