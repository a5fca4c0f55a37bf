//! The turn rules (`plan/`) on a thread state built by hand: no actix, no store.

use std::collections::HashMap;
use std::sync::Arc;

use super::super::{Emit, Loaded, Mode, RunningTurn, TaskEntry, ThreadKey, TurnEmit};
use super::{EmitApply, HowToStart, Planned, StartTurn, plan_emit, plan_forced_status, plan_start};
use crate::config::StateSettings;
use crate::domain::{
    Artifact, ContextId, Message, Part, PushDialect, PushPayload, PushSpec, Role, SendConfig,
    SendMessage, StreamEvent, Task, TaskId, TaskState, TaskStatus, TenantId, Timestamp,
};
use crate::error::Error;
use crate::runtime::lifecycle::shutdown::Activity;
use crate::session::{Content, Event, History, ThreadState};
use crate::store::{ThreadRecord, ThreadStatus, WriteOp};

const NOW: Timestamp = Timestamp(1_800_000_000_000);
const TTL_MS: i64 = 60_000;
const MAX_PUSH: usize = 2;

fn key() -> ThreadKey {
    ThreadKey {
        tenant: TenantId::default_tenant(),
        context_id: ContextId::parse("ctx-1").unwrap(),
    }
}

/// A thread with nothing in it yet (`persisted`: its row is stored, expiring at
/// `expires_at`).
fn thread(persisted: bool, expires_at: Timestamp) -> Loaded {
    let key = key();
    Loaded::with(
        ThreadRecord {
            tenant: key.tenant,
            thread_id: key.context_id,
            created_at: NOW,
            updated_at: NOW,
            expires_at,
            status: ThreadStatus::Active,
            conversation_context: serde_json::json!({}),
        },
        persisted,
        History::new(1, 50),
        ThreadState::new(&StateSettings {
            ttl_secs: 3600,
            max_bytes: 64,
        }),
        HashMap::new(),
    )
}

fn fresh() -> Loaded {
    thread(false, Timestamp(NOW.0 + TTL_MS))
}

fn user(text: &str, task_id: Option<&TaskId>) -> SendMessage {
    SendMessage {
        message: Message {
            role: Role::User,
            context_id: None,
            ..Message::agent(key().context_id, task_id.cloned(), vec![Part::text(text)])
        },
        config: SendConfig::default(),
        metadata: None,
        create_missing_task: false,
        idempotency_key: None,
    }
}

/// Applies a planned start the way the actor does (memory only), with the turn running.
fn started(loaded: &mut Loaded, start: StartTurn, turn: u64) -> TaskId {
    let (task_id, _, _) = loaded.apply_start(start);
    loaded.running = Some(RunningTurn {
        task_id: task_id.clone(),
        turn,
        abort: None,
        replied: false,
        _busy: Arc::new(Activity::default()).busy(),
        span: tracing::Span::none(),
    });
    task_id
}

/// A materialized task of the thread in `state`, with one history message.
fn stored_task(loaded: &mut Loaded, state: TaskState) -> TaskId {
    let key = key();
    let id = TaskId::generate();
    let first = Message {
        context_id: Some(key.context_id.clone()),
        task_id: Some(id.clone()),
        ..user("first", None).message
    };
    let mut task = Task::submitted(id.clone(), key.context_id, key.tenant, first, NOW);
    task.set_status(TaskStatus {
        state,
        message: None,
        timestamp: NOW,
    });
    loaded.tasks.insert(
        id.clone(),
        TaskEntry {
            task,
            materialized: true,
            last_seq: 3,
            hub: None,
            waiters: Vec::new(),
            finished_at: None,
            history_seqs: vec![1],
            push: Vec::new(),
            push_unwritten: Vec::new(),
            claim_key: None,
        },
    );
    loaded.thread_persisted = true;
    loaded.next_seq = 2;
    id
}

fn how(mode: Mode) -> HowToStart<'static> {
    HowToStart {
        mode,
        ttl_ms: TTL_MS,
        max_push_configs: MAX_PUSH,
        claim: None,
    }
}

/// Plans the start of a turn whose caller waits for its outcome.
fn start_blocking(loaded: &Loaded, cmd: &SendMessage) -> Result<Planned<StartTurn>, Error> {
    plan_start(&key(), loaded, cmd, &how(Mode::Blocking), NOW)
}

/// A fresh thread whose first message started turn `turn` on a provisional task.
fn new_turn(turn: u64) -> (Loaded, TaskId) {
    let mut loaded = fresh();
    let start = start_blocking(&loaded, &user("hi", None))
        .expect("a plan")
        .apply;
    let task_id = started(&mut loaded, start, turn);
    (loaded, task_id)
}

fn emit(task_id: &TaskId, turn: u64, emit: Emit) -> TurnEmit {
    TurnEmit {
        task_id: task_id.clone(),
        turn,
        emit,
    }
}

fn status(state: TaskState, message: Option<&str>) -> Emit {
    Emit::Status {
        state,
        message: message.map(|text| Message::agent(key().context_id, None, vec![Part::text(text)])),
        metadata: None,
    }
}

fn kinds(ops: &[WriteOp]) -> Vec<&'static str> {
    ops.iter()
        .map(|op| match op {
            WriteOp::UpsertThread(_) | WriteOp::InsertThread(_) => "thread",
            WriteOp::AppendMessage(_) => "message",
            WriteOp::UpsertTask(_) | WriteOp::InsertTask(_) => "task",
            WriteOp::LinkTaskMessage { .. } => "link",
            WriteOp::AppendTaskEvent { .. } => "event",
            WriteOp::ExpireThreads { .. } => "expire",
            WriteOp::RetireThreads { .. } => "retire",
            WriteOp::PutPushConfig(_) => "push_config",
            WriteOp::DeletePushConfig { .. } => "push_delete",
            WriteOp::EnqueuePush { .. } => "enqueue",
            WriteOp::PushDone(_) | WriteOp::PushRetry { .. } => "outbox",
            WriteOp::ClaimKey(_) => "claim",
            WriteOp::SettleClaim { .. } => "settle",
            WriteOp::ForgetClaims { .. } => "forget",
            WriteOp::Fence(_) => "fence",
        })
        .collect()
}

#[test]
fn a_new_task_writes_only_the_thread_and_the_message_until_its_first_output() {
    let loaded = fresh();
    let plan = start_blocking(&loaded, &user("hi", None)).expect("a plan");
    assert_eq!(kinds(&plan.ops), ["thread", "message"]);
    assert!(!plan.apply.materialized && !plan.apply.existing);
    assert_eq!(plan.apply.seq, 1);
    assert_eq!(plan.apply.task.status.state, TaskState::Submitted);
    assert_eq!(plan.apply.thread.expires_at, Timestamp(NOW.0 + TTL_MS));
    // The message is not linked to a task that may never exist.
    let WriteOp::AppendMessage(record) = &plan.ops[1] else {
        unreachable!()
    };
    assert_eq!(record.task_id, None);
}

#[test]
fn return_immediately_materializes_the_task_at_the_start() {
    let loaded = fresh();
    let plan = plan_start(
        &key(),
        &loaded,
        &user("hi", None),
        &how(Mode::Immediate),
        NOW,
    )
    .expect("a plan");
    assert_eq!(kinds(&plan.ops), ["thread", "message", "task", "link"]);
    assert!(plan.apply.materialized);
}

#[test]
fn an_expired_thread_takes_no_message() {
    let expired = thread(true, NOW);
    let refused = start_blocking(&expired, &user("hi", None));
    assert!(
        matches!(refused, Err(Error::ThreadExpired(_))),
        "{:?}",
        refused.err()
    );
    // A thread that only exists in memory has nothing to expire.
    let unsaved = thread(false, NOW);
    assert!(start_blocking(&unsaved, &user("hi", None)).is_ok());
}

#[test]
fn a_follow_up_needs_a_known_task_that_is_not_terminal() {
    let mut loaded = fresh();
    let unknown = TaskId::generate();
    let refused = start_blocking(&loaded, &user("x", Some(&unknown)));
    assert!(matches!(refused, Err(Error::TaskNotFound(_))));
    // A 0.1 client may name the task it creates.
    let mut create = user("x", Some(&unknown));
    create.create_missing_task = true;
    let plan = start_blocking(&loaded, &create).expect("created");
    assert_eq!(plan.apply.task.id, unknown);

    let done = stored_task(&mut loaded, TaskState::Completed);
    let refused = start_blocking(&loaded, &user("x", Some(&done)));
    assert!(matches!(refused, Err(Error::UnsupportedOperation(_))));
}

#[test]
fn a_follow_up_resumes_an_interrupted_task_and_links_the_message_after_its_history() {
    let mut loaded = fresh();
    let asked = stored_task(&mut loaded, TaskState::InputRequired);
    let plan = start_blocking(&loaded, &user("more", Some(&asked))).expect("a plan");
    assert_eq!(
        kinds(&plan.ops),
        ["thread", "message", "link", "event", "task"]
    );
    let WriteOp::LinkTaskMessage {
        position,
        message_seq,
        ..
    } = &plan.ops[2]
    else {
        unreachable!()
    };
    assert_eq!((*position, *message_seq), (1, 2));
    let (seq, event) = plan.apply.event.expect("a resume event");
    assert_eq!(seq, 4, "after the task's last logged event");
    assert!(
        matches!(event, StreamEvent::StatusUpdate { status, .. } if status.state == TaskState::Working)
    );
    assert_eq!(plan.apply.task.history.len(), 2);
}

#[test]
fn working_again_without_a_message_is_not_a_second_event() {
    let mut loaded = fresh();
    let asked = stored_task(&mut loaded, TaskState::InputRequired);
    let start = start_blocking(&loaded, &user("more", Some(&asked)))
        .expect("a plan")
        .apply;
    let task_id = started(&mut loaded, start, 7);
    assert_eq!(loaded.tasks[&task_id].task.status.state, TaskState::Working);
    // The executor says "working" as every turn does: the resume already said it.
    let plan = plan_emit(
        &key(),
        &loaded,
        &emit(&task_id, 7, status(TaskState::Working, None)),
        NOW,
    )
    .expect("a plan");
    assert!(plan.ops.is_empty(), "{:?}", kinds(&plan.ops));
    assert!(matches!(
        plan.apply,
        EmitApply::Session {
            record: None,
            state: None
        }
    ));
    // Working with something to say is an event.
    let plan = plan_emit(
        &key(),
        &loaded,
        &emit(
            &task_id,
            7,
            status(TaskState::Working, Some("looking it up")),
        ),
        NOW,
    )
    .expect("a plan");
    assert!(kinds(&plan.ops).contains(&"event"));
}

#[test]
fn the_first_output_of_a_provisional_task_materializes_it_with_its_message() {
    let (loaded, task_id) = new_turn(7);
    let plan = plan_emit(
        &key(),
        &loaded,
        &emit(&task_id, 7, status(TaskState::Completed, Some("done"))),
        NOW,
    )
    .expect("a plan");
    // The user message becomes history entry 0, the status message entry 1.
    assert_eq!(
        kinds(&plan.ops),
        ["link", "message", "link", "task", "event"]
    );
    let EmitApply::Event {
        task,
        seq,
        next_seq,
        new_seqs,
        ..
    } = plan.apply
    else {
        panic!("an event plan")
    };
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!((seq, next_seq, new_seqs), (1, 3, vec![2]));
    // The task's first row: inserted, not upserted.
    assert!(matches!(plan.ops[3], WriteOp::InsertTask(_)));
}

#[test]
fn a_thread_and_a_task_no_store_holds_are_written_as_first_rows() {
    // A thread the store did not have: its first row; a thread loaded from it: updated.
    let plan = start_blocking(&fresh(), &user("hi", None)).expect("a plan");
    assert!(matches!(plan.ops[0], WriteOp::InsertThread(_)));
    let mut loaded = fresh();
    let id = stored_task(&mut loaded, TaskState::InputRequired);
    let plan = start_blocking(&loaded, &user("more", Some(&id))).expect("a plan");
    assert!(matches!(plan.ops[0], WriteOp::UpsertThread(_)));
    // A stored task's next write is an update.
    assert!(
        plan.ops
            .iter()
            .any(|op| matches!(op, WriteOp::UpsertTask(_)))
    );
    // A task made at the start (`returnImmediately`) is a first row.
    let plan = plan_start(
        &key(),
        &fresh(),
        &user("hi", None),
        &how(Mode::Immediate),
        NOW,
    )
    .expect("a plan");
    assert!(
        plan.ops
            .iter()
            .any(|op| matches!(op, WriteOp::InsertTask(_)))
    );
}

#[test]
fn outputs_are_checked_against_the_turn_and_the_task() {
    let (mut loaded, task_id) = new_turn(7);
    // Another turn's output.
    let stale = plan_emit(
        &key(),
        &loaded,
        &emit(&task_id, 6, status(TaskState::Working, None)),
        NOW,
    );
    assert!(matches!(stale, Err(Error::UnsupportedOperation(_))));
    // A transition the state machine does not allow.
    let illegal = plan_emit(
        &key(),
        &loaded,
        &emit(&task_id, 7, status(TaskState::Submitted, None)),
        NOW,
    );
    assert!(
        matches!(illegal, Err(Error::InvalidAgentResponse(_))),
        "{:?}",
        illegal.err()
    );
    // An artifact after the end.
    loaded
        .tasks
        .get_mut(&task_id)
        .unwrap()
        .task
        .set_status(TaskStatus {
            state: TaskState::Completed,
            message: None,
            timestamp: NOW,
        });
    let late = plan_emit(
        &key(),
        &loaded,
        &emit(
            &task_id,
            7,
            Emit::Artifact {
                artifact: Artifact::new(vec![Part::text("a")]),
                append: false,
                last_chunk: true,
            },
        ),
        NOW,
    );
    assert!(matches!(late, Err(Error::InvalidAgentResponse(_))));
}

#[test]
fn a_reply_answers_without_a_task_only_before_the_task_exists() {
    let (mut loaded, task_id) = new_turn(1);
    let reply = Emit::Reply(Message::agent(
        key().context_id,
        None,
        vec![Part::text("hello")],
    ));
    let plan = plan_emit(&key(), &loaded, &emit(&task_id, 1, reply.clone()), NOW).unwrap();
    assert_eq!(kinds(&plan.ops), ["message"]);
    assert!(matches!(plan.apply, EmitApply::Reply { .. }));
    // Once the task exists, the same reply completes it.
    loaded.tasks.get_mut(&task_id).unwrap().materialized = true;
    let plan = plan_emit(&key(), &loaded, &emit(&task_id, 1, reply), NOW).unwrap();
    let EmitApply::Event { task, .. } = plan.apply else {
        panic!("an event plan")
    };
    assert_eq!(task.status.state, TaskState::Completed);
}

#[test]
fn a_state_delta_past_the_limit_refuses_the_whole_event() {
    let (loaded, task_id) = new_turn(1);
    let mut event = Event::new(
        "agent",
        Some(Content {
            role: "model".into(),
            parts: vec![crate::session::Part::Text("thinking".into())],
        }),
        NOW,
    );
    event
        .actions
        .state_delta
        .insert("notes".into(), serde_json::json!("x".repeat(100)));
    let refused = plan_emit(
        &key(),
        &loaded,
        &emit(&task_id, 1, Emit::Event(Box::new(event.clone()))),
        NOW,
    );
    assert!(
        matches!(refused, Err(Error::InvalidAgentResponse(_))),
        "{:?}",
        refused.err()
    );
    // Within the limit: the record and the thread row carrying the new state.
    event
        .actions
        .state_delta
        .insert("notes".into(), serde_json::json!("ok"));
    let plan = plan_emit(
        &key(),
        &loaded,
        &emit(&task_id, 1, Emit::Event(Box::new(event))),
        NOW,
    )
    .expect("a plan");
    assert_eq!(kinds(&plan.ops), ["thread", "message"]);
}

#[test]
fn a_forced_status_needs_a_materialized_task_that_is_not_terminal() {
    let mut loaded = fresh();
    let open = stored_task(&mut loaded, TaskState::Working);
    let text = Message::agent(key().context_id, None, vec![Part::text("stopped")]);
    let plan = plan_forced_status(&key(), &loaded, &open, TaskState::Canceled, Some(text), NOW)
        .expect("a plan");
    // The same writes as any status with a message: message, link, task, event.
    assert_eq!(kinds(&plan.ops), ["message", "link", "task", "event"]);
    let done = stored_task(&mut loaded, TaskState::Failed);
    let refused = plan_forced_status(&key(), &loaded, &done, TaskState::Canceled, None, NOW);
    assert!(matches!(refused, Err(Error::TaskNotCancelable { .. })));
    let unknown = plan_forced_status(
        &key(),
        &loaded,
        &TaskId::generate(),
        TaskState::Canceled,
        None,
        NOW,
    );
    assert!(matches!(unknown, Err(Error::TaskNotFound(_))));
}

fn push_config(task_id: &TaskId, id: &str, dialect: PushDialect) -> crate::domain::PushConfig {
    PushSpec {
        id: Some(id.into()),
        url: "https://hooks.example.org/a2a".into(),
        token: None,
        auth: None,
        dialect,
    }
    .into_config(key().tenant, task_id.clone(), NOW)
}

fn with_push(mut cmd: SendMessage, id: &str, dialect: PushDialect) -> SendMessage {
    cmd.config.push = Some(PushSpec {
        id: Some(id.into()),
        url: "https://hooks.example.org/a2a".into(),
        token: None,
        auth: None,
        dialect,
    });
    cmd
}

#[test]
fn a_push_config_sent_with_a_new_task_is_written_with_the_task_and_gets_its_first_event() {
    let mut loaded = fresh();
    let cmd = with_push(user("hi", None), "c-1", PushDialect::V1);
    let start = start_blocking(&loaded, &cmd).expect("a plan");
    // Nothing of a provisional task is written, its config neither.
    assert_eq!(kinds(&start.ops), ["thread", "message"]);
    let task_id = started(&mut loaded, start.apply, 1);
    let plan = plan_emit(
        &key(),
        &loaded,
        &emit(&task_id, 1, status(TaskState::Completed, None)),
        NOW,
    )
    .expect("a plan");
    assert_eq!(
        kinds(&plan.ops),
        ["link", "push_config", "task", "event", "enqueue"]
    );
    let Some(WriteOp::EnqueuePush {
        config,
        seq,
        payload,
        ..
    }) = plan.ops.last()
    else {
        panic!("an outbox row last")
    };
    assert_eq!((config.id.as_str(), *seq), ("c-1", 1));
    assert_eq!(config.task_id, task_id);
    assert!(matches!(
        payload,
        PushPayload::Event { event } if matches!(**event, StreamEvent::StatusUpdate { .. })
    ));
}

#[test]
fn every_event_of_a_task_is_queued_for_each_config_in_its_dialects_payload() {
    let mut loaded = fresh();
    let task_id = stored_task(&mut loaded, TaskState::InputRequired);
    let entry = loaded.tasks.get_mut(&task_id).unwrap();
    for (id, dialect) in [("a", PushDialect::V1), ("b", PushDialect::V03)] {
        entry.push.push(push_config(&task_id, id, dialect).target());
    }
    let plan = plan_forced_status(&key(), &loaded, &task_id, TaskState::Canceled, None, NOW)
        .expect("a plan");
    assert_eq!(kinds(&plan.ops), ["task", "event", "enqueue", "enqueue"]);
    let payloads: Vec<&PushPayload> = plan
        .ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::EnqueuePush { payload, seq, .. } => {
                assert_eq!(*seq, 4);
                Some(payload)
            }
            _ => None,
        })
        .collect();
    assert!(matches!(payloads[0], PushPayload::Event { .. }));
    // The 0.3 receiver gets the task as the event leaves it, without its history.
    let PushPayload::Task { task } = payloads[1] else {
        panic!("a task payload")
    };
    assert_eq!(task.status.state, TaskState::Canceled);
    assert!(task.history.is_empty());
}

#[test]
fn a_follow_up_past_the_config_limit_is_refused_but_one_replacing_an_id_is_not() {
    let mut loaded = fresh();
    let task_id = stored_task(&mut loaded, TaskState::InputRequired);
    let entry = loaded.tasks.get_mut(&task_id).unwrap();
    for id in ["a", "b"] {
        entry
            .push
            .push(push_config(&task_id, id, PushDialect::V1).target());
    }
    let third = with_push(user("more", Some(&task_id)), "c", PushDialect::V1);
    let refused = start_blocking(&loaded, &third);
    assert!(
        matches!(refused, Err(Error::InvalidParams(ref m)) if m.contains("push.max_configs_per_task"))
    );
    let again = with_push(user("more", Some(&task_id)), "b", PushDialect::V03);
    let plan = start_blocking(&loaded, &again).expect("a replacement takes no room");
    // The resumed task's working event goes to both configs, `b` once.
    assert_eq!(
        kinds(&plan.ops),
        [
            "thread",
            "message",
            "push_config",
            "link",
            "event",
            "enqueue",
            "enqueue",
            "task"
        ]
    );
}

#[test]
fn a_claimed_message_claims_its_key_first_and_a_reply_settles_it() {
    let claim = super::super::TurnClaim {
        key: "m-1".into(),
        digest: "d".into(),
        task_id: TaskId::parse("chosen-task").unwrap(),
        at: NOW,
        taken_over_before: Timestamp(NOW.0 - 1000),
        known_unclaimed: true,
    };
    let mut loaded = fresh();
    let plan = plan_start(
        &key(),
        &loaded,
        &user("hi", None),
        &HowToStart {
            claim: Some(&claim),
            ..how(Mode::Blocking)
        },
        NOW,
    )
    .expect("a plan");
    assert_eq!(kinds(&plan.ops), ["claim", "thread", "message"]);
    assert_eq!(plan.apply.task.id.as_str(), "chosen-task");
    let task_id = started(&mut loaded, plan.apply, 1);
    let reply = Emit::Reply(Message::agent(
        key().context_id,
        None,
        vec![Part::text("hey")],
    ));
    let plan = plan_emit(&key(), &loaded, &emit(&task_id, 1, reply), NOW).expect("a plan");
    assert_eq!(kinds(&plan.ops), ["message", "settle"]);
}
