//! `subscribe`: many concurrent SSE subscribers (`SubscribeToTask`, 0.3
//! `tasks/resubscribe`) on a few open tasks, and a steady flow of events to them.
//!
//! 1. **Setup**: `--tasks` tasks that stay open are created with one message each. The
//!    default agent answers free text with input-required, an interrupted state, so the
//!    task lives on (with the conformance agent, `--message-id-prefix
//!    tck-input-required` does the same). A task that ends at once fails the setup.
//! 2. **Attach**: `--connections` subscribers, spread round-robin over the tasks, each
//!    wait for their first event (the task snapshot): the "attach" latency. The time
//!    until the last one has attached is counted, and when the memory of the server is
//!    measured, its resident set before the attach and once the subscribers have
//!    attached and [`SETTLE`] has passed: the growth divided by the subscribers is the
//!    memory an idle stream holds.
//! 3. **Hold**: for the warm-up and then `--duration`, follow-up messages are sent to the
//!    tasks at `--rate` in all (default: one per task per second), open loop, one at a
//!    time per task. Each turn moves its task to working and back to input-required,
//!    and every subscriber of the task receives both events. The k-th working event a
//!    subscriber sees belongs to the k-th follow-up of its task; the time from that
//!    follow-up's intended send to the event is the "delivery" latency.
//! 4. **Drain**: the last events are awaited for a moment, the subscriptions are closed
//!    and the tasks canceled, so no open task is left behind on the server.
//!
//! Throughput is events received per second; a subscription the server closes during
//! the hold counts as an error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::client::{Client, Events};
use crate::driver::{Measured, Plan};
use crate::progress::{Live, Phase};
use crate::protocol::{ErrorKind, LoadOutcome, Reply, StreamEvent, TaskState};
use crate::stats::Stats;

/// The main latency of the scenario.
pub const DELIVERY: &str = "delivery (follow-up sent → subscriber has it)";
const ATTACH: &str = "attach (subscribe → snapshot)";
const PUBLISH: &str = "follow-up message";
/// How long the subscribers keep reading after the last follow-up was answered.
const DRAIN: Duration = Duration::from_secs(1);
/// Tasks created at the same time during setup.
const SETUP_CONCURRENCY: usize = 8;
/// Subscriptions being opened at once: thousands of connects at the same moment would
/// overflow the server's listen backlog, and the SYN retransmissions (1 s, 3 s, 7 s, …)
/// would then be what the attach measures.
const ATTACH_CONCURRENCY: usize = 256;
/// How long the streams sit idle after the last attach before the server's memory is
/// read: frees the allocator defers (and the keep-alive timers' first ticks) happen.
const SETTLE: Duration = Duration::from_secs(2);

/// What the scenario needs besides the plan.
pub struct Subscribe {
    pub client: Arc<Client>,
    pub text: Arc<str>,
    pub tasks: usize,
    /// Whose resident set to read around the attach.
    pub memory_pid: Option<u32>,
}

/// An open task and the intended send times of the follow-ups published to it so far.
struct OpenTask {
    id: String,
    context_id: String,
    published: Mutex<Vec<Instant>>,
}

/// When the measurement starts; unknown until every subscriber is attached.
type MeasureFrom = Arc<OnceLock<Instant>>;

impl Subscribe {
    pub async fn run(
        &self,
        plan: &Plan,
        live: Arc<Live>,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<Measured> {
        let tasks = self.open_tasks().await?;
        let mut stats = Stats::new();
        let window = self.load(&tasks, plan, live, stop, &mut stats).await;
        // Also after a failure: no open task is left behind.
        self.cancel(&tasks, &mut stats).await;
        Ok(Measured {
            stats,
            window: window?,
        })
    }

    /// Attaches, publishes and drains; returns the measured window.
    async fn load(
        &self,
        tasks: &[Arc<OpenTask>],
        plan: &Plan,
        live: Arc<Live>,
        mut stop: watch::Receiver<bool>,
        stats: &mut Stats,
    ) -> anyhow::Result<Duration> {
        let measure_from: MeasureFrom = Arc::default();
        let (hold_tx, hold_rx) = watch::channel(false);
        let rss_before = self.rss_kib();
        let attach_start = Instant::now();
        let subscribers = self
            .attach(tasks, plan, &live, &measure_from, hold_rx, stats)
            .await?;
        let open_all = attach_start.elapsed();
        stats.count(
            "open all subscribers (ms)",
            u64::try_from(open_all.as_millis()).unwrap_or(u64::MAX),
        );
        if let Some(before) = rss_before {
            tokio::time::sleep(SETTLE).await;
            if let Some(after) = self.rss_kib() {
                let attached = stats
                    .counters()
                    .get("subscribers attached")
                    .copied()
                    .unwrap_or(0)
                    .max(1);
                stats.count("RSS before the attach (KiB)", before);
                stats.count("RSS with the subscribers idle (KiB)", after);
                stats.count(
                    "RSS per idle subscriber (bytes)",
                    after.saturating_sub(before) * 1024 / attached,
                );
            }
        }

        let hold_start = Instant::now();
        let measure_start = *measure_from.get_or_init(|| hold_start + plan.warmup);
        live.set_phase(if plan.warmup.is_zero() {
            Phase::Measuring
        } else {
            Phase::WarmUp
        });
        let phase_live = live.clone();
        let phase_watch = tokio::spawn(async move {
            tokio::time::sleep_until(measure_start.into()).await;
            phase_live.set_phase(Phase::Measuring);
        });
        let last_publish = self
            .publish(tasks, plan, &live, measure_start, &stop, stats)
            .await;
        phase_watch.abort();

        live.set_phase(Phase::Draining);
        tokio::select! {
            () = tokio::time::sleep(DRAIN) => {}
            _ = stop.changed() => {}
        }
        // Ignored error: every subscriber may have ended already.
        let _ = hold_tx.send(true);
        let mut still_attached = 0u64;
        for subscriber in subscribers {
            let (subscriber_stats, held) = subscriber.await.context("a subscriber panicked")?;
            stats.merge(subscriber_stats);
            still_attached += u64::from(held);
        }
        stats.count("subscribers still attached at the end", still_attached);
        Ok(last_publish?.saturating_duration_since(measure_start))
    }

    /// The resident set of the measured process, when there is one and it can be read.
    fn rss_kib(&self) -> Option<u64> {
        let pid = self.memory_pid?;
        crate::memory::rss_kib(pid).ok()
    }

    /// Starts one subscriber per connection and waits until each has attached or
    /// failed to. Fails when none could.
    async fn attach(
        &self,
        tasks: &[Arc<OpenTask>],
        plan: &Plan,
        live: &Arc<Live>,
        measure_from: &MeasureFrom,
        hold: watch::Receiver<bool>,
        stats: &mut Stats,
    ) -> anyhow::Result<Vec<JoinHandle<(Stats, bool)>>> {
        let (attached_tx, mut attached_rx) = mpsc::channel(plan.connections);
        let opening = Arc::new(tokio::sync::Semaphore::new(ATTACH_CONCURRENCY));
        let subscribers = (0..plan.connections)
            .map(|i| {
                let subscriber = Subscriber {
                    client: self.client.clone(),
                    task: tasks[i % tasks.len()].clone(),
                    measure_from: measure_from.clone(),
                    live: live.clone(),
                };
                tokio::spawn(subscriber.run(
                    attached_tx.clone(),
                    opening.clone(),
                    hold.clone(),
                    plan.timeout,
                ))
            })
            .collect();
        drop(attached_tx);
        let mut attached = 0u64;
        while let Some(result) = attached_rx.recv().await {
            match result {
                Ok(latency) => {
                    stats.latency(ATTACH, latency);
                    attached += 1;
                }
                Err(kind) => stats.error(&kind),
            }
        }
        stats.count("subscribers attached", attached);
        if attached == 0 {
            let errors: Vec<_> = stats
                .errors()
                .iter()
                .map(|(kind, n)| format!("{n} × {kind}"))
                .collect();
            bail!("no subscriber could attach ({})", errors.join(", "));
        }
        Ok(subscribers)
    }

    /// Sends the follow-ups, one publisher per task, until the end of the run; returns
    /// when the last measured one was answered.
    async fn publish(
        &self,
        tasks: &[Arc<OpenTask>],
        plan: &Plan,
        live: &Arc<Live>,
        measure_from: Instant,
        stop: &watch::Receiver<bool>,
        stats: &mut Stats,
    ) -> anyhow::Result<Instant> {
        let hold_start = measure_from - plan.warmup;
        let rate = plan.rate.unwrap_or(tasks.len() as f64);
        let tickets = Arc::new(plan.requests.map(AtomicU64::new));
        let publishers: Vec<_> = tasks
            .iter()
            .enumerate()
            .map(|(index, task)| {
                let publisher = Publisher {
                    client: self.client.clone(),
                    text: self.text.clone(),
                    task: task.clone(),
                    first: hold_start + Duration::from_secs_f64(index as f64 / rate),
                    period: Duration::from_secs_f64(tasks.len() as f64 / rate),
                    measure_from,
                    end: plan.duration.map(|d| measure_from + d),
                    timeout: plan.timeout,
                    tickets: tickets.clone(),
                    live: live.clone(),
                };
                tokio::spawn(publisher.run(stop.clone()))
            })
            .collect();
        let mut last = measure_from;
        for publisher in publishers {
            let (publisher_stats, publisher_end) =
                publisher.await.context("a publisher panicked")?;
            stats.merge(publisher_stats);
            last = last.max(publisher_end);
        }
        Ok(last)
    }

    /// Creates the tasks the subscribers follow; each must stay open.
    async fn open_tasks(&self) -> anyhow::Result<Vec<Arc<OpenTask>>> {
        let dialect = self.client.dialect();
        let created: Vec<_> = futures_util::stream::iter(0..self.tasks)
            .map(|_| {
                let message = dialect.user_message(
                    self.client.message_id(),
                    vec![dialect.text_part(&self.text)],
                    None,
                    None,
                );
                self.client.send_message(message)
            })
            .buffer_unordered(SETUP_CONCURRENCY)
            .collect()
            .await;
        created
            .into_iter()
            .map(|reply| match reply {
                Ok(Reply::Task {
                    id,
                    context_id,
                    state,
                }) if !state.is_terminal() => Ok(Arc::new(OpenTask {
                    id,
                    context_id,
                    published: Mutex::new(Vec::new()),
                })),
                Ok(Reply::Task { state, .. }) => bail!(
                    "the server ended the task it created for the subscribers at once \
                     (state {}); subscribe needs tasks that stay open, such as the \
                     default agent's input-required answer to free text (with the \
                     conformance agent, pass --message-id-prefix tck-input-required)",
                    state.label()
                ),
                Ok(Reply::Message { .. }) => bail!(
                    "the server answered the setup message with a message, not a task; \
                     subscribe needs a task that stays open"
                ),
                Err(kind) => bail!("cannot create a task to subscribe to: {kind}"),
            })
            .collect()
    }

    /// Cancels the tasks of the run (best effort: a failure is only counted).
    async fn cancel(&self, tasks: &[Arc<OpenTask>], stats: &mut Stats) {
        let method = self.client.dialect().cancel_method();
        let results: Vec<_> = futures_util::stream::iter(tasks)
            .map(|task| self.client.call(method, json!({ "id": task.id })))
            .buffer_unordered(SETUP_CONCURRENCY)
            .collect()
            .await;
        let canceled = results.iter().filter(|r| r.is_ok()).count();
        stats.count("tasks canceled after the run", canceled as u64);
        let refused = (results.len() - canceled) as u64;
        if refused > 0 {
            stats.count("tasks the server refused to cancel", refused);
        }
    }
}

struct Subscriber {
    client: Arc<Client>,
    task: Arc<OpenTask>,
    measure_from: MeasureFrom,
    live: Arc<Live>,
}

impl Subscriber {
    /// Attaches (reporting how long it took), then reads events until told to stop.
    /// Returns its stats and whether it was still attached at the end.
    async fn run(
        self,
        attached: mpsc::Sender<Result<Duration, ErrorKind>>,
        opening: Arc<tokio::sync::Semaphore>,
        mut hold: watch::Receiver<bool>,
        timeout: Duration,
    ) -> (Stats, bool) {
        let mut stats = Stats::new();
        // Never closed, so the permit always comes.
        let permit = opening.acquire_owned().await;
        let started = Instant::now();
        let params = json!({ "id": self.task.id });
        let opened = tokio::time::timeout(timeout, async {
            let mut events = self
                .client
                .open_stream(self.client.dialect().subscribe_method(), params)
                .await?;
            match events.next().await {
                Some(Ok(_snapshot)) => Ok(events),
                Some(Err(kind)) => Err(kind),
                None => Err(ErrorKind::SubscriptionClosed),
            }
        })
        .await
        .unwrap_or(Err(ErrorKind::Timeout));
        drop(permit);
        let events = match opened {
            Ok(events) => {
                // Ignored error: the scenario has stopped listening (it was interrupted).
                let _ = attached.send(Ok(started.elapsed())).await;
                events
            }
            Err(kind) => {
                self.live.failed(1);
                let _ = attached.send(Err(kind)).await;
                return (stats, false);
            }
        };
        drop(attached);
        let held = self.follow(events, &mut stats, &mut hold).await;
        (stats, held)
    }

    /// Reads events until `hold` turns true (true) or the stream fails or ends (false).
    async fn follow(
        &self,
        mut events: Events,
        stats: &mut Stats,
        hold: &mut watch::Receiver<bool>,
    ) -> bool {
        let mut turns_seen = 0usize;
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = hold.changed() => return true,
            };
            let received = Instant::now();
            let measured = self
                .measure_from
                .get()
                .is_some_and(|from| received >= *from);
            let event = match event {
                Some(Ok(event)) => event,
                Some(Err(kind)) => {
                    stats.error(&kind);
                    self.live.failed(1);
                    return false;
                }
                None => {
                    stats.error(&ErrorKind::SubscriptionClosed);
                    self.live.failed(1);
                    return false;
                }
            };
            if event.state() == Some(TaskState::Working) {
                turns_seen += 1;
                let sent = self
                    .task
                    .published
                    .lock()
                    .expect("the publish log is never poisoned")
                    .get(turns_seen - 1)
                    .copied();
                match sent {
                    Some(sent) if measured => stats.latency(DELIVERY, received - sent),
                    Some(_) => {}
                    None => stats.count("working events without a follow-up", 1),
                }
            }
            self.live.succeeded(1);
            if measured {
                stats.success(&event_label(event));
            }
        }
    }
}

fn event_label(event: StreamEvent) -> String {
    match event {
        StreamEvent::Task(state) => format!("event task ({})", state.label()),
        StreamEvent::Status { state, .. } => format!("event status {}", state.label()),
        StreamEvent::Artifact => "event artifact".to_owned(),
        StreamEvent::Message => "event message".to_owned(),
    }
}

/// Sends the follow-up messages of one task on its schedule.
struct Publisher {
    client: Arc<Client>,
    text: Arc<str>,
    task: Arc<OpenTask>,
    /// The intended time of the first follow-up, and the period of the others.
    first: Instant,
    period: Duration,
    measure_from: Instant,
    end: Option<Instant>,
    timeout: Duration,
    /// Measured follow-ups left, with `--requests`.
    tickets: Arc<Option<AtomicU64>>,
    live: Arc<Live>,
}

impl Publisher {
    /// Returns its stats (follow-up latencies and errors) and when its last measured
    /// follow-up was answered.
    async fn run(self, mut stop: watch::Receiver<bool>) -> (Stats, Instant) {
        let mut stats = Stats::new();
        let mut last = self.measure_from;
        let dialect = self.client.dialect();
        for k in 0u32.. {
            let intended = self.first + self.period * k;
            if self.end.is_some_and(|end| intended >= end) || *stop.borrow() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(intended.into()) => {}
                _ = stop.changed() => break,
            }
            let measured = intended >= self.measure_from;
            if measured && !self.claim() {
                break;
            }
            self.task
                .published
                .lock()
                .expect("the publish log is never poisoned")
                .push(intended);
            let message = dialect.user_message(
                self.client.message_id(),
                vec![dialect.text_part(&self.text)],
                Some(&self.task.context_id),
                Some(&self.task.id),
            );
            let sent = tokio::time::timeout(self.timeout, self.client.send_message(message))
                .await
                .unwrap_or(Err(ErrorKind::Timeout))
                .and_then(|reply| reply.outcome());
            let answered = Instant::now();
            if !measured {
                continue;
            }
            last = answered;
            match sent {
                Ok(outcome) => {
                    stats.latency(PUBLISH, answered - intended);
                    stats.count(&format!("follow-ups answered: {outcome}"), 1);
                }
                Err(kind) => {
                    stats.error(&kind);
                    self.live.failed(1);
                }
            }
        }
        (stats, last)
    }

    fn claim(&self) -> bool {
        self.tickets.as_ref().as_ref().is_none_or(|left| {
            left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
        })
    }
}
