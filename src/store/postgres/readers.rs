//! Read connections on Postgres: each thread that reads keeps its own.
//!
//! A connection's I/O — tokio-postgres' connection task, spawned by diesel-async when the
//! connection is opened — runs on the runtime of the thread that opened it. A read on a
//! connection another thread opened therefore crosses to that thread and back: two
//! hand-offs per round trip, and a wait whenever that thread is busy serving requests.
//! So every thread that reads (the HTTP workers, the actor arbiters, the background
//! tasks' threads) gets a pool of its own, and its reads never leave it.
//!
//! `store.pool_size` still bounds the read connections open in all: each connection
//! holds one permit of [`Readers::open`] for as long as it lives, and each thread's pool
//! holds at most an even share of them over the machine's cores and one more (at least
//! one): the HTTP workers, one per core, do most of the reading, and however busy they
//! are they leave a share to the other threads (the push outbox, the census, the
//! janitor, the actor arbiters), which would otherwise wait for an idle connection that
//! a loaded server never has. A thread that needs a
//! connection when every permit is held closes a connection another thread's pool has
//! left idle for [`RECLAIM_IDLE`] (a thread that has stopped keeps only idle ones), and
//! otherwise waits for a permit like any pool's caller, within the store's acquire
//! timeout. Each pool hands out its most recently used connection first, so a thread
//! that needs fewer than it has lets the rest go idle for others to take; a connection
//! just used is never taken, which would have two busy threads close and reopen each
//! other's connections (a new session costs Postgres a process start).
//!
//! Point reads — a thread's reload, a task, a claim, a task's events — share one
//! connection of their thread's pool ([`Readers::shared`]): tokio-postgres pipelines the
//! statements of one connection, so the reloads of many conversations leave in one write
//! to one busy server process instead of each waking an idle one of its own (the
//! scheduler's hand-offs, on both sides, cost more than the statements). The shared
//! connection is checked out of the pool for as long as any read uses it and goes back
//! when the last one ends; one that failed under a read is not handed out again. Reads
//! that may scan (a page of `ListTasks`, the background tasks' polls) take a connection
//! of their own, so as not to hold up the point reads queued behind them — unless the
//! thread's pool holds a single connection, which they then share too.

use std::sync::{Arc, RwLock, Weak};
use std::thread::ThreadId;
use std::time::Duration;

use deadpool::managed::{self, Metrics, QueueMode, RecycleResult};
use diesel_async::AsyncPgConnection;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, PoolError, RecyclingMethod,
};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

use crate::store::StoreError;
use crate::store::queries::checkout;

/// One thread's read connections.
pub(in crate::store) type ReadPool = managed::Pool<ReadManager>;

/// A checked-out read connection (derefs to the diesel connection).
pub(in crate::store) type ReadObject = managed::Object<ReadManager>;

/// How often a caller waiting for a permit looks again for an idle connection to close.
const RECLAIM_EVERY: Duration = Duration::from_millis(5);

/// How long another thread's connection must have been idle to be closed for this one.
const RECLAIM_IDLE: Duration = Duration::from_millis(100);

/// The read connections of a store, per thread.
pub(in crate::store) struct Readers {
    url: String,
    /// The most connections one thread's pool holds.
    per_thread: usize,
    /// One permit per open read connection, `store.pool_size` in all.
    open: Arc<Semaphore>,
    pools: RwLock<Vec<(ThreadId, ThreadReads)>>,
}

/// One thread's read connections: its pool, and the connection of it its point reads
/// share while any is running.
#[derive(Clone)]
pub(in crate::store) struct ThreadReads {
    pub(in crate::store) pool: ReadPool,
    shared: Arc<Mutex<Weak<ReadObject>>>,
}

impl ThreadReads {
    /// The connection the thread's point reads share: the one they already use, or one
    /// checked out of the pool (within `timeout`) if none is in use.
    /// The wait for the slot counts against `timeout` too: reads queued behind a checkout
    /// that cannot succeed fail with it, not one `timeout` after another.
    pub(in crate::store) async fn shared(&self, timeout: Duration) -> Result<PgRead, StoreError> {
        let unavailable =
            || StoreError::Unavailable(format!("postgres pool: no connection within {timeout:?}"));
        let deadline = tokio::time::Instant::now() + timeout;
        // Held while a connection is checked out: the thread's other point reads wait for
        // it and share it, rather than each taking one of its own.
        let mut slot = tokio::time::timeout_at(deadline, self.shared.lock())
            .await
            .map_err(|_| unavailable())?;
        if let Some(conn) = slot.upgrade() {
            return Ok(PgRead::Shared(conn, self.shared.clone()));
        }
        let conn = match tokio::time::timeout_at(deadline, self.pool.get()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(StoreError::Unavailable(format!("postgres pool: {e}"))),
            Err(_) => return Err(unavailable()),
        };
        let conn = Arc::new(conn);
        *slot = Arc::downgrade(&conn);
        Ok(PgRead::Shared(conn, self.shared.clone()))
    }

    /// A connection of the pool for a read of its own (within `timeout`); the shared one
    /// if the pool holds only one.
    pub(in crate::store) async fn own(&self, timeout: Duration) -> Result<PgRead, StoreError> {
        if self.pool.status().max_size == 1 {
            return self.shared(timeout).await;
        }
        let conn = checkout(&self.pool, timeout, "postgres").await?;
        Ok(PgRead::Own(Box::new(conn)))
    }
}

/// The connection a read runs on: one of its own, or the one its thread's point reads
/// share (and the slot that hands it out).
pub(in crate::store) enum PgRead {
    /// (Boxed: a checked-out connection is large, and the shared one is one pointer.)
    Own(Box<ReadObject>),
    Shared(Arc<ReadObject>, Arc<Mutex<Weak<ReadObject>>>),
}

impl PgRead {
    /// After a read found the connection gone: it is not handed out to the next reads
    /// (those still running on it end with it), and goes back to its pool, which drops
    /// it, with the last of them.
    pub(in crate::store) async fn forget(&self) {
        if let PgRead::Shared(conn, slot) = self {
            let mut slot = slot.lock().await;
            if std::ptr::eq(slot.as_ptr(), Arc::as_ptr(conn)) {
                *slot = Weak::new();
            }
        }
    }
}

impl std::ops::Deref for PgRead {
    type Target = AsyncPgConnection;

    fn deref(&self) -> &AsyncPgConnection {
        match self {
            PgRead::Own(conn) => conn,
            PgRead::Shared(conn, _) => conn,
        }
    }
}

impl Readers {
    /// At most `size` connections to `url` in all (connects nothing yet).
    pub(in crate::store) fn new(url: &str, size: usize) -> Arc<Self> {
        let size = size.max(1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per_thread = (size / (cores + 1)).max(1);
        Arc::new(Self {
            url: url.to_owned(),
            per_thread,
            open: Arc::new(Semaphore::new(size)),
            pools: RwLock::new(Vec::new()),
        })
    }

    /// The calling thread's pool, made on its first read.
    #[cfg(test)]
    pub(in crate::store) fn pool(self: &Arc<Self>) -> Result<ReadPool, StoreError> {
        Ok(self.thread()?.pool)
    }

    /// The calling thread's connections, its pool made on its first read.
    pub(in crate::store) fn thread(self: &Arc<Self>) -> Result<ThreadReads, StoreError> {
        let thread = std::thread::current().id();
        let pools = self.pools.read().unwrap_or_else(|e| e.into_inner());
        if let Some((_, reads)) = pools.iter().find(|(t, _)| *t == thread) {
            return Ok(reads.clone());
        }
        drop(pools);
        // Only this thread adds its own pool, and `pool` does not yield in between: no
        // other caller can have added it since the look above.
        let mut pools = self.pools.write().unwrap_or_else(|e| e.into_inner());
        let mut config = ManagerConfig::default();
        config.recycling_method = RecyclingMethod::Fast;
        let manager = ReadManager {
            inner: AsyncDieselConnectionManager::new_with_config(&self.url, config),
            open: self.open.clone(),
            readers: Arc::downgrade(self),
            thread,
        };
        let pool = ReadPool::builder(manager)
            .max_size(self.per_thread)
            .queue_mode(QueueMode::Lifo)
            .build()
            .map_err(|e| StoreError::Config(format!("postgres pool: {e}")))?;
        let reads = ThreadReads {
            pool,
            shared: Arc::new(Mutex::new(Weak::new())),
        };
        pools.push((thread, reads.clone()));
        Ok(reads)
    }

    /// Closes one connection another thread's pool has left idle for [`RECLAIM_IDLE`],
    /// if there is one; its permit comes back as it is dropped.
    fn close_idle_elsewhere(&self, thread: ThreadId) -> bool {
        let pools = self.pools.read().unwrap_or_else(|e| e.into_inner());
        for (_, ThreadReads { pool, .. }) in pools.iter().filter(|(t, _)| *t != thread) {
            let mut closed = false;
            // `retain` sees the idle connections only, and drops those it is told not to
            // keep as it returns.
            pool.retain(|_, metrics| {
                if closed || metrics.last_used() < RECLAIM_IDLE {
                    return true;
                }
                closed = true;
                false
            });
            if closed {
                return true;
            }
        }
        false
    }

    /// Read connections open now, over every thread's pool.
    #[cfg(test)]
    pub(in crate::store) fn open_connections(&self) -> usize {
        let pools = self.pools.read().unwrap_or_else(|e| e.into_inner());
        pools
            .iter()
            .map(|(_, reads)| reads.pool.status().size)
            .sum()
    }

    /// The most connections one thread's pool holds.
    #[cfg(test)]
    pub(in crate::store) fn per_thread(&self) -> usize {
        self.per_thread
    }

    /// Threads that have a pool.
    #[cfg(test)]
    pub(in crate::store) fn threads(&self) -> usize {
        self.pools.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A read connection and its share of the store's bound.
pub(in crate::store) struct ReadConn {
    conn: AsyncPgConnection,
    _open: OwnedSemaphorePermit,
}

impl std::ops::Deref for ReadConn {
    type Target = AsyncPgConnection;

    fn deref(&self) -> &AsyncPgConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for ReadConn {
    fn deref_mut(&mut self) -> &mut AsyncPgConnection {
        &mut self.conn
    }
}

/// Opens one thread's read connections: takes a permit of the store's bound first.
pub(in crate::store) struct ReadManager {
    inner: AsyncDieselConnectionManager<AsyncPgConnection>,
    open: Arc<Semaphore>,
    readers: Weak<Readers>,
    thread: ThreadId,
}

impl ReadManager {
    async fn permit(&self) -> Result<OwnedSemaphorePermit, PoolError> {
        // The semaphore is never closed; should it be, the connection is refused.
        let closed = |_| {
            PoolError::ConnectionError(diesel::ConnectionError::BadConnection(
                "the read connections are closed".into(),
            ))
        };
        loop {
            if let Ok(permit) = self.open.clone().try_acquire_owned() {
                return Ok(permit);
            }
            if let Some(readers) = self.readers.upgrade() {
                readers.close_idle_elsewhere(self.thread);
            }
            // Waits for a permit, and looks for idle connections again now and then: a
            // connection going idle in another thread's pool releases nothing by itself.
            tokio::select! {
                permit = self.open.clone().acquire_owned() => return permit.map_err(closed),
                () = tokio::time::sleep(RECLAIM_EVERY) => {}
            }
        }
    }
}

impl managed::Manager for ReadManager {
    type Type = ReadConn;
    type Error = PoolError;

    async fn create(&self) -> Result<ReadConn, PoolError> {
        let permit = self.permit().await?;
        let conn = self.inner.create().await?;
        Ok(ReadConn {
            conn,
            _open: permit,
        })
    }

    async fn recycle(&self, conn: &mut ReadConn, metrics: &Metrics) -> RecycleResult<PoolError> {
        self.inner.recycle(&mut conn.conn, metrics).await
    }
}
