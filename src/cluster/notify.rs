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
//!
//! The same connection hears the idempotency keys the other nodes claim
//! ([`CLAIMS_CHANNEL`](crate::store::cluster::CLAIMS_CHANNEL)) for the runtime's claim
//! filter ([`ClaimListener`]), always: a key it has not heard of is then one no node
//! claimed, and a send under it reads nothing. When the connection drops the filter is
//! told ([`ClaimListener::deaf`]), and each time the node listens again
//! [`Hub::hearing`] counts up, so the runtime reads what it may have missed.

use std::sync::{Arc, OnceLock, Weak};

use dashmap::DashMap;
use tokio::sync::watch;

use crate::domain::{TaskId, TenantId};
use crate::store::cluster::{CLAIMS_CHANNEL, claims_prefix, parse_claims, parse_payload};

type Key = (String, String);

/// Hears the idempotency keys the other nodes claim
/// ([`CLAIMS_CHANNEL`](crate::store::cluster::CLAIMS_CHANNEL)): the runtime's claim
/// filter, which must know every key claimed anywhere in the cluster to rule a new key
/// out without a read.
pub trait ClaimListener: Send + Sync {
    /// Another node claimed `key` for `tenant` (its commit is done).
    fn claimed(&self, tenant: &str, key: &str);
    /// Claims may go unheard from now on: the listening connection is gone.
    fn deaf(&self);
}

/// The tasks this node's subscribers follow on other nodes, each with a counter of the
/// notifications for it; and the listener of the other nodes' claims.
pub struct Hub {
    /// How this node's own claims payloads begin: they are not heard again (every
    /// listening session gets every notification, its own node's included).
    own_claims: String,
    watched: DashMap<Key, watch::Sender<u64>>,
    /// Signalled when the first task is watched or the last one is not any more, or the
    /// claims found a listener.
    changed: tokio::sync::Notify,
    claims: OnceLock<Arc<dyn ClaimListener>>,
    /// Bumped each time the node begins to hear claims (on each new connection): what
    /// was claimed before may have gone unheard, and is read from the store.
    hearing: watch::Sender<u64>,
}

impl Hub {
    pub fn new(node_id: &str) -> Arc<Self> {
        Arc::new(Self {
            own_claims: claims_prefix(node_id),
            watched: DashMap::new(),
            changed: tokio::sync::Notify::new(),
            claims: OnceLock::new(),
            hearing: watch::Sender::new(0),
        })
    }

    /// Makes `listener` hear the claims of the other nodes from now on (once).
    pub fn hear_claims(&self, listener: Arc<dyn ClaimListener>) {
        if self.claims.set(listener).is_ok() {
            self.changed.notify_one();
        }
    }

    /// Whether claims have a listener, so the node should LISTEN for them.
    pub fn wants_claims(&self) -> bool {
        self.claims.get().is_some()
    }

    /// Counts the times the node began to hear claims (see [`Hub::hearing`]).
    pub fn hearing(&self) -> watch::Receiver<u64> {
        self.hearing.subscribe()
    }

    /// The node now LISTENs for claims on a new connection.
    pub fn began_hearing_claims(&self) {
        self.hearing.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The listening connection is gone: claims may go unheard until it is back.
    pub fn deaf(&self) {
        if let Some(listener) = self.claims.get() {
            listener.deaf();
        }
    }

    /// Hands a notification of `channel` to whoever hears it.
    pub fn notified(&self, channel: &str, payload: &str) {
        if channel != CLAIMS_CHANNEL {
            self.dispatch(payload);
            return;
        }
        let Some(listener) = self.claims.get() else {
            return;
        };
        if payload.starts_with(&self.own_claims) {
            return;
        }
        match parse_claims(payload) {
            Some(claims) => {
                for (tenant, key) in &claims.claims {
                    listener.claimed(tenant, key);
                }
            }
            None => tracing::warn!(
                payload,
                "cluster: a claims notification that does not parse"
            ),
        }
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
        let hub = Hub::new("node-a");
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

    #[derive(Default)]
    struct Heard {
        claims: std::sync::Mutex<Vec<(String, String)>>,
        deaf: std::sync::atomic::AtomicUsize,
    }

    impl ClaimListener for Heard {
        fn claimed(&self, tenant: &str, key: &str) {
            self.claims
                .lock()
                .unwrap()
                .push((tenant.to_owned(), key.to_owned()));
        }

        fn deaf(&self) {
            self.deaf.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn the_claims_of_other_nodes_reach_the_listener_and_its_own_do_not() {
        use crate::store::cluster::{EVENTS_CHANNEL, claim_payloads};
        let hub = Hub::new("node-a");
        assert!(!hub.wants_claims());
        let own = claim_payloads("node-a", [("acme", "k-1")].into_iter());
        // Without a listener, claims go nowhere.
        hub.notified(CLAIMS_CHANNEL, &own[0]);
        let heard = Arc::new(Heard::default());
        hub.hear_claims(heard.clone());
        assert!(hub.wants_claims());
        let hearing = hub.hearing();
        hub.notified(CLAIMS_CHANNEL, &own[0]);
        let other = claim_payloads("node-ab", [("acme", "k-2"), ("beta", "k-3")].into_iter());
        hub.notified(CLAIMS_CHANNEL, &other[0]);
        hub.notified(CLAIMS_CHANNEL, "not json");
        // An event payload on the events channel is not a claim.
        hub.notified(EVENTS_CHANNEL, "acme\tt-1\t3");
        assert_eq!(
            *heard.claims.lock().unwrap(),
            vec![
                ("acme".to_owned(), "k-2".to_owned()),
                ("beta".to_owned(), "k-3".to_owned())
            ]
        );
        hub.deaf();
        assert_eq!(heard.deaf.load(std::sync::atomic::Ordering::SeqCst), 1);
        hub.began_hearing_claims();
        assert!(hearing.has_changed().unwrap());
    }

    #[tokio::test]
    async fn the_last_watcher_of_a_task_removes_its_entry() {
        let hub = Hub::new("node-a");
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
