//! What a graceful shutdown needs from the runtime: knowing when no turn is left to
//! finish, and a way for background work to hear that the runtime is stopping.
//!
//! Every `SendMessage` holds a [`Busy`] guard from the moment the runtime takes it until
//! its turn ends — through the thread actor's queue and the running turn, also after the
//! caller got its answer (`returnImmediately`). [`Activity::wait_idle`] waits until no
//! guard is left. Counting guards rather than asking actors means a turn can never be
//! missed by a shutdown that looks at the wrong moment: a turn that is queued, starting,
//! or between two actors after an eviction holds its guard all along.
//!
//! The runtime's part of the sequence is here too — [`Lifecycle::begin_drain`](crate::runtime::Lifecycle::begin_drain),
//! [`Lifecycle::wait_for_turns`](crate::runtime::Lifecycle::wait_for_turns), [`Lifecycle::close`](crate::runtime::Lifecycle::close) — and `startup::shutdown` runs it beside
//! the HTTP server's own graceful stop.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix::Arbiter;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::runtime::lock;
use crate::runtime::thread::maintenance;

/// The number of turns (and sends on their way to one) not yet finished.
#[derive(Debug, Default)]
pub struct Activity {
    busy: AtomicUsize,
    idle: Notify,
}

impl Activity {
    /// A guard counting one unit of work until it is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// Work in progress now.
    pub fn count(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Waits until no work is in progress (`true`) or `deadline` passes (`false`).
    pub async fn wait_idle(&self, deadline: Instant) -> bool {
        loop {
            // Registered before the check, so a release between the two is not missed.
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.count() == 0 {
                return true;
            }
            tokio::select! {
                () = idle => {}
                () = tokio::time::sleep_until(deadline) => return self.count() == 0,
            }
        }
    }
}

/// One unit of work in progress (see [`Activity`]). Cloning counts another unit.
#[derive(Debug)]
pub struct Busy(Arc<Activity>);

impl Clone for Busy {
    fn clone(&self) -> Self {
        self.0.busy()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl super::Lifecycle<'_> {
    /// Begins to leave, ahead of a drain (a cluster node's notice to its balancer):
    /// `/health/ready` fails, new subscriptions are refused (503, retryable), and every
    /// task stream ends as soon as no turn running here will publish to it — at once for
    /// most, including every stream that follows another node's task, at the end of its
    /// turn for the others — so that its client resumes on another node. Messages are
    /// still taken.
    pub fn begin_leaving(self) {
        if self.0.shared.leaving.send_replace(true) {
            return;
        }
        for entry in self.0.shared.actors.iter() {
            entry.value().1.do_send(maintenance::Drain);
        }
    }

    /// Begins a graceful shutdown: what [`Lifecycle::begin_leaving`](crate::runtime::Lifecycle::begin_leaving) does, and new messages
    /// are refused too (503, retryable) and background work stops. Turns already
    /// accepted run on.
    pub fn begin_drain(self) {
        // Leaving first: a draining node is always a leaving one.
        self.begin_leaving();
        self.0.shared.draining.store(true, Ordering::SeqCst);
        self.0.stop.send_replace(true);
    }

    /// Waits until every accepted turn has ended, or `deadline`; returns how many are
    /// still running.
    pub async fn wait_for_turns(self, deadline: Instant) -> usize {
        let activity = &self.0.shared.activity;
        if activity.wait_idle(deadline).await {
            0
        } else {
            activity.count()
        }
    }

    /// Ends the runtime after a drain: stops the actors (turns still running are cut),
    /// then commits every write they queued — waiting at most until `deadline` — and
    /// stops the persistence actor. Whatever was acknowledged was durable already; this
    /// makes the writes of turns that finished while no one waited durable too.
    pub async fn close(self, deadline: Instant) -> Result<()> {
        self.0.shared.closing.store(true, Ordering::SeqCst);
        self.0.stop.send_replace(true);
        let actors = std::mem::take(&mut *lock(&self.0.arbiters));
        for arbiter in &actors {
            arbiter.stop();
        }
        // Once their threads have ended, no actor can queue a write behind the flush.
        join_arbiters(actors).await;
        // The queue is first in, first out: when this empty batch is acknowledged, every
        // batch queued before it has been committed.
        let flushed = match tokio::time::timeout_at(deadline, self.0.persistence.commit(Vec::new()))
            .await
        {
            Ok(result) => result,
            Err(_) => Err(Error::Unavailable {
                detail: "the persistence queue was not flushed before the shutdown deadline".into(),
                retry_after_secs: 1,
            }),
        };
        let persistence = lock(&self.0.persistence_arbiter).take();
        if let Some(arbiter) = persistence {
            arbiter.stop();
            join_arbiters(vec![arbiter]).await;
        }
        flushed
    }
}

/// Waits for stopped arbiters' threads to end, off the async runtime (joining blocks).
async fn join_arbiters(arbiters: Vec<Arbiter>) {
    let joined = tokio::task::spawn_blocking(move || {
        for arbiter in arbiters {
            if arbiter.join().is_err() {
                tracing::warn!("an actor arbiter thread panicked while stopping");
            }
        }
    })
    .await;
    if let Err(e) = joined {
        tracing::warn!(error = %e, "waiting for the actor arbiters failed");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn idle_once_every_guard_and_clone_is_dropped() {
        let activity = Arc::new(Activity::default());
        let far = Instant::now() + Duration::from_secs(3600);
        assert!(activity.wait_idle(far).await, "idle from the start");
        let first = activity.busy();
        let second = first.clone();
        assert_eq!(activity.count(), 2);
        let waiter = tokio::spawn({
            let activity = activity.clone();
            async move { activity.wait_idle(far).await }
        });
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one guard is still held");
        drop(second);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn a_deadline_ends_the_wait_with_work_left() {
        let activity = Arc::new(Activity::default());
        let _held = activity.busy();
        assert!(!activity.wait_idle(Instant::now()).await);
    }
}
