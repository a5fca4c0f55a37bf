//! Micro-benchmarks of the protocol seam: decoding a typical JSON-RPC `SendMessage`
//! and encoding the completed task it answers with (both 1.0 ProtoJSON), and encoding
//! one status-update event as a JSON-RPC SSE frame (done once per subscriber of a
//! stream, see `sse_fanout` in benches/runtime.rs).
//!
//! Run with `cargo bench --bench protocol`; CI only compiles it (`cargo test
//! --all-targets` runs each benchmark once as a smoke test).

use std::hint::black_box;

use agent_a2a::a2a::{self, Dialect, jsonrpc};
use agent_a2a::domain::{
    Artifact, ContextId, Message, MessageId, Part, Role, SendOutcome, StreamEvent, Task, TaskId,
    TaskState, TaskStatus, TenantId, Timestamp,
};
use criterion::{Criterion, criterion_group, criterion_main};

const REQUEST: &str = r#"{"jsonrpc":"2.0","id":42,"method":"SendMessage","params":{
  "message":{"messageId":"0b7e0a5e-7a57-4d31-9d2b-3b3a4e0c1f00","role":"ROLE_USER",
  "contextId":"c5f0e3a2-1f7b-4a44-8c7e-2d1c9a0b7e11",
  "parts":[{"text":"Summarise the design decisions recorded for the persistence layer."},
           {"data":{"tool":"memory_search","arguments":{"query":"persistence","limit":5}}}]},
  "configuration":{"acceptedOutputModes":["text/plain","application/json"],"historyLength":10}}}"#;

fn completed_task() -> Task {
    let context = ContextId::generate();
    let user = Message {
        message_id: MessageId::generate(),
        context_id: Some(context.clone()),
        task_id: None,
        role: Role::User,
        parts: vec![Part::text("Summarise the design decisions.")],
        metadata: None,
        extensions: vec![],
        reference_task_ids: vec![],
    };
    let mut task = Task::submitted(
        TaskId::generate(),
        context.clone(),
        TenantId::default_tenant(),
        user,
        Timestamp(1),
    );
    let answer = Message::agent(context, Some(task.id.clone()), vec![Part::text("Done.")]);
    task.apply_artifact(
        &Artifact::new(vec![Part::text("A summary of several sentences.")]),
        false,
        Timestamp(2),
    );
    task.set_status(TaskStatus {
        state: TaskState::Completed,
        message: Some(answer),
        timestamp: Timestamp(3),
    });
    task
}

fn protocol(c: &mut Criterion) {
    c.bench_function("jsonrpc_decode_send_message", |b| {
        b.iter(|| {
            let rpc = jsonrpc::parse_request(black_box(REQUEST.as_bytes())).expect("valid request");
            a2a::decode_send(Dialect::V1, &rpc.params).expect("valid params")
        })
    });
    let outcome = SendOutcome::Task(completed_task());
    let id = serde_json::json!(42);
    c.bench_function("jsonrpc_encode_completed_task", |b| {
        b.iter(|| {
            let result = a2a::OutcomeWire(Dialect::V1, black_box(&outcome));
            serde_json::to_vec(&jsonrpc::Success::of(&id, &result)).expect("serializable")
        })
    });
    let task = completed_task();
    let update = StreamEvent::StatusUpdate {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        metadata: None,
    };
    c.bench_function("jsonrpc_encode_status_update_sse_frame", |b| {
        b.iter(|| {
            let payload = a2a::EventWire(Dialect::V1, black_box(&update));
            let data = serde_json::to_string(&jsonrpc::Success::of(&id, &payload));
            format!("id: 7\ndata: {}\n\n", data.expect("serializable"))
        })
    });
}

criterion_group!(benches, protocol);
criterion_main!(benches);
