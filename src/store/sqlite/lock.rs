//! One process per SQLite file: an exclusive advisory lock on `<database>.lock`, held
//! for as long as anything in this process uses the database.
//!
//! SQLite would let a second server open the file too, each with its own thread actors,
//! idempotency map and push delivery over the same rows; this server is not built for
//! that (several nodes share a Postgres database). So the store's writer, the memory
//! repository and the migrations take this lock first, and another process finds it
//! taken and is refused with [`StoreError::InUse`]. The OS drops the lock with the
//! process however it ends, so a restart after a SIGKILL is never blocked. The lock file
//! stays behind, empty; it is never deleted, since a process could still hold a
//! descriptor of the deleted file while another locks a new file of the same name.
//!
//! Inside one process the database is opened more than once (the store and the memory
//! repository; tests restart a server on the same directory), but `flock`-style locks
//! conflict between two open descriptions of a file even within one process. So the OS
//! lock is taken once per process and file, and every [`SqliteLock`] on that file counts
//! itself in one registry; the last one dropped closes the file. The count is kept under
//! the registry's mutex rather than in an `Arc` found through a `Weak`: with the latter,
//! a concurrent open could see the last holder gone while its descriptor still locked
//! the file, and refuse this very process.

use std::collections::BTreeMap;
use std::fs::{File, TryLockError};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::store::StoreError;

/// The lock files this process holds, by canonical path.
static HELD: Mutex<BTreeMap<PathBuf, Held>> = Mutex::new(BTreeMap::new());

/// A lock file this process has locked: the lock lasts as long as the file stays open.
struct Held {
    _file: File,
    /// The [`SqliteLock`]s sharing it.
    holders: usize,
}

/// This process's hold on an SQLite database; the OS lock is released when the last
/// hold on the same file is dropped.
pub(crate) struct SqliteLock {
    /// The lock file's canonical path, its key in [`HELD`].
    lock_file: PathBuf,
}

impl SqliteLock {
    /// Locks `database` (whose directory must exist) for this process, or shares the lock
    /// this process already holds; [`StoreError::InUse`] when another process holds it.
    pub(crate) fn acquire(database: &Path) -> Result<Self, StoreError> {
        let lock_file = lock_file_of(database)?;
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = held.get_mut(&lock_file) {
            entry.holders += 1;
            return Ok(Self { lock_file });
        }
        let file = File::options()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_file)
            .map_err(|e| {
                StoreError::Unavailable(format!(
                    "cannot open the lock file {}: {e}",
                    lock_file.display()
                ))
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::InUse {
                    database: database.to_path_buf(),
                    lock_file,
                });
            }
            Err(TryLockError::Error(e)) => {
                return Err(StoreError::Unavailable(format!(
                    "cannot lock {}: {e}",
                    lock_file.display()
                )));
            }
        }
        held.insert(
            lock_file.clone(),
            Held {
                _file: file,
                holders: 1,
            },
        );
        Ok(Self { lock_file })
    }
}

impl Drop for SqliteLock {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = held.get_mut(&self.lock_file) {
            entry.holders -= 1;
            if entry.holders == 0 {
                // Closing the file releases the OS lock, still under the registry's mutex.
                held.remove(&self.lock_file);
            }
        }
    }
}

/// `<database>.lock` next to the database, by canonical path: every spelling of one
/// database (relative, through a symbolic link) names the same lock file.
fn lock_file_of(database: &Path) -> Result<PathBuf, StoreError> {
    let unresolved = |path: &Path, e: std::io::Error| {
        StoreError::Unavailable(format!("cannot resolve {}: {e}", path.display()))
    };
    let canonical = match std::fs::canonicalize(database) {
        Ok(path) => path,
        // Not created yet (the migrations create it): its directory exists.
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let dir = database
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let name = database.file_name().ok_or_else(|| {
                StoreError::Config(format!(
                    "the SQLite path {} names no file",
                    database.display()
                ))
            })?;
            std::fs::canonicalize(dir)
                .map_err(|e| unresolved(dir, e))?
                .join(name)
        }
        Err(e) => return Err(unresolved(database, e)),
    };
    let mut lock_file = canonical.into_os_string();
    lock_file.push(".lock");
    Ok(PathBuf::from(lock_file))
}
