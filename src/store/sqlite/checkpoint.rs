//! The WAL's checkpoints beside the writer: a thread of its own copies the WAL into the
//! database file so that no commit stops for SQLite's own checkpoint, and the writer keeps
//! the WAL within `store.sqlite_max_wal_pages` ([`Checkpointer`]).

use std::path::Path;
use std::sync::{Arc, Mutex};
#[cfg(test)]
use std::time::Duration;

use super::error::store_error;
use super::pragmas;
use crate::store::{SqliteSynchronous, StoreError};

thread_local! {
    /// The WAL's size in pages after the last commit on this thread (from the writer's
    /// WAL hook, which SQLite calls on the committing thread).
    static WAL_PAGES: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// The writer's WAL hook: notes the WAL's size for [`Checkpointer::after_commit`].
pub(super) fn note_wal_pages(
    _: &rusqlite::hooks::Wal,
    pages: std::ffi::c_int,
) -> rusqlite::Result<()> {
    WAL_PAGES.set(pages);
    Ok(())
}

/// Checkpoints the WAL on a thread and connection of its own, so that the writer never
/// stops for one: SQLite's own checkpoint runs inside the commit that grew the WAL past
/// its threshold — copying up to a thousand pages and syncing the database file — and
/// every request of that group commit waited for it (measured: ~9 ms per checkpoint,
/// every few hundred sends). The writer wakes the thread each time the WAL has grown by
/// `store.sqlite_checkpoint_pages`; the thread runs a PASSIVE checkpoint (it never waits
/// for the writer or the readers): it copies the pages and syncs the database file.
/// A checkpoint beside a writer never catches up with it — the commits made meanwhile
/// are still to copy — and a WAL not copied to its end never starts over, so it would
/// grow without end: after each of the thread's checkpoints the writer's next commit
/// copies that remainder itself (a few pages, one short sync), and the commit after it
/// starts the WAL over. Wake-ups during a checkpoint fold into one.
///
/// A WAL past `store.sqlite_max_wal_pages` — the thread has not caught up, or readers
/// held on to older pages — is checkpointed by the writer itself after its commit, in
/// RESTART mode: it waits for the readers (within the busy timeout) and copies it all,
/// so the next commit starts the WAL over. The writer stops for it; the WAL stays
/// bounded.
pub(super) struct Checkpointer {
    wake: std::sync::mpsc::SyncSender<()>,
    pages: i32,
    max_pages: i32,
    /// The WAL's size past which the writer checkpoints it: `max_pages`, or, after readers
    /// kept a checkpoint from its end, a threshold later (so that a reader holding on does
    /// not make every commit wait for it).
    bound_at: std::sync::atomic::AtomicI32,
    /// The WAL's size when the thread was last woken (the writer's commits, which call
    /// [`Checkpointer::after_commit`], hold the connection's lock).
    woken_at: std::sync::atomic::AtomicI32,
    /// Set by the thread after a checkpoint: the writer copies the rest.
    caught_up: Arc<std::sync::atomic::AtomicBool>,
    /// Held by whoever of the thread and the writer checkpoints: SQLite refuses a second
    /// checkpoint at once, without the busy handler, so a bound checkpoint tried while
    /// the thread was in one of its passes would fail and the WAL would go past its bound.
    checkpointing: Arc<Mutex<()>>,
    /// For tests, which wait for checkpoints.
    #[cfg(test)]
    pub(super) done: Arc<Checkpoints>,
}

/// Counts the checkpoints run, for whoever waits for one.
#[derive(Default)]
pub(in crate::store) struct Checkpoints {
    count: Mutex<u64>,
    changed: std::sync::Condvar,
}

impl Checkpoints {
    pub(super) fn ran(&self) {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.changed.notify_all();
    }

    /// Waits up to `timeout` for more than `seen` checkpoints: how many there were.
    #[cfg(test)]
    pub(in crate::store) fn wait_past(&self, seen: u64, timeout: Duration) -> u64 {
        let count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        let (count, _) = self
            .changed
            .wait_timeout_while(count, timeout, |n| *n <= seen)
            .unwrap_or_else(|p| p.into_inner());
        *count
    }
}

impl Checkpointer {
    pub(super) fn start(
        path: &Path,
        synchronous: SqliteSynchronous,
        pages: u32,
        max_pages: u32,
    ) -> Result<Self, StoreError> {
        let conn = rusqlite::Connection::open(path)
            .map_err(|e| StoreError::Unavailable(format!("sqlite {}: {e}", path.display())))?;
        conn.execute_batch(&pragmas(synchronous))
            .map_err(store_error)?;
        let (wake, woken) = std::sync::mpsc::sync_channel(1);
        let done = Arc::new(Checkpoints::default());
        let counted = done.clone();
        let caught_up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let told = caught_up.clone();
        let checkpointing = Arc::new(Mutex::new(()));
        let held = checkpointing.clone();
        std::thread::Builder::new()
            .name("a2a-checkpoint".into())
            .spawn(move || checkpoint_loop(&conn, &woken, &told, &held, &counted))
            .map_err(|e| StoreError::Unavailable(format!("the sqlite checkpoint thread: {e}")))?;
        Ok(Self {
            wake,
            pages: i32::try_from(pages).unwrap_or(i32::MAX),
            max_pages: i32::try_from(max_pages).unwrap_or(i32::MAX),
            bound_at: std::sync::atomic::AtomicI32::new(
                i32::try_from(max_pages).unwrap_or(i32::MAX),
            ),
            woken_at: std::sync::atomic::AtomicI32::new(0),
            caught_up,
            checkpointing,
            #[cfg(test)]
            done,
        })
    }

    /// After a commit on this thread: wakes the checkpoint thread once the WAL has grown
    /// by the threshold since it was last woken. (Not merely when the WAL is that large:
    /// a WAL that cannot start over — a reader still on its older pages — would wake it
    /// at every commit, each wake-up a checkpoint with little to copy and two syncs.)
    ///
    /// After a checkpoint of the thread's, copies what it left (see [`Checkpointer`]) on
    /// the writer's `conn`, between two transactions.
    pub(super) fn after_commit(&self, conn: &rusqlite::Connection) {
        use std::sync::atomic::Ordering::{AcqRel, Relaxed};
        let pages = WAL_PAGES.replace(0);
        crate::telemetry::gauge(crate::telemetry::SQLITE_WAL_PAGES).set(f64::from(pages));
        if pages < self.max_pages {
            self.bound_at.store(self.max_pages, Relaxed);
        } else if pages >= self.bound_at.load(Relaxed) {
            let started = std::time::Instant::now();
            // Waits for a pass of the thread's to end.
            let held = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
            let done = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0));
            drop(held);
            metrics::counter!(crate::telemetry::SQLITE_WAL_BOUND_CHECKPOINTS).increment(1);
            metrics::histogram!(crate::telemetry::SQLITE_CHECKPOINT_MS, "by" => "bound")
                .record(started.elapsed().as_secs_f64() * 1000.0);
            if !matches!(done, Ok(0)) {
                tracing::warn!(wal_pages = pages, outcome = ?done, "sqlite WAL past store.sqlite_max_wal_pages could not be checkpointed to its end (readers held on to it); tried again once it grows by sqlite_checkpoint_pages");
                self.bound_at
                    .store(pages.saturating_add(self.pages), Relaxed);
            }
            self.woken_at.store(0, Relaxed);
            return;
        }
        if self.caught_up.load(Relaxed)
            // The thread in another pass: the rest is copied after a later commit.
            && let Ok(_held) = self.checkpointing.try_lock()
            && self.caught_up.swap(false, AcqRel)
        {
            let started = std::time::Instant::now();
            match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                Ok(()) => {
                    metrics::histogram!(crate::telemetry::SQLITE_CHECKPOINT_MS, "by" => "writer")
                        .record(started.elapsed().as_secs_f64() * 1000.0)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "sqlite checkpoint failed (tried again after the next one)")
                }
            }
        }
        let mut woken_at = self.woken_at.load(Relaxed);
        if pages < woken_at {
            // The WAL started over.
            woken_at = 0;
            self.woken_at.store(0, Relaxed);
        }
        if pages - woken_at >= self.pages {
            self.woken_at.store(pages, Relaxed);
            // Full: a checkpoint is already asked for.
            let _ = self.wake.try_send(());
        }
    }
}

/// Passes of the checkpoint thread per wake-up at most: each copies what the writer
/// committed during the one before, so the remainder left to the writer shrinks.
const CHECKPOINT_PASSES: usize = 4;

/// A pass that copied fewer pages than this leaves the rest to the writer.
const CHECKPOINT_TAIL_PAGES: i64 = 64;

/// The checkpoint thread: PASSIVE checkpoints per wake-up, until the writer is gone.
pub(super) fn checkpoint_loop(
    conn: &rusqlite::Connection,
    woken: &std::sync::mpsc::Receiver<()>,
    caught_up: &std::sync::atomic::AtomicBool,
    checkpointing: &Mutex<()>,
    done: &Checkpoints,
) {
    while woken.recv().is_ok() {
        let mut copied_before = 0;
        for _ in 0..CHECKPOINT_PASSES {
            let started = std::time::Instant::now();
            let held = checkpointing.lock().unwrap_or_else(|p| p.into_inner());
            let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
            });
            drop(held);
            match result {
                Ok((wal, copied)) => {
                    metrics::histogram!(crate::telemetry::SQLITE_CHECKPOINT_MS, "by" => "thread")
                        .record(started.elapsed().as_secs_f64() * 1000.0);
                    caught_up.store(true, std::sync::atomic::Ordering::Release);
                    if copied < wal {
                        tracing::debug!(wal, copied, "sqlite checkpoint: part of the WAL is left");
                    }
                    let progress = copied - copied_before;
                    copied_before = copied;
                    if progress < CHECKPOINT_TAIL_PAGES {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "sqlite checkpoint failed (tried again after the next commit)");
                    break;
                }
            }
        }
        done.ran();
    }
}
