//! Threads: upsert, the message window, `next_seq` and the open tasks of a snapshot.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::store::{Store, ThreadStatus, WriteOp};

on_both_backends!(
    unknown_threads_load_as_none,
    upserting_a_thread_keeps_its_creation_time,
    the_window_holds_the_newest_messages_in_seq_order,
    next_seq_follows_the_last_message,
    message_records_round_trip,
    open_tasks_exclude_terminal_ones,
    an_open_tasks_history_reaches_past_the_window,
    open_tasks_come_with_their_push_configs,
);

async fn unknown_threads_load_as_none(store: Arc<dyn Store>) {
    let t = tenant("acme");
    assert_eq!(store.load_thread(&t, &context("nope"), 10).await, Ok(None));
}

async fn upserting_a_thread_keeps_its_creation_time(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let first = thread(&t, &ctx, 100);
    store
        .commit(&[WriteOp::UpsertThread(first.clone())])
        .await
        .unwrap();

    let snapshot = store.load_thread(&t, &ctx, 10).await.unwrap().unwrap();
    assert_eq!(snapshot.thread, first);
    assert!(snapshot.recent.is_empty());
    assert_eq!(snapshot.next_seq, 1, "an empty thread starts at seq 1");
    assert!(snapshot.open_tasks.is_empty());

    let mut second = thread(&t, &ctx, 900);
    second.status = ThreadStatus::Expired;
    second.conversation_context = json!({"k": "v", "n": [1, 2]});
    store
        .commit(&[WriteOp::UpsertThread(second.clone())])
        .await
        .unwrap();

    let loaded = store
        .load_thread(&t, &ctx, 10)
        .await
        .unwrap()
        .unwrap()
        .thread;
    assert_eq!(
        loaded.created_at, first.created_at,
        "created_at is never updated"
    );
    assert_eq!(loaded.updated_at, second.updated_at);
    assert_eq!(loaded.expires_at, second.expires_at);
    assert_eq!(loaded.status, ThreadStatus::Expired);
    assert_eq!(loaded.conversation_context, second.conversation_context);
}

/// Stores messages `seqs` (in that order) in a fresh thread.
async fn thread_with_messages(store: &dyn Store, ctx: &ContextId, seqs: &[i64]) {
    let t = tenant("acme");
    let mut ops = vec![WriteOp::UpsertThread(thread(&t, ctx, 100))];
    for &seq in seqs {
        let m = message(ctx, None, Role::User, &format!("message {seq}"));
        ops.push(WriteOp::AppendMessage(record(&t, seq, &m)));
    }
    store.commit(&ops).await.unwrap();
}

async fn the_window_holds_the_newest_messages_in_seq_order(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    // Appended out of order: the store orders by seq, never by insertion or time.
    thread_with_messages(&*store, &ctx, &[3, 1, 5, 2, 4]).await;

    let seqs =
        |s: &crate::store::ThreadSnapshot| s.recent.iter().map(|m| m.seq).collect::<Vec<_>>();
    let window3 = store.load_thread(&t, &ctx, 3).await.unwrap().unwrap();
    assert_eq!(seqs(&window3), [3, 4, 5]);
    let all = store.load_thread(&t, &ctx, 100).await.unwrap().unwrap();
    assert_eq!(seqs(&all), [1, 2, 3, 4, 5]);
    assert_eq!(all.recent[0].content, "message 1");
    let none = store.load_thread(&t, &ctx, 0).await.unwrap().unwrap();
    assert!(none.recent.is_empty());
}

async fn next_seq_follows_the_last_message(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    thread_with_messages(&*store, &ctx, &[1, 2, 3, 4, 5, 6, 7]).await;
    for window in [0, 1, 7, 50] {
        let snapshot = store.load_thread(&t, &ctx, window).await.unwrap().unwrap();
        assert_eq!(snapshot.next_seq, 8, "window {window}");
    }
}

async fn message_records_round_trip(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let task = task_id("task-1");
    let mut with_everything = record(&t, 1, &message(&ctx, Some(&task), Role::Agent, "hello"));
    with_everything.role = "assistant".into();
    with_everything.author = Some("planner".into());
    with_everything.tool_calls = json!([{"id": "call-1", "name": "search", "args": {"q": "x"}}]);
    with_everything.metadata = Some(json!({"tokens": 12}).as_object().unwrap().clone());
    let mut bare = record(&t, 2, &message(&ctx, None, Role::User, "plain"));
    bare.message_id = None;
    bare.parts = Vec::new();
    store
        .commit(&[
            WriteOp::UpsertThread(thread(&t, &ctx, 100)),
            WriteOp::AppendMessage(with_everything.clone()),
            WriteOp::AppendMessage(bare.clone()),
        ])
        .await
        .unwrap();

    let snapshot = store.load_thread(&t, &ctx, 10).await.unwrap().unwrap();
    assert_eq!(snapshot.recent, [with_everything, bare]);
}

async fn open_tasks_exclude_terminal_ones(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let working = task(&t, &ctx, "task-working", TaskState::Working, 200);
    let waiting = task(&t, &ctx, "task-waiting", TaskState::InputRequired, 300);
    let mut ops = vec![WriteOp::UpsertThread(thread(&t, &ctx, 100))];
    for (i, state) in [
        TaskState::Completed,
        TaskState::Canceled,
        TaskState::Failed,
        TaskState::Rejected,
    ]
    .into_iter()
    .enumerate()
    {
        ops.push(WriteOp::UpsertTask(
            task(&t, &ctx, &format!("task-done-{i}"), state, 400).into(),
        ));
    }
    // A non-terminal task of another thread is not this thread's.
    ops.push(WriteOp::UpsertTask(
        task(
            &t,
            &context("other"),
            "task-elsewhere",
            TaskState::Working,
            1,
        )
        .into(),
    ));
    ops.push(WriteOp::UpsertTask(working.clone().into()));
    ops.push(WriteOp::UpsertTask(waiting.clone().into()));
    let history = [
        message(&ctx, Some(&working.id), Role::User, "do it"),
        message(&ctx, Some(&working.id), Role::Agent, "on it"),
    ];
    ops.extend(history_ops(&t, &working, 1, &history));
    ops.push(event_op(
        &working,
        1,
        status_event(&working, TaskState::Working, 200),
    ));
    ops.push(event_op(
        &working,
        2,
        status_event(&working, TaskState::Working, 201),
    ));
    store.commit(&ops).await.unwrap();

    let snapshot = store.load_thread(&t, &ctx, 10).await.unwrap().unwrap();
    let mut open: Vec<_> = snapshot
        .open_tasks
        .iter()
        .map(|s| s.task.id.as_str())
        .collect();
    open.sort_unstable();
    assert_eq!(open, ["task-waiting", "task-working"]);
    for stored in &snapshot.open_tasks {
        if stored.task.id == working.id {
            assert_eq!(stored.task.history, history, "full history of an open task");
            assert_eq!(stored.last_event_seq, 2);
        } else {
            assert!(stored.task.history.is_empty());
            assert_eq!(stored.last_event_seq, 0, "no events yet");
            assert_eq!(stored.task, waiting);
        }
    }
}

async fn an_open_tasks_history_reaches_past_the_window(store: Arc<dyn Store>) {
    // The reload's window holds the newest two messages; the open task's history is
    // seqs 1, 2 and 4 (3 and 5 belong to no task), so two of its entries are read
    // beyond the window and one comes from it.
    let t = tenant("acme");
    let ctx = context("long");
    let open = task(&t, &ctx, "open", TaskState::InputRequired, 100);
    let texts = ["first", "second", "aside", "third", "latest"];
    let messages: Vec<Message> = texts
        .iter()
        .map(|text| message(&ctx, Some(&open.id), Role::User, text))
        .collect();
    let mut ops = vec![
        WriteOp::UpsertThread(thread(&t, &ctx, 100)),
        WriteOp::UpsertTask(open.clone().into()),
    ];
    for (i, m) in messages.iter().enumerate() {
        ops.push(WriteOp::AppendMessage(record(&t, i as i64 + 1, m)));
    }
    for (position, seq) in [1, 2, 4].into_iter().enumerate() {
        ops.push(WriteOp::LinkTaskMessage {
            tenant: t.clone(),
            task_id: open.id.clone(),
            position: position as i64,
            message_seq: seq,
        });
    }
    store.commit(&ops).await.unwrap();

    let snapshot = store.load_thread(&t, &ctx, 2).await.unwrap().unwrap();
    let recent: Vec<_> = snapshot.recent.iter().map(|m| m.seq).collect();
    assert_eq!(recent, [4, 5]);
    let [stored] = &snapshot.open_tasks[..] else {
        panic!("one open task: {:?}", snapshot.open_tasks);
    };
    let history: Vec<_> = stored.task.history.iter().map(Message::text).collect();
    assert_eq!(history, ["first", "second", "third"]);
    // With no window at all, every entry is read.
    let snapshot = store.load_thread(&t, &ctx, 0).await.unwrap().unwrap();
    assert_eq!(snapshot.open_tasks[0].task.history, stored.task.history);
    assert_eq!(snapshot.next_seq, 6);
}

async fn open_tasks_come_with_their_push_configs(store: Arc<dyn Store>) {
    use super::push::config;
    let t = tenant("acme");
    let ctx = context("pushed");
    let open = task(&t, &ctx, "open", TaskState::Working, 100);
    let done = task(&t, &ctx, "done", TaskState::Completed, 100);
    let elsewhere = task(&t, &context("other"), "elsewhere", TaskState::Working, 100);
    let mut ops = vec![
        WriteOp::UpsertThread(thread(&t, &ctx, 100)),
        WriteOp::UpsertThread(thread(&t, &context("other"), 100)),
    ];
    for task in [&open, &done, &elsewhere] {
        ops.push(WriteOp::UpsertTask(task.clone().into()));
        ops.push(WriteOp::PutPushConfig(config(&t, &task.id, "a", 100)));
    }
    ops.push(WriteOp::PutPushConfig(config(&t, &open.id, "b", 50)));
    // The same task id in another tenant is another task.
    ops.push(WriteOp::PutPushConfig(config(
        &tenant("other"),
        &open.id,
        "c",
        10,
    )));
    store.commit(&ops).await.unwrap();

    let snapshot = store.load_thread(&t, &ctx, 10).await.unwrap().unwrap();
    let found: Vec<_> = snapshot
        .push_configs
        .iter()
        .map(|c| (c.task_id.as_str(), c.id.as_str()))
        .collect();
    assert_eq!(found, [("open", "b"), ("open", "a")], "registration order");
    assert_eq!(snapshot.push_configs[1], config(&t, &open.id, "a", 100));

    // A thread without open tasks has no configs to load.
    let quiet = context("quiet");
    store
        .commit(&[WriteOp::UpsertThread(thread(&t, &quiet, 100))])
        .await
        .unwrap();
    let snapshot = store.load_thread(&t, &quiet, 10).await.unwrap().unwrap();
    assert!(snapshot.push_configs.is_empty() && snapshot.open_tasks.is_empty());
}
