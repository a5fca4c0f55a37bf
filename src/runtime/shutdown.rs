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
//! The sequence itself (stop accepting, drain, stop actors, flush) is
//! [`Runtime::drain`](super::Runtime::drain) and `http::shutdown`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;

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
