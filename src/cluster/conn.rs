//! The cluster's own Postgres connections (the session's and the placement's), each
//! reconnected when it dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::Arbiter;
use futures_util::StreamExt;
use tokio::sync::oneshot;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use super::notify;
use crate::store::StoreError;

/// One Postgres connection of the cluster's, reconnected when it dropped. Its I/O runs on
/// the cluster's arbiter. The listening one hands the notifications it gets to the hub
/// (`Cluster::listen_loop` decides when it LISTENs), and wakes every watcher when it
/// reconnects.
pub(super) struct Conn {
    url: String,
    /// Its `application_name` (unless the URL names one), to tell it in `pg_stat_activity`.
    name: String,
    arbiter: actix::ArbiterHandle,
    listen: Option<Arc<notify::Hub>>,
    /// `store.answer_timeout_ms`: see [`Conn::connect`].
    dead_after: Duration,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// The current connection LISTENs for events (a new connection does not).
    pub(super) listening: AtomicBool,
    /// The current connection LISTENs for claims.
    pub(super) hearing_claims: AtomicBool,
}

impl Conn {
    pub(super) fn new(
        url: &str,
        name: &str,
        (arbiter, dead_after): (&Arbiter, Duration),
        listen: Option<Arc<notify::Hub>>,
    ) -> Self {
        Self {
            url: url.to_owned(),
            name: name.to_owned(),
            arbiter: arbiter.handle(),
            listen,
            dead_after,
            client: tokio::sync::Mutex::new(None),
            listening: AtomicBool::new(false),
            hearing_claims: AtomicBool::new(false),
        }
    }

    /// The current connection is not handed out again (a statement on it went
    /// unanswered): the next call connects anew.
    pub(super) async fn forget(&self) {
        // Held: a call is connecting anew already.
        if let Ok(mut slot) = self.client.try_lock() {
            *slot = None;
        }
    }

    pub(super) async fn get(&self) -> Result<Arc<Client>, StoreError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref()
            && !client.is_closed()
        {
            return Ok(client.clone());
        }
        let client = Arc::new(self.connect().await?);
        // A new connection listens to nothing yet: the listen loop LISTENs again if a
        // subscriber (or the claim filter) needs it, and they then read what they missed.
        self.listening.store(false, Ordering::SeqCst);
        self.hearing_claims.store(false, Ordering::SeqCst);
        if let Some(hub) = &self.listen {
            hub.deaf();
            hub.wake_all();
            hub.nudge();
        }
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Connects on the cluster's arbiter, where the connection's I/O then runs. A
    /// connection whose sent data or keepalive probes go unacknowledged for
    /// `store.answer_timeout_ms` is closed by the kernel (`TCP_USER_TIMEOUT`), and one
    /// not made within it is given up: a database cut off by the network neither answers
    /// nor resets.
    async fn connect(&self) -> Result<Client, StoreError> {
        let dead_after = self.dead_after;
        let (tx, rx) = oneshot::channel();
        let mut config: tokio_postgres::Config = self
            .url
            .parse()
            .map_err(|e| StoreError::Config(format!("cluster: database URL: {e}")))?;
        if config.get_application_name().is_none() {
            config.application_name(&self.name);
        }
        config
            .connect_timeout(dead_after)
            .keepalives(true)
            .keepalives_idle((dead_after / 2).max(Duration::from_secs(1)))
            .keepalives_interval((dead_after / 4).max(Duration::from_secs(1)))
            .keepalives_retries(2)
            .tcp_user_timeout(dead_after);
        let listen = self.listen.clone();
        let spawned = self.arbiter.spawn(async move {
            let (client, mut connection) = match config.connect(NoTls).await {
                Ok(pair) => pair,
                Err(e) => {
                    let _ = tx.send(Err(StoreError::Unavailable(format!("cluster: {e}"))));
                    return;
                }
            };
            let _ = tx.send(Ok(client));
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        if let Some(hub) = &listen {
                            hub.notified(n.channel(), n.payload());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "cluster connection lost");
                        break;
                    }
                }
            }
            // Whatever is notified from now on goes unheard until a new connection listens.
            if let Some(hub) = &listen {
                hub.deaf();
            }
        });
        if !spawned {
            return Err(StoreError::Unavailable("cluster: stopped".into()));
        }
        rx.await
            .map_err(|_| StoreError::Unavailable("cluster: stopped".into()))?
    }
}
