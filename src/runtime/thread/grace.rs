//! The start grace's deadlines: one sweep per worker instead of a timer per turn.
//!
//! A turn that opens a task defers its first writes ([`ThreadActor::defer`]) and must see
//! them committed within `persistence.start_grace_ms` even when its output is slow. A
//! tokio timer per turn is the obvious way, but a timer due sooner than every other timer
//! of its worker makes tokio wake the worker's own event loop when it is registered — a
//! `write` to the loop's eventfd, then an `epoll_wait` that returns at once — and the
//! grace is the shortest timer a worker has, so that was once per send. Here a worker
//! keeps its deadlines in a queue (in order: with one grace per runtime they arrive in
//! order) and one task sleeps until the first; each actor whose deadline has passed and
//! whose writes did not ride with a commit meanwhile gets [`FlushUnsynced`]. The sweep
//! registers one timer per grace period, not one per send, and ends when the queue is
//! empty.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use actix::WeakAddr;
use actix::prelude::*;
use tokio::sync::Notify;

use super::ThreadActor;

/// Tells an actor that its deferred writes' grace is over: it commits them unless they
/// already rode with a commit.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct FlushUnsynced;

/// One actor's pending deadline; [`Deadline::cancel`] once its writes were committed.
pub(crate) struct Deadline(Arc<AtomicBool>);

impl Deadline {
    pub(super) fn cancel(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

struct Due {
    at: Instant,
    live: Arc<AtomicBool>,
    actor: WeakAddr<ThreadActor>,
}

/// A worker's deadlines, earliest first, and whether its sweep is running.
#[derive(Default)]
struct Queue {
    due: VecDeque<Due>,
    sweeping: bool,
    /// Wakes the sweep when a deadline earlier than the one it sleeps for arrives.
    sooner: Rc<Notify>,
}

thread_local! {
    static QUEUE: RefCell<Queue> = RefCell::default();
}

/// `actor` gets [`FlushUnsynced`] `grace` from now unless the returned deadline is
/// cancelled first. Called on the actor's worker.
pub(super) fn after(grace: Duration, actor: WeakAddr<ThreadActor>) -> Deadline {
    let live = Arc::new(AtomicBool::new(true));
    let at = Instant::now() + grace;
    QUEUE.with(|queue| {
        let mut queue = queue.borrow_mut();
        let position = queue
            .due
            .iter()
            .rposition(|d| d.at <= at)
            .map_or(0, |i| i + 1);
        queue.due.insert(
            position,
            Due {
                at,
                live: live.clone(),
                actor,
            },
        );
        if !queue.sweeping {
            queue.sweeping = true;
            actix::spawn(sweep(queue.sooner.clone()));
        } else if position == 0 {
            queue.sooner.notify_one();
        }
    });
    Deadline(live)
}

/// Marks the worker's sweep stopped when it ends, also when its runtime drops it.
struct Sweeping;

impl Drop for Sweeping {
    fn drop(&mut self) {
        let _ = QUEUE.try_with(|queue| queue.borrow_mut().sweeping = false);
    }
}

/// Tells every actor whose deadline has passed, sleeps until the next, and ends when
/// none is left.
async fn sweep(sooner: Rc<Notify>) {
    let _sweeping = Sweeping;
    while let Some(next) = QUEUE.with(|queue| tell_due(&mut queue.borrow_mut(), Instant::now())) {
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {}
            () = sooner.notified() => {}
        }
    }
}

/// Sends [`FlushUnsynced`] for the deadlines up to `now` still wanted, and returns the
/// next one.
fn tell_due(queue: &mut Queue, now: Instant) -> Option<Instant> {
    while queue.due.front().is_some_and(|d| d.at <= now) {
        let Some(due) = queue.due.pop_front() else {
            break;
        };
        if due.live.load(Ordering::Relaxed)
            && let Some(actor) = due.actor.upgrade()
        {
            actor.do_send(FlushUnsynced);
        }
    }
    queue.due.front().map(|d| d.at)
}
