//! Push-notification configs and what the outbox holds for them.

use serde::{Deserialize, Serialize};

use super::{StreamEvent, Task, TaskId, TenantId, Timestamp};

/// Which payload a config's receiver gets: the dialect that registered it decides, so a
/// 0.3 client keeps receiving what 0.3 servers send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PushDialect {
    /// A 1.0 `StreamResponse` per event.
    V1,
    /// The 0.3 (and 0.1) `Task` as of the event.
    V03,
}

impl PushDialect {
    pub fn as_str(self) -> &'static str {
        match self {
            PushDialect::V1 => "v1",
            PushDialect::V03 => "v03",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "v1" => Some(PushDialect::V1),
            "v03" => Some(PushDialect::V03),
            _ => None,
        }
    }
}

/// How the server authenticates to the receiver: `Authorization: <scheme> <credentials>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushAuth {
    pub scheme: String,
    pub credentials: Option<String>,
}

/// A config as a client asks for it, before it belongs to a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushSpec {
    /// The client's id for it; the server assigns one when absent.
    pub id: Option<String>,
    pub url: String,
    pub token: Option<String>,
    pub auth: Option<PushAuth>,
    pub dialect: PushDialect,
}

impl PushSpec {
    /// The config registered for `task_id` at `now`.
    pub fn into_config(self, tenant: TenantId, task_id: TaskId, now: Timestamp) -> PushConfig {
        PushConfig {
            tenant,
            task_id,
            id: self.id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            url: self.url,
            token: self.token,
            auth: self.auth,
            dialect: self.dialect,
            created_at: now,
        }
    }
}

/// A task's push-notification config, as registered (tenant and task fixed by the store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushConfig {
    pub tenant: TenantId,
    pub task_id: TaskId,
    /// Unique per task; the server assigns one when the client gives none.
    pub id: String,
    pub url: String,
    /// Sent as `X-A2A-Notification-Token`.
    pub token: Option<String>,
    pub auth: Option<PushAuth>,
    pub dialect: PushDialect,
    pub created_at: Timestamp,
}

impl PushConfig {
    /// What a thread actor keeps of it to enqueue deliveries.
    pub fn target(&self) -> PushTarget {
        PushTarget {
            config: std::sync::Arc::new(self.clone()),
        }
    }
}

/// A config as its task's thread actor knows it: each outbox row it writes carries the
/// config, so the delivery can make an event it is handed at commit without reading the
/// config back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushTarget {
    pub config: std::sync::Arc<PushConfig>,
}

impl PushTarget {
    pub fn config_id(&self) -> &str {
        &self.config.id
    }

    pub fn dialect(&self) -> PushDialect {
        self.config.dialect
    }
}

/// What one outbox row delivers, in the storage encoding; the delivery renders it in the
/// registering dialect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PushPayload {
    /// A 1.0 config: the event itself.
    Event { event: Box<StreamEvent> },
    /// A 0.3 config: the task as of the event, without its history (which `GetTask`
    /// gives): a task's history would make every delivery grow with the task.
    Task { task: Box<Task> },
}

impl PushPayload {
    /// The payload of `event` for a receiver of `dialect`; `task` is the task as the event
    /// leaves it.
    pub fn of(dialect: PushDialect, event: &StreamEvent, task: &Task) -> Self {
        match dialect {
            PushDialect::V1 => PushPayload::Event {
                event: Box::new(event.clone()),
            },
            PushDialect::V03 => {
                let mut task = task.clone();
                task.history.clear();
                PushPayload::Task {
                    task: Box::new(task),
                }
            }
        }
    }
}
