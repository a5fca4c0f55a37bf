//! The delivery loop: reads due outbox rows, POSTs them, and commits the outcome.
//!
//! Each attempt is one POST (`attempt.rs`); what the attempts that answered together
//! decided — the row goes, or is tried again after a backoff — is committed in one batch
//! (`outcome.rs`).
//!
//! The loop takes what is due from one of two sources. From the store: it polls the
//! outbox (`Store::due_deliveries`) for the earliest owed row of each config. From
//! memory: while every owed row fits in `push.memory_rows` (outside cluster mode), it
//! holds them all ([`Mirror`]) — read once while commits are paused, then handed over by
//! each commit (`runtime::push::PushHub`) — and the outbox is written, never read. It
//! goes back to the store when more is owed than fits, when threads past their
//! retention took rows with them, or when a write of its own fails; it tries memory
//! again once a poll finds everything due and the depth fits.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::mirror::{Lane, Mirror, lane_of};
use super::receivers::{Admit, Change, Receivers};
use crate::config::PushSettings;
use crate::domain::Timestamp;
use crate::outbound::{CheckedResolver, UrlPolicy};
use crate::runtime::Runtime;
use crate::runtime::outbox::{NotHeld, Outbox};
use crate::runtime::push::{Handed, LeftMemory};
use crate::store::Delivery;
use crate::telemetry;

mod attempt;
mod outcome;

use attempt::Attempt;
pub use attempt::DELIVERY_ID_HEADER;

/// How often the outbox's depth is recounted in the store (the running count drifts
/// when a deleted config takes its owed rows with it).
const RECOUNT_EVERY: Duration = Duration::from_secs(30);

/// Lanes in flight per attempt slot, counting those whose outcome is being committed.
const SETTLING_PER_SLOT: usize = 4;

/// How soon the loop looks again for a retry that is due but was not read yet.
const RETRY_AGAIN: Duration = Duration::from_millis(10);

/// How long past its time a retry is still waited for.
const STALE_RETRY: Duration = Duration::from_secs(1);

/// How soon after a try the loop tries again to hold every owed delivery in memory.
const HOLD_AGAIN: Duration = Duration::from_secs(1);

/// Settled lanes, each with its delivery and when it is next due if it stays owed
/// (`Ok(None)`: done with the row), or `Err` if the store refused the commit of its
/// outcome.
type Settled = Vec<(Lane, Result<Option<(Instant, Delivery)>, ()>)>;

/// Starts the delivery on the current arbiter; it runs while the runtime lives and
/// `stop` stays false. `policy` is the one the service checks registrations with.
pub fn start(
    runtime: &Arc<Runtime>,
    settings: &PushSettings,
    policy: Arc<UrlPolicy>,
    stop: watch::Receiver<bool>,
) -> Result<(), String> {
    // The client's TLS needs the process's crypto provider (installed once; a second
    // install is refused, harmlessly).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_millis(settings.timeout_ms))
        .connect_timeout(Duration::from_millis(settings.timeout_ms))
        .dns_resolver(Arc::new(CheckedResolver {
            policy: policy.clone(),
        }))
        .user_agent(concat!("agent-a2a/", env!("CARGO_PKG_VERSION"), " push"))
        .build()
        .map_err(|e| format!("push client: {e}"))?;
    let delivery = Deliverer {
        runtime: Arc::downgrade(runtime),
        settings: settings.clone(),
        policy,
        client,
    };
    actix::spawn(delivery.run(stop));
    Ok(())
}

struct Deliverer {
    runtime: Weak<Runtime>,
    settings: PushSettings,
    policy: Arc<UrlPolicy>,
    client: reqwest::Client,
}

impl Deliverer {
    async fn run(self, mut stop: watch::Receiver<bool>) {
        let this = Arc::new(self);
        // Answered attempts, each with its receiver (`Receivers::of` its URL).
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(Delivery, String, Attempt)>();
        let (settled_tx, mut settled_rx) = mpsc::unbounded_channel::<Settled>();
        // Lanes with an attempt, or an outcome not yet committed, and that row's `seq`:
        // their next row waits.
        let mut in_flight: HashMap<Lane, i64> = HashMap::new();
        // Attempts under way (`push.max_concurrent` at most). An attempt's slot is free
        // once its answer is in, while its outcome is still being committed.
        let mut attempting = 0usize;
        // Reading the outbox: retries scheduled by this process, so the loop wakes when
        // the first is due.
        let mut retries: HashMap<Lane, Instant> = HashMap::new();
        // Every owed delivery, while they fit in memory (outside cluster mode); what
        // commits handed over since the last look; when the loop last tried to hold them.
        let mut mirror: Option<Mirror> = None;
        let mut handed: Vec<Handed> = Vec::new();
        let mut tried_memory: Option<Instant> = None;
        // The last poll found every row that was due (it returned less than it asked for).
        let mut polled_all = true;
        // Per receiver: attempts under way, failures in a row, its breaker.
        let mut receivers = Receivers::new(&this.settings);
        let mut recounted: Option<Instant> = None;
        // Cluster mode: when this node last looked for dead nodes' owed deliveries, and
        // whether that look took a full batch (then it looks again at once); when it
        // last looked for rows of no node (the leader's, once a lease: a read of the
        // whole outbox).
        let mut adopted: Option<Instant> = None;
        let mut adopt_more = false;
        let mut adopted_free: Option<Instant> = None;
        let mut stalled = false;
        loop {
            // A stopped runtime starts no attempt more, whatever else woke the loop (a
            // finished attempt, the hub): the next process delivers what is still owed.
            if *stop.borrow() {
                return;
            }
            let Some(runtime) = this.runtime.upgrade() else {
                return;
            };
            let outbox = runtime.outbox();
            let hub = outbox.hub().clone();
            // What commits handed over; or, if the hand-over stopped, back to the store.
            if let Some(held) = mirror.as_mut() {
                match hub.take(&mut handed) {
                    Ok(()) => {
                        let now = Instant::now();
                        let mut gone = 0;
                        for item in handed.drain(..) {
                            match item {
                                Handed::Owed(delivery) => held.add(delivery, now),
                                Handed::Config(config) => held.reconfigure(&config),
                                Handed::Forget {
                                    tenant,
                                    task_id,
                                    config_id,
                                } => gone += held.forget(&(tenant, task_id, config_id)),
                            }
                        }
                        if gone > 0 {
                            hub.finished(gone as u64);
                        }
                    }
                    Err(_) => {
                        mirror = None;
                        recounted = None;
                        polled_all = false;
                    }
                }
            }
            if mirror.is_none() && recounted.is_none_or(|at| at.elapsed() >= RECOUNT_EVERY) {
                let Some(counted) = unless_stopped(&mut stop, outbox.depth()).await else {
                    return;
                };
                match counted {
                    Ok(depth) => hub.set_depth(depth),
                    Err(e) => {
                        tracing::warn!(error = %e, "push outbox: cannot count the owed deliveries")
                    }
                }
                recounted = Some(Instant::now());
            }
            // Attempts to a receiver that has answered none of them for a while keep
            // going (to their timeout) without holding slots from the others.
            let freed = receivers.sweep(Instant::now());
            debug_assert!(freed <= attempting, "slots given back that were not held");
            attempting = attempting.saturating_sub(freed);
            let max = this.settings.max_concurrent;
            // In a cluster each node delivers the rows it owns (the store's poll reads
            // only those: the events it committed, and those it took over), and only
            // while it holds its lease: once the lease lapses, another node may take
            // its rows over. A config's rows split between two nodes are read in order.
            let holds = outbox.cluster().is_none_or(|c| c.holds_lease());
            if let Some(cluster) = outbox.cluster()
                && holds
                && !outbox.is_draining()
                && (adopt_more || adopted.is_none_or(|at| at.elapsed() >= cluster.heartbeat()))
            {
                adopted = Some(Instant::now());
                let free = cluster.is_leader()
                    && (adopt_more
                        || adopted_free.is_none_or(|at| at.elapsed() >= cluster.sweep_interval()));
                if free {
                    adopted_free = adopted;
                }
                let Some(adopted_now) =
                    unless_stopped(&mut stop, cluster.dead().adopt_owed(free)).await
                else {
                    return;
                };
                adopt_more = match adopted_now {
                    Ok(n) => n >= crate::store::cluster::ADOPT_BATCH as u64,
                    Err(e) => {
                        tracing::warn!(error = %e, "push outbox: cannot take over the deliveries of dead nodes");
                        false
                    }
                };
            }
            // Hold every owed delivery in memory once they fit: not in a cluster, where
            // a config's earlier rows may be another node's.
            let memory_rows = hub.memory_rows();
            if mirror.is_none()
                && memory_rows > 0
                && outbox.cluster().is_none()
                && polled_all
                && !stalled
                && hub.depth() <= memory_rows as u64
                && tried_memory.is_none_or(|at| at.elapsed() >= HOLD_AGAIN)
            {
                tried_memory = Some(Instant::now());
                let Some(held) =
                    unless_stopped(&mut stop, hold_all(outbox, &in_flight, memory_rows)).await
                else {
                    return;
                };
                mirror = held;
                if mirror.is_some() {
                    retries.clear();
                }
            }
            let now = Instant::now();
            if let Some(held) = mirror.as_mut() {
                // Rows whose receiver is at its limit now (tried again once an attempt
                // ends), and rows whose receiver cannot take them until a time.
                let mut busy: Vec<Delivery> = Vec::new();
                let mut waiting: Vec<(Delivery, Instant)> = Vec::new();
                while attempting < max && busy.len() < max {
                    let Some(delivery) = held.next(now) else {
                        break;
                    };
                    let receiver = Receivers::of(&delivery.config.url);
                    match receivers.admit(&receiver, now) {
                        Admit::Go => {}
                        Admit::Pass => {
                            busy.push(delivery);
                            continue;
                        }
                        Admit::Wait(until) => {
                            waiting.push((delivery, until));
                            continue;
                        }
                    }
                    in_flight.insert(lane_of(&delivery), delivery.key.seq);
                    attempting += 1;
                    this.spawn_attempt(delivery, receiver, &done_tx, &stop);
                }
                if !waiting.is_empty() {
                    metrics::counter!(telemetry::PUSH_DEFERRED).increment(waiting.len() as u64);
                }
                // (Taken and put back in this round: no config change came between.)
                for delivery in busy {
                    held.put_back(delivery, now, now);
                }
                for (delivery, until) in waiting {
                    held.put_back(delivery, until, now);
                }
            } else {
                // Free slots, while the outcomes awaiting their commit stay few: each of
                // their rows is still in the outbox, and read (and passed over) by every
                // poll.
                let room = max
                    .saturating_sub(attempting)
                    .min((max * SETTLING_PER_SLOT).saturating_sub(in_flight.len()));
                // A poll per finished attempt would read the outbox once per delivery: it
                // waits until half the slots are free (or none is busy, or a retry is due).
                let retry_due = retries.values().any(|at| *at <= now);
                let worth = room > 0 && (room * 2 >= max || attempting == 0 || retry_due);
                if worth && !stalled && holds {
                    // Rows of lanes in flight come back too (and are passed over): ask for
                    // enough to fill the room besides them.
                    let asked = room + in_flight.len();
                    let read = outbox.due(Timestamp::now(), asked);
                    let Some(read) = unless_stopped(&mut stop, read).await else {
                        return;
                    };
                    match read {
                        Ok(due) => {
                            polled_all = due.len() < asked;
                            // A retry this overdue is not coming back from the store (its
                            // config was deleted, or a poll already left it out): a later
                            // poll finds it if it is still owed.
                            retries.retain(|_, at| *at + STALE_RETRY > now);
                            // Rows whose receiver cannot take them now, with when it may.
                            let mut waiting: Vec<(Delivery, Instant)> = Vec::new();
                            for delivery in due {
                                let lane = lane_of(&delivery);
                                if attempting >= max || in_flight.contains_key(&lane) {
                                    continue;
                                }
                                let receiver = Receivers::of(&delivery.config.url);
                                match receivers.admit(&receiver, now) {
                                    Admit::Go => {}
                                    Admit::Pass => continue,
                                    Admit::Wait(until) => {
                                        in_flight.insert(lane, delivery.key.seq);
                                        waiting.push((delivery, until));
                                        continue;
                                    }
                                }
                                in_flight.insert(lane.clone(), delivery.key.seq);
                                retries.remove(&lane);
                                attempting += 1;
                                this.spawn_attempt(delivery, receiver, &done_tx, &stop);
                            }
                            if !waiting.is_empty() {
                                let (this, settled) = (this.clone(), settled_tx.clone());
                                actix::spawn(async move {
                                    let _ = settled.send(this.defer(waiting, now).await);
                                });
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "push outbox: cannot read the due deliveries");
                            stalled = true;
                        }
                    }
                }
            }
            drop(runtime);
            // The next retry; one already due (its row's time, in the store's
            // milliseconds, may be a moment behind) is polled for again shortly, never
            // at once: a zero-length sleep would spin without yielding to the attempts
            // on this thread while the polls wait for free slots.
            let poll = Duration::from_millis(this.settings.poll_interval_ms);
            let next = match &mirror {
                Some(held) => held.next_due(),
                None => retries.values().min().copied(),
            };
            let wake = next.map_or(poll, |at| {
                at.saturating_duration_since(now).max(RETRY_AGAIN).min(poll)
            });
            tokio::select! {
                // The stop first: a ready stop is never passed over for other work.
                biased;
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
                Some(first) = done_rx.recv() => {
                    // Every attempt answered by now is settled together, beside the next
                    // attempts: their commits share a group, and their slots are free
                    // for the rows read next.
                    let mut done = vec![first];
                    while let Ok(more) = done_rx.try_recv() {
                        done.push(more);
                    }
                    let finished = Instant::now();
                    let done: Vec<(Delivery, Attempt)> = (done.into_iter())
                        .map(|(delivery, receiver, attempt)| {
                            let (held, change) =
                                receivers.finished(&receiver, attempt.outcome(), finished);
                            // (A stalled receiver's attempts gave their slots back already.)
                            if held {
                                debug_assert!(attempting > 0, "an attempt ended that held no slot");
                                attempting = attempting.saturating_sub(1);
                            }
                            if let Some(change) = change {
                                report(&change, receivers.open());
                            }
                            (delivery, attempt)
                        })
                        .collect();
                    let (this, settled) = (this.clone(), settled_tx.clone());
                    actix::spawn(async move {
                        let _ = settled.send(this.settle(done).await);
                    });
                    continue;
                }
                Some(first) = settled_rx.recv() => {
                    let mut batches = vec![first];
                    while let Ok(more) = settled_rx.try_recv() {
                        batches.push(more);
                    }
                    let now = Instant::now();
                    for (lane, result) in batches.into_iter().flatten() {
                        in_flight.remove(&lane);
                        match (result, mirror.as_mut()) {
                            (Ok(Some((next, delivery))), Some(held)) => {
                                // Dropped if its config went meanwhile (the row with it).
                                if !held.put_back(delivery, next, now) {
                                    hub.finished(1);
                                }
                            }
                            (Ok(Some((next, _))), None) => {
                                retries.insert(lane, next);
                            }
                            (Ok(None), Some(held)) => held.done(&lane, now),
                            (Ok(None), None) => {}
                            // The row stays owed and is read from the store again: what
                            // memory holds may differ from it now.
                            (Err(()), _) => {
                                stalled = true;
                                if mirror.take().is_some() {
                                    hub.stop_hand_over(LeftMemory::StoreError);
                                    recounted = None;
                                    polled_all = false;
                                }
                            }
                        }
                    }
                    continue;
                }
                _ = hub.woken() => {}
                _ = tokio::time::sleep(wake) => {}
            }
            stalled = false;
        }
    }

    /// Starts one attempt of `delivery`; its answer comes back on `done`.
    fn spawn_attempt(
        self: &Arc<Self>,
        delivery: Delivery,
        receiver: String,
        done: &mpsc::UnboundedSender<(Delivery, String, Attempt)>,
        stop: &watch::Receiver<bool>,
    ) {
        let (this, done, stop) = (self.clone(), done.clone(), stop.clone());
        actix::spawn(async move {
            // Spawned before a stop, it may first run after it (and after the next
            // process started delivering the same rows): then it attempts nothing.
            if *stop.borrow() {
                return;
            }
            let attempt = this.attempt(&delivery).await;
            let _ = done.send((delivery, receiver, attempt));
        });
    }
}

/// `work`, unless the runtime stops first (`None`): the loop then returns at once and lets
/// go of the runtime, whose store (and the database's lock) a stopped server releases.
async fn unless_stopped<T>(
    stop: &mut watch::Receiver<bool>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        _ = stop.wait_for(|stopped| *stopped) => None,
        done = work => Some(done),
    }
}

/// Reads every owed delivery while no commit runs, and has each commit hand its rows
/// over from then on — if they fit in `max_rows`. Rows of `out` lanes up to their `seq`
/// are being attempted or settled: passed over.
async fn hold_all(outbox: Outbox<'_>, out: &HashMap<Lane, i64>, max_rows: usize) -> Option<Mirror> {
    let owed = match outbox.hold_owed(max_rows).await {
        Ok(owed) => owed,
        Err(NotHeld::TooMany) => return None,
        Err(NotHeld::Store(e)) => {
            tracing::warn!(error = %e, "push outbox: cannot read the owed deliveries");
            return None;
        }
        Err(NotHeld::TooSlow) => {
            tracing::warn!(
                "push outbox: reading every owed delivery took longer than commits may be held back (persistence.enqueue_timeout_ms); the outbox is polled instead"
            );
            return None;
        }
    };
    let (now, stamp) = (Instant::now(), Timestamp::now().millis());
    let owed = (owed.into_iter())
        .map(|(delivery, due)| {
            let wait = u64::try_from(due.millis().saturating_sub(stamp)).unwrap_or(0);
            (delivery, now + Duration::from_millis(wait))
        })
        .collect();
    let mirror = Mirror::load(owed, out, now);
    metrics::gauge!(telemetry::PUSH_FROM_MEMORY).set(1.0);
    tracing::debug!(
        owed = mirror.len(),
        "push delivery holds every owed delivery: the outbox is not read"
    );
    Some(mirror)
}

/// Logs a breaker that opened or closed, and counts the open ones.
fn report(change: &Change, open: usize) {
    match change {
        Change::Opened { receiver, open_for } => {
            metrics::counter!(telemetry::PUSH_BREAKER_OPENED).increment(1);
            tracing::warn!(
                receiver,
                open_for_ms = open_for.as_millis() as u64,
                "push receiver failing: nothing is sent to it for a while (push.breaker_failures, push.breaker_open_ms)"
            );
        }
        Change::Closed { receiver } => {
            tracing::info!(receiver, "push receiver answers again");
        }
    }
    metrics::gauge!(telemetry::PUSH_BREAKERS_OPEN).set(open as f64);
}
