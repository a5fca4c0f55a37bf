//! Task events across nodes: the commits of every node notify
//! [`EVENTS_CHANNEL`](crate::store::cluster::EVENTS_CHANNEL) with the task and sequence
//! number of each event they logged (never the event itself); a node whose client follows
//! a task of another node listens, and on each notification reads the task's log from
//! where the client is. The log is the truth: a notification only says "look now".
//!
//! A node listens only while one of its subscribers follows a task of another node: a
//! node nobody watches from is not woken by every commit of the cluster (its own
//! included).
//!
//! A notification can be missed (the listening connection dropped and reconnected, or
//! was not listening yet): every watcher is woken to read the log each time the node
//! starts listening, and a watcher also reads it every `cluster.stream_poll_ms` on its
//! own.

use std::sync::{Arc, Weak};

use dashmap::DashMap;
use tokio::sync::watch;

use crate::domain::{TaskId, TenantId};
use crate::store::cluster::parse_payload;

type Key = (String, String);

/// The tasks this node's subscribers follow on other nodes, each with a counter of the
/// notifications for it.
#[derive(Default)]
pub struct Hub {
    watched: DashMap<Key, watch::Sender<u64>>,
    /// Signalled when the first task is watched or the last one is not any more.
    changed: tokio::sync::Notify,
}

impl Hub {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Starts watching a task: the returned [`Watch`] wakes on each notification of the
    /// task's events, and on every reconnection of the listener.
    pub fn watch(self: &Arc<Self>, tenant: &TenantId, task: &TaskId) -> Watch {
        let key = (tenant.as_str().to_owned(), task.as_str().to_owned());
        let rx = self
            .watched
            .entry(key.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        // The listener looks whether it listens already (cheap when it does).
        self.changed.notify_one();
        Watch {
            rx,
            key,
            hub: Arc::downgrade(self),
        }
    }

    /// Wakes the watchers of the tasks a notification names.
    pub fn dispatch(&self, payload: &str) {
        for (tenant, task, _seq) in parse_payload(payload) {
            if let Some(tx) = self.watched.get(&(tenant.to_owned(), task.to_owned())) {
                tx.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    /// Wakes every watcher: notifications may have been missed.
    pub fn wake_all(&self) {
        for entry in self.watched.iter() {
            entry.value().send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Tasks watched now.
    pub fn watched(&self) -> usize {
        self.watched.len()
    }

    /// Asks the listener to look again whether it should listen (its connection is new).
    pub fn nudge(&self) {
        self.changed.notify_one();
    }

    /// Resolves when the first task may have become watched, or the last one unwatched.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// One subscriber's view of a watched task.
pub struct Watch {
    rx: watch::Receiver<u64>,
    key: Key,
    hub: Weak<Hub>,
}

impl Watch {
    /// Resolves at the next notification (or wake-up) after the last one seen; never
    /// if the hub is gone.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The last watcher of a task removes its entry (its own receiver still counts).
        if let Some(hub) = self.hub.upgrade()
            && hub
                .watched
                .remove_if(&self.key, |_, tx| tx.receiver_count() <= 1)
                .is_some()
            && hub.watched.is_empty()
        {
            hub.changed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ids(tenant: &str, task: &str) -> (TenantId, TaskId) {
        (
            TenantId::parse(tenant).unwrap(),
            TaskId::parse(task).unwrap(),
        )
    }

    async fn woke(watch: &mut Watch) -> bool {
        tokio::time::timeout(Duration::from_millis(50), watch.changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_notification_wakes_the_watchers_of_its_task_only() {
        let hub = Hub::new();
        let (tenant, task) = ids("acme", "t-1");
        let (_, other) = ids("acme", "t-2");
        let mut a = hub.watch(&tenant, &task);
        let mut b = hub.watch(&tenant, &task);
        let mut c = hub.watch(&tenant, &other);
        hub.dispatch("acme\tt-1\t3\nbeta\tt-2\t1");
        assert!(woke(&mut a).await);
        assert!(woke(&mut b).await);
        assert!(
            !woke(&mut c).await,
            "t-2 of another tenant is not acme's t-2"
        );
        hub.wake_all();
        assert!(woke(&mut c).await);
    }

    #[tokio::test]
    async fn the_last_watcher_of_a_task_removes_its_entry() {
        let hub = Hub::new();
        let (tenant, task) = ids("acme", "t-1");
        let a = hub.watch(&tenant, &task);
        let b = hub.watch(&tenant, &task);
        assert_eq!(hub.watched(), 1);
        drop(a);
        assert_eq!(hub.watched(), 1);
        drop(b);
        assert_eq!(hub.watched(), 0);
    }
}
