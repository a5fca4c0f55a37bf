//! Micro-benchmarks of the actor runtime, in-process through the public [`Runtime`] API
//! (no HTTP), on an embedded SQLite store in a temporary directory:
//!
//! - `thread_actor/spawn`: a `SendMessage` without `contextId`, blocking until the task
//!   completes: a new thread, a new `ThreadActor` (nothing to load), and a turn of four
//!   commits (the user message, working, an artifact, completed with a message).
//! - `thread_actor/resume`: the same turn in an existing thread whose actor is not
//!   resident, so the actor first loads the thread (its recent messages and open tasks)
//!   from the store. The threads were created by an earlier `Runtime` over the same file
//!   with ten turns each (each pass of the benchmark adds one); when every one has been
//!   resumed, a fresh `Runtime` (outside the timing) makes them non-resident again.
//! - `sse_fanout/<n>`: one task with `n` live subscribers (`Runtime::subscribe` streams,
//!   each framing every event as the JSON-RPC SSE binding does); the time from the
//!   executor being told to report a status update (`working` again, with a progress
//!   message) to the last subscriber having framed it. That path includes the update's commit: `n = 1` is the
//!   baseline for the fan-out of `n = 1000`.
//!
//! The executor is a small scripted one, so the numbers are the runtime's, not an agent's.
//! No metrics recorder is installed, so recording metrics costs next to nothing here.
//!
//! Run with `cargo bench --bench runtime`; `cargo test --all-targets` runs each benchmark
//! once as a smoke test, with a smaller pool of threads to resume.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::rt::System;
use agent_a2a::a2a::{Dialect, EventWire, jsonrpc};
use agent_a2a::config::Settings;
use agent_a2a::domain::{
    Artifact, ContextId, Message, MessageId, Part, Role, SendConfig, SendMessage, SendOutcome,
    StreamEvent, TaskId, TaskState, TenantId,
};
use agent_a2a::error::Error;
use agent_a2a::runtime::{AgentExecutor, ExecutorSource, Runtime, Turn, TurnSink};
use agent_a2a::skills::SkillRegistry;
use agent_a2a::store::{self, StoreConfig};
use async_trait::async_trait;
use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc, oneshot};

/// The text that starts a task which reports a status update per pulse.
const HOLD: &str = "hold";
/// Subscriber counts of the fan-out benchmark.
const SUBSCRIBERS: [usize; 2] = [1, 1000];

/// `cargo bench` passes `--bench`; `cargo test` runs the benchmarks once without it.
fn smoke_test() -> bool {
    !std::env::args().any(|arg| arg == "--bench")
}

/// What the `hold` turn is driven by.
struct Hold {
    /// One status update per pulse; the task completes when the sender is dropped.
    pulses: mpsc::UnboundedReceiver<()>,
    /// Told once the task is working (its first update committed and published).
    working: oneshot::Sender<()>,
}

/// Any text: working → an artifact → completed with a message (the integration tests'
/// default turn). `hold`: working, then one more `working` update (with a progress
/// message) per pulse.
#[derive(Default)]
struct BenchExecutor {
    hold: Mutex<Option<Hold>>,
}

#[async_trait]
impl AgentExecutor for BenchExecutor {
    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<(), Error> {
        if turn.message.text() == HOLD {
            let hold = self.hold.lock().ok().and_then(|mut slot| slot.take());
            let Some(Hold {
                mut pulses,
                working,
            }) = hold
            else {
                return Err(Error::internal("a hold turn without its pulses"));
            };
            sink.working().await?;
            // Ignored error: the bench stopped waiting.
            let _ = working.send(());
            while pulses.recv().await.is_some() {
                // A progress note: "working" alone, when already working, is no update.
                sink.status(TaskState::Working, Some(sink.text("still working")))
                    .await?;
            }
            return sink.complete(None).await;
        }
        sink.working().await?;
        sink.artifact(Artifact::new(vec![Part::text("done")]), false, true)
            .await?;
        sink.complete(Some(sink.text("ok"))).await
    }
}

fn send_message(
    text: &str,
    context_id: Option<ContextId>,
    return_immediately: bool,
) -> SendMessage {
    SendMessage {
        message: Message {
            message_id: MessageId::generate(),
            context_id,
            task_id: None,
            role: Role::User,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: vec![],
            reference_task_ids: vec![],
        },
        config: SendConfig {
            return_immediately,
            ..SendConfig::default()
        },
        metadata: None,
        create_missing_task: false,
        idempotency_key: None,
    }
}

/// A completed turn's context id; anything else is a broken benchmark.
fn completed(outcome: Result<SendOutcome, Error>) -> ContextId {
    match outcome {
        Ok(SendOutcome::Task(task)) if task.status.state == TaskState::Completed => task.context_id,
        Ok(SendOutcome::Task(task)) => panic!("turn ended {}", task.status.state.as_str()),
        Ok(SendOutcome::Message(_)) => panic!("turn answered with a message"),
        Err(e) => panic!("turn failed: {e}"),
    }
}

/// An SQLite file in a temporary directory and what the runtimes over it share.
struct Fixture {
    store: StoreConfig,
    executor: Arc<BenchExecutor>,
    settings: Settings,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("a2a-bench-runtime-")
            .tempdir()
            .expect("a temporary directory");
        Self {
            store: StoreConfig {
                database_url: None,
                data_dir: dir.path().to_path_buf(),
                ..StoreConfig::default()
            },
            executor: Arc::new(BenchExecutor::default()),
            settings: Settings::default(),
            _dir: dir,
        }
    }

    /// A runtime with no resident thread, over a store of its own; call inside the
    /// `System`. Runtimes do not share a store: a pooled SQLite connection runs its
    /// statements on the tokio runtime that opened it (diesel-async's
    /// `SyncConnectionWrapper`), so a connection opened on an arbiter of a runtime that
    /// was shut down fails every later query ("task … was cancelled").
    async fn runtime(&self) -> Runtime {
        let store = store::open(&self.store).await.expect("SQLite store opens");
        Runtime::start(
            &self.settings,
            store,
            ExecutorSource::Custom(self.executor.clone()),
            &SkillRegistry::default(),
            None,
        )
        .expect("runtime starts")
    }
}

fn thread_actor(c: &mut Criterion) {
    let smoke = smoke_test();
    let system = System::new();
    let fixture = Fixture::new();
    let tenant = TenantId::default_tenant();
    let mut group = c.benchmark_group("thread_actor");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    let runtime = system.block_on(fixture.runtime());
    group.bench_function("spawn", |b| {
        b.iter_custom(|iters| {
            system.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    completed(
                        runtime
                            .sends()
                            .send(&tenant, send_message("hello", None, false))
                            .await,
                    );
                }
                started.elapsed()
            })
        })
    });
    drop(runtime);

    // Threads with ten turns (twenty messages) each, created by a runtime that is then
    // shut down, so none is resident in the next one.
    let (threads, turns) = if smoke { (2, 2) } else { (200, 10) };
    let contexts = system.block_on(async {
        let runtime = fixture.runtime().await;
        let first = futures_util::future::join_all((0..threads).map(|_| {
            runtime
                .sends()
                .send(&tenant, send_message("hello", None, false))
        }))
        .await;
        let contexts: Vec<ContextId> = first.into_iter().map(completed).collect();
        for _ in 1..turns {
            futures_util::future::join_all(contexts.iter().map(|context| {
                runtime
                    .sends()
                    .send(&tenant, send_message("hello", Some(context.clone()), false))
            }))
            .await
            .into_iter()
            .for_each(|outcome| {
                completed(outcome);
            });
        }
        contexts
    });
    let mut runtime: Option<Runtime> = None;
    let mut next = contexts.len();
    group.bench_function("resume", |b| {
        b.iter_custom(|iters| {
            system.block_on(async {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    if next == contexts.len() {
                        // Every thread is resident now: start over in a fresh runtime.
                        // Its first turn (a new thread) opens the pool's first
                        // connections outside the timing.
                        drop(runtime.take());
                        let fresh = fixture.runtime().await;
                        completed(
                            fresh
                                .sends()
                                .send(&tenant, send_message("hello", None, false))
                                .await,
                        );
                        runtime = Some(fresh);
                        next = 0;
                    }
                    let Some(current) = &runtime else {
                        unreachable!("a runtime was just started")
                    };
                    let message = send_message("hello", Some(contexts[next].clone()), false);
                    next += 1;
                    let started = Instant::now();
                    let resumed = completed(current.sends().send(&tenant, message).await);
                    spent += started.elapsed();
                    // The warm-up thread, and one actor per thread resumed so far.
                    assert_eq!(
                        current.resident_threads(),
                        next + 1,
                        "{resumed} was resident"
                    );
                }
                spent
            })
        })
    });
    drop(runtime);
    group.finish();
}

/// A task with `subscribers` live subscriptions, driven by pulses.
struct Fanout {
    pulses: mpsc::UnboundedSender<()>,
    received: Arc<AtomicUsize>,
    all_received: Arc<Notify>,
}

impl Fanout {
    /// Starts the hold task and attaches the subscribers; call inside the `System`.
    async fn start(runtime: &Runtime, executor: &BenchExecutor, subscribers: usize) -> Self {
        let tenant = TenantId::default_tenant();
        let (pulses, pulse_rx) = mpsc::unbounded_channel();
        let (working_tx, working) = oneshot::channel();
        if let Ok(mut slot) = executor.hold.lock() {
            *slot = Some(Hold {
                pulses: pulse_rx,
                working: working_tx,
            });
        }
        let task_id: TaskId = match runtime
            .sends()
            .send(&tenant, send_message(HOLD, None, true))
            .await
        {
            Ok(SendOutcome::Task(task)) => task.id,
            Ok(SendOutcome::Message(_)) => panic!("the hold turn answered with a message"),
            Err(e) => panic!("the hold turn failed: {e}"),
        };
        working.await.expect("the hold task works");
        let received = Arc::new(AtomicUsize::new(0));
        let all_received = Arc::new(Notify::new());
        for n in 0..subscribers {
            let subscription = runtime
                .subscriptions()
                .subscribe(&tenant, &task_id, None)
                .await
                .expect("subscribe");
            let mut events = Box::pin(runtime.subscriptions().events(subscription));
            let (received, all_received) = (received.clone(), all_received.clone());
            let request_id = serde_json::json!(n);
            actix_web::rt::spawn(async move {
                // The snapshot: the task as it was when the subscription attached.
                let _ = events.next().await;
                while let Some(Ok((seq, event))) = events.next().await {
                    black_box(sse_frame(&request_id, seq, &event));
                    if received.fetch_add(1, Ordering::AcqRel) + 1 == subscribers {
                        all_received.notify_one();
                    }
                }
            });
        }
        Self {
            pulses,
            received,
            all_received,
        }
    }

    /// One status update, until every subscriber has framed it.
    async fn pulse(&self) -> Duration {
        self.received.store(0, Ordering::Release);
        let started = Instant::now();
        self.pulses.send(()).expect("the hold task takes pulses");
        self.all_received.notified().await;
        started.elapsed()
    }
}

/// The SSE frame of one event in the JSON-RPC binding (as `http::sse` writes it).
fn sse_frame(request_id: &serde_json::Value, seq: i64, event: &StreamEvent) -> String {
    let payload = EventWire(Dialect::V1, event);
    let data =
        serde_json::to_string(&jsonrpc::Success::of(request_id, &payload)).expect("serializable");
    format!("id: {seq}\ndata: {data}\n\n")
}

fn sse_fanout(c: &mut Criterion) {
    let system = System::new();
    let fixture = Fixture::new();
    let runtime = system.block_on(fixture.runtime());
    let mut group = c.benchmark_group("sse_fanout");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for subscribers in SUBSCRIBERS {
        let fanout = system.block_on(Fanout::start(&runtime, &fixture.executor, subscribers));
        group.throughput(Throughput::Elements(subscribers as u64));
        group.bench_function(BenchmarkId::from_parameter(subscribers), |b| {
            b.iter_custom(|iters| {
                system.block_on(async {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        spent += fanout.pulse().await;
                    }
                    spent
                })
            })
        });
        // Ends the hold task (it completes); its subscribers' streams end with it.
        drop(fanout);
    }
    group.finish();
    drop(runtime);
}

criterion_group!(benches, thread_actor, sse_fanout);
criterion_main!(benches);
