//! Micro-benchmarks of the session layer, the pure code a thread actor runs around every
//! agent-loop event and before every model call: `append_event` (event → record),
//! `events` (records → ADK events for the next model turn) and `truncate_to_budget`.
//!
//! The histories are built the way production builds them: each turn's events go through
//! `append_event` and into a `History`, so the records (roles, generated call ids, tool
//! output repeated in `content`) are exactly what the store would hold. One turn is a user
//! question, a model message calling two tools, the tool message with both responses, and
//! the model's answer: four records.
//!
//! Run with `cargo bench --bench session`; `cargo test --all-targets` runs each benchmark
//! once as a smoke test.

use std::hint::black_box;
use std::time::Duration;

use agent_a2a::domain::Timestamp;
use agent_a2a::session::{
    self, Appended, Content, Event, FunctionCall, FunctionResponse, HeuristicEstimator, History,
    HistoryConfig, IdSource, Part, StoredMessage, append_event, truncate_to_budget,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Map, Value, json};

/// The thread actor's window (`threads.history_window` default).
const WINDOW: usize = 200;
/// The name of the root agent the events are attributed to.
const AGENT: &str = "root";

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn event(author: &str, role: &str, parts: Vec<Part>, at: i64) -> Event {
    Event::new(
        author,
        Some(Content {
            role: role.to_owned(),
            parts,
        }),
        Timestamp(at),
    )
}

fn question(turn: usize) -> Event {
    let text = format!(
        "Turn {turn}: what changed in the deployment of the billing service since last \
         week, and is any of it blocked by a governance policy?"
    );
    event("user", "user", vec![Part::Text(text)], turn as i64)
}

/// A model message calling two tools; ids left empty, as many providers send them.
fn calls(turn: usize) -> Event {
    let parts = vec![
        Part::Text("Let me check the notes and the policies.".into()),
        Part::FunctionCall(FunctionCall {
            id: String::new(),
            name: "memory_search".into(),
            args: object(json!({"query": format!("billing deployment turn {turn}"), "limit": 5})),
        }),
        Part::FunctionCall(FunctionCall {
            id: String::new(),
            name: "knowledge_query".into(),
            args: object(json!({"query": "billing service policy", "layer": "team"})),
        }),
    ];
    event(AGENT, "model", parts, turn as i64)
}

/// The tool responses to [`calls`]; ids left empty, so `append_event` matches them to
/// the pending calls by name (the expensive path).
fn responses(turn: usize) -> Event {
    let memory = json!({"results": [
        {"id": format!("mem-{turn}-1"), "content": "Billing moved to the new queue consumer; retries now back off exponentially.", "score": 0.82},
        {"id": format!("mem-{turn}-2"), "content": "The nightly invoice export runs at 02:00 UTC and takes about twenty minutes.", "score": 0.64}
    ]});
    let knowledge = json!({"items": [
        {"path": "team/billing/deploy.md", "title": "Billing deploys", "summary": "Deploys need a second approver outside business hours."}
    ]});
    let parts = vec![
        Part::FunctionResponse(FunctionResponse {
            id: String::new(),
            name: "memory_search".into(),
            response: object(memory),
        }),
        Part::FunctionResponse(FunctionResponse {
            id: String::new(),
            name: "knowledge_query".into(),
            response: object(knowledge),
        }),
    ];
    event(AGENT, "user", parts, turn as i64)
}

fn answer(turn: usize) -> Event {
    let text = format!(
        "Turn {turn}: billing now uses the new queue consumer with exponential retries, and \
         the nightly export is unchanged. Deploying outside business hours needs a second \
         approver under the team policy; nothing else is blocked."
    );
    event(AGENT, "model", vec![Part::Text(text)], turn as i64)
}

/// Commits `event` as the thread actor does: build the record, then push it.
fn push(history: &mut History, event: &Event, ids: &mut IdSource) {
    if let Appended::Message { record, .. } = append_event(history, event, ids) {
        // Ignored error impossible: the record was built at `next_seq`.
        let _ = history.push(record);
    }
}

/// A history of `turns` four-record turns in a window of `capacity`.
fn history(turns: usize, capacity: usize) -> History {
    let mut history = History::new(1, capacity);
    let mut ids = IdSource::random();
    for turn in 0..turns {
        for e in [question(turn), calls(turn), responses(turn), answer(turn)] {
            push(&mut history, &e, &mut ids);
        }
    }
    history
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_event");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    // A full window, ending with a completed turn.
    let full = history(WINDOW / 4, WINDOW);
    // A full window whose last record is a model message with two unanswered calls.
    let mut pending = history(WINDOW / 4, WINDOW);
    let mut ids = IdSource::random();
    push(&mut pending, &question(WINDOW), &mut ids);
    push(&mut pending, &calls(WINDOW), &mut ids);
    let cases = [
        ("model_text", &full, answer(WINDOW)),
        ("two_function_calls", &full, calls(WINDOW)),
        ("two_responses_matched_by_name", &pending, responses(WINDOW)),
    ];
    for (name, window, e) in cases {
        group.bench_function(name, |b| {
            let mut ids = IdSource::random();
            b.iter(|| append_event(black_box(window), black_box(&e), &mut ids))
        });
    }
    group.finish();
}

fn reconstruct(c: &mut Criterion) {
    let mut group = c.benchmark_group("events");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut window = history(WINDOW / 4, WINDOW);
    let records: Vec<StoredMessage> = window.as_slice().to_vec();
    group.throughput(Throughput::Elements(records.len() as u64));
    // The default budget (32k tokens) keeps the whole window: every record is rebuilt.
    let budgets = [
        ("200_messages_all_kept", HistoryConfig::default()),
        (
            "200_messages_cut_to_4k_tokens",
            HistoryConfig {
                token_budget: 4_000,
                max_messages: 0,
            },
        ),
    ];
    for (name, cfg) in budgets {
        let rebuilt = session::events(&records, AGENT, &HeuristicEstimator, &cfg).len();
        group.bench_with_input(
            BenchmarkId::new(name, format!("events_{rebuilt}")),
            &cfg,
            |b, cfg| {
                b.iter(|| session::events(black_box(&records), AGENT, &HeuristicEstimator, cfg))
            },
        );
    }
    group.finish();
}

fn truncate(c: &mut Criterion) {
    let mut group = c.benchmark_group("truncate_to_budget");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    const MESSAGES: usize = 10_000;
    let mut window = history(MESSAGES / 4, MESSAGES);
    let records: Vec<StoredMessage> = window.as_slice().to_vec();
    for (name, budget) in [("default_32k_tokens", 0), ("no_cut", usize::MAX)] {
        let kept = truncate_to_budget(&records, budget, 0, &HeuristicEstimator).len();
        group.bench_with_input(
            BenchmarkId::new(format!("10k_messages_{name}"), format!("kept_{kept}")),
            &budget,
            |b, &budget| {
                b.iter(|| {
                    truncate_to_budget(black_box(&records), budget, 0, &HeuristicEstimator).len()
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, append, reconstruct, truncate);
criterion_main!(benches);
