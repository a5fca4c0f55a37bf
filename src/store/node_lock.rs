//! Who may serve a Postgres database: one process without cluster mode, or any number of
//! cluster nodes — never both, never two of the first kind.
//!
//! Two servers with `cluster.enabled = false` on one database (a Deployment scaled to two
//! without reading the cluster section) would each believe they own every thread: their
//! actors write one thread side by side, a follow-up lands on one and a subscriber on the
//! other never hears of it. So a server holds a session advisory lock on the database for
//! as long as it runs: exclusive without cluster mode, shared in a cluster. A second
//! server of either kind is refused at start-up with a message that names
//! `cluster.enabled`, the way SQLite refuses a second process (`sqlite/lock.rs`).
//!
//! The lock lives on a connection of its own; Postgres drops it when that session ends,
//! so a crashed or killed process never leaves it behind (a restart waits up to
//! `store.lock_wait_ms` for the old session to end). Within one process every opening
//! of a database shares one hold (a registry counts them), so a server restarted in the
//! same process (tests, embedders) finds its own. If the lock's connection is lost while
//! the server runs (a database restart), the hold is taken again as soon as the database
//! is back; if another server took the database meanwhile, the log says so.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use super::StoreError;

/// Key of the advisory lock (the bytes of "a2a_node").
const NODE_LOCK: i64 = 0x6132_615f_6e6f_6465;

/// How a server holds its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// `cluster.enabled = false`: this process alone.
    Alone,
    /// A cluster node: shared with the other nodes, refused to a server without cluster
    /// mode.
    Shared,
}

impl Hold {
    fn try_lock(self) -> &'static str {
        match self {
            Hold::Alone => "SELECT pg_try_advisory_lock($1)",
            Hold::Shared => "SELECT pg_try_advisory_lock_shared($1)",
        }
    }
}

/// The database is held by servers this one cannot run beside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// How this server wanted to hold it.
    pub wanted: Hold,
    /// Whether the holders are cluster nodes (shared holds).
    pub by_cluster: bool,
    /// The holders' sessions, for the operator: client address, application, pid.
    pub holders: String,
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.wanted, self.by_cluster) {
            (Hold::Alone, false) => write!(
                f,
                "the Postgres database is held by another agent-a2a server without cluster \
                 mode ({}); a server with cluster.enabled = false serves its database \
                 alone — stop the other one, or set cluster.enabled = true on every node \
                 to run several",
                self.holders
            ),
            (Hold::Alone, true) => write!(
                f,
                "the Postgres database is served by a cluster ({}); set \
                 cluster.enabled = true (with the cluster's secret) to join it",
                self.holders
            ),
            (Hold::Shared, _) => write!(
                f,
                "the Postgres database is held by an agent-a2a server without cluster \
                 mode ({}); stop it, or run it with cluster.enabled = true too",
                self.holders
            ),
        }
    }
}

/// A hold on a database; the lock is released when the last clone in the process is
/// dropped (or with the process).
#[derive(Clone)]
pub struct DatabaseLock {
    _hold: Arc<Holding>,
}

struct Holding {
    url: String,
    hold: Hold,
    keeper: tokio::task::JoinHandle<()>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        // Dropping the client ends the session, and with it the lock.
        self.keeper.abort();
        let mut held = registry();
        if held.get(&self.url).is_some_and(|w| w.strong_count() == 0) {
            held.remove(&self.url);
        }
    }
}

fn registry() -> std::sync::MutexGuard<'static, HashMap<String, Weak<Holding>>> {
    static HELD: LazyLock<Mutex<HashMap<String, Weak<Holding>>>> = LazyLock::new(Mutex::default);
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Takes `hold` on the database at `url`, waiting up to `wait` for holders that refuse it
/// to go away (a process killed a moment ago whose session has not ended yet). Must run
/// inside a tokio runtime that outlives the hold (the lock's connection runs on it).
pub async fn take(url: &str, hold: Hold, wait: Duration) -> Result<DatabaseLock, StoreError> {
    // The registry's guard ends with this statement: dropping a hold takes it too.
    let existing = registry().get(url).and_then(Weak::upgrade);
    if let Some(existing) = existing {
        return match existing.hold == hold {
            true => Ok(DatabaseLock { _hold: existing }),
            false => Err(StoreError::Config(format!(
                "this process already serves the database {} cluster mode",
                if existing.hold == Hold::Shared {
                    "in"
                } else {
                    "without"
                }
            ))),
        };
    }
    let deadline = tokio::time::Instant::now() + wait;
    let (client, ended) = connect(url).await?;
    loop {
        if locked(&client, hold).await? {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::Held(holders(&client, hold).await?));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let keeper = tokio::spawn(keep(url.to_owned(), hold, client, ended));
    let holding = Arc::new(Holding {
        url: url.to_owned(),
        hold,
        keeper,
    });
    registry().insert(url.to_owned(), Arc::downgrade(&holding));
    Ok(DatabaseLock { _hold: holding })
}

/// A session of its own, and a signal for when it ends.
async fn connect(url: &str) -> Result<(Client, tokio::sync::oneshot::Receiver<()>), StoreError> {
    let config = format!(
        "{url}{}application_name=agent-a2a",
        if url.contains('?') { '&' } else { '?' }
    );
    let (client, connection) = tokio_postgres::connect(&config, NoTls)
        .await
        .map_err(|e| StoreError::Unavailable(format!("postgres (database lock): {e}")))?;
    let (ended, on_end) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _ = connection.await;
        let _ = ended.send(());
    });
    Ok((client, on_end))
}

async fn locked(client: &Client, hold: Hold) -> Result<bool, StoreError> {
    client
        .query_one(hold.try_lock(), &[&NODE_LOCK])
        .await
        .map(|row| row.get::<_, bool>(0))
        .map_err(|e| StoreError::Unavailable(format!("postgres (database lock): {e}")))
}

/// Who holds the lock in a way `wanted` cannot share.
async fn holders(client: &Client, wanted: Hold) -> Result<Held, StoreError> {
    let rows = client
        .query(
            "SELECT l.mode, coalesce(host(a.client_addr), 'local'), a.application_name, a.pid \
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
               AND l.classid = ($1::bigint >> 32)::oid AND l.objid = ($1::bigint & 4294967295)::oid \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             ORDER BY a.pid",
            &[&NODE_LOCK],
        )
        .await
        .map_err(|e| StoreError::Unavailable(format!("postgres (database lock): {e}")))?;
    let by_cluster = rows.iter().all(|r| r.get::<_, &str>(0) == "ShareLock");
    let holders = rows
        .iter()
        .map(|r| {
            format!(
                "{} {} pid {}",
                r.get::<_, String>(1),
                r.get::<_, String>(2),
                r.get::<_, i32>(3)
            )
        })
        .collect::<Vec<_>>();
    Ok(Held {
        wanted,
        by_cluster,
        holders: match holders.is_empty() {
            true => "a session that has just ended".into(),
            false => holders.join(", "),
        },
    })
}

/// Keeps the lock's session; when it ends (a database restart), takes the lock again as
/// soon as the database is back.
async fn keep(
    url: String,
    hold: Hold,
    client: Client,
    mut ended: tokio::sync::oneshot::Receiver<()>,
) {
    // The session that holds the lock: kept until this task is aborted.
    let mut _session = client;
    loop {
        let _ = (&mut ended).await;
        tracing::warn!("the database lock's session ended (database restart?); taking it again");
        let mut complained = false;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let Ok((again, on_end)) = connect(&url).await else {
                continue;
            };
            match locked(&again, hold).await {
                Ok(true) => {
                    tracing::info!("database lock held again");
                    _session = again;
                    ended = on_end;
                    break;
                }
                Ok(false) if !complained => {
                    complained = true;
                    let who = holders(&again, hold).await;
                    tracing::error!(
                        holders = %who.map(|h| h.holders).unwrap_or_default(),
                        "while this server's database lock was lost another server took the \
                         database; stop one of them (see cluster.enabled)"
                    );
                }
                _ => {}
            }
        }
    }
}
