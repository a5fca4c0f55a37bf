//! Behaviour tests of the `Store` contract, against real databases only.
//!
//! Each behaviour is an `async fn(Arc<dyn Store>)` written once; [`on_both_backends!`]
//! turns it into a `sqlite::<name>` and a `postgres::<name>` test, so the two
//! implementations are held to the same specification. Postgres tests skip themselves
//! (loudly) when no server is reachable, except in CI.

use serde_json::json;

use super::{MessageRecord, ThreadRecord, ThreadStatus, WriteOp};
use crate::domain::{
    ContextId, Message, MessageId, Part, Role, StreamEvent, Task, TaskId, TaskState, TaskStatus,
    TenantId, Timestamp,
};

/// Generates one `#[tokio::test]` per backend for each named behaviour of the
/// enclosing module.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let db = $crate::store::testing::SqliteTestStore::open().await;
                    super::$name(db.store.clone()).await;
                }
            )*
        }

        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some(db) = $crate::store::testing::PgTestDb::create().await else {
                        return;
                    };
                    super::$name(db.open().await).await;
                }
            )*
        }
    };
}

mod atomicity;
mod census;
mod claims;
mod cluster;
mod config;
mod events;
mod expiry;
mod facts;
mod final_events;
mod first_rows;
mod isolation;
mod listing;
mod node_lock;
mod packed_ids;
mod pipelined;
mod prepared;
mod push;
mod readers;
mod retention;
mod sqlite_lock;
mod statistics;
mod tasks;
mod threads;
mod vacuum;

/// The SQL of a thread's reload's query for its open tasks (`tables/tasks.rs`
/// `open_of_thread`) in `dialect`, its two parameters (tenant, thread) unbound.
fn open_tasks_sql(dialect: crate::store::statement::Dialect) -> String {
    crate::store::tables::tasks::open_of_thread(dialect, "a", "c").sql
}

fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).unwrap()
}

fn context(id: &str) -> ContextId {
    ContextId::parse(id).unwrap()
}

fn task_id(id: &str) -> TaskId {
    TaskId::parse(id).unwrap()
}

fn thread(tenant: &TenantId, id: &ContextId, now: i64) -> ThreadRecord {
    ThreadRecord {
        tenant: tenant.clone(),
        thread_id: id.clone(),
        created_at: Timestamp(now),
        updated_at: Timestamp(now),
        expires_at: Timestamp(now + 86_400_000),
        status: ThreadStatus::Active,
        conversation_context: json!({"topic": "tests", "turns": 1}),
    }
}

/// An A2A message of a thread, optionally of a task.
fn message(thread: &ContextId, task: Option<&TaskId>, role: Role, text: &str) -> Message {
    Message {
        message_id: MessageId::generate(),
        context_id: Some(thread.clone()),
        task_id: task.cloned(),
        role,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    }
}

/// The record under which `message` is stored as message `seq` of its thread.
fn record(tenant: &TenantId, seq: i64, message: &Message) -> MessageRecord {
    MessageRecord {
        tenant: tenant.clone(),
        thread_id: message.context_id.clone().unwrap(),
        seq,
        message_id: Some(message.message_id.clone()),
        task_id: message.task_id.clone(),
        role: message.role.as_str().into(),
        author: None,
        content: message.text(),
        parts: message.parts.clone(),
        tool_calls: json!([]),
        metadata: message.metadata.clone(),
        created_at: Timestamp(1_000 + seq),
        extensions: message.extensions.clone(),
        reference_task_ids: message.reference_task_ids.clone(),
    }
}

/// A task in `state` whose status changed at `status_ts`, with no history.
fn task(tenant: &TenantId, ctx: &ContextId, id: &str, state: TaskState, status_ts: i64) -> Task {
    let first = message(ctx, None, Role::User, "start");
    let mut task = Task::submitted(
        task_id(id),
        ctx.clone(),
        tenant.clone(),
        first,
        Timestamp(1),
    );
    task.history.clear();
    if state != TaskState::Submitted {
        task.set_status(TaskStatus {
            state,
            message: None,
            timestamp: Timestamp(status_ts),
        });
    }
    task.status.timestamp = Timestamp(status_ts);
    task
}

/// The ops that store `messages` as seqs `first_seq..` of their thread and link them, in
/// order, as the task's history from position 0.
fn history_ops(
    tenant: &TenantId,
    task: &Task,
    first_seq: i64,
    messages: &[Message],
) -> Vec<WriteOp> {
    let mut ops = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let seq = first_seq + i as i64;
        ops.push(WriteOp::AppendMessage(record(tenant, seq, m)));
        ops.push(WriteOp::LinkTaskMessage {
            tenant: tenant.clone(),
            task_id: task.id.clone(),
            position: i as i64,
            message_seq: seq,
        });
    }
    ops
}

fn status_event(task: &Task, state: TaskState, ts: i64) -> StreamEvent {
    StreamEvent::StatusUpdate {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: TaskStatus {
            state,
            message: None,
            timestamp: Timestamp(ts),
        },
        metadata: None,
    }
}

fn event_op(task: &Task, seq: i64, event: StreamEvent) -> WriteOp {
    WriteOp::AppendTaskEvent {
        tenant: task.tenant.clone(),
        task_id: task.id.clone(),
        seq,
        event,
        created_at: Timestamp(5_000 + seq),
    }
}
