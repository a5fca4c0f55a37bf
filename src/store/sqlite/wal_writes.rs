//! The SQLite writer's WAL frames handed to the kernel in one write per commit.
//!
//! SQLite appends a commit to the WAL one frame at a time, and each frame in two
//! `pwrite`s (its 24-byte header, then the page): a send at one connection dirties some
//! ten pages, so some twenty system calls before the commit's `fsync`, each paying the
//! file's lock, its timestamps and the page-cache lookups. This VFS is SQLite's default
//! one but for the WAL files it opens: their writes are held in memory while they follow
//! each other and written at once (one `pwrite` per [`WRITE_MAX`] bytes) when the WAL is
//! synced, read where they lie, resized or closed, when a write lands elsewhere, or when
//! [`HELD_MAX`] bytes are held.
//!
//! Only the writer connection opens the file through it, and only with `synchronous =
//! FULL` (`store.sqlite_synchronous`), where a commit ends with the WAL's sync: SQLite
//! syncs the frames before it publishes them in the WAL index, so no reader ever looks
//! for a frame still held here, and a commit is acknowledged only after the sync (which
//! writes what was held first) succeeded — an error there fails the commit as a failed
//! write would. With `NORMAL`, a commit is published without a sync, so its frames must
//! reach the file at once: the writer opens the file through the default VFS then.

use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;

use libsqlite3_sys as ffi;

/// The name the VFS is registered under.
pub(in crate::store) const NAME: &str = "agent-a2a-wal-writes";
const NAME_C: &CStr = c"agent-a2a-wal-writes";

/// Bytes held at most before they are written anyway (a group commit of some 250 pages).
const HELD_MAX: usize = 1 << 20;

/// Bytes per write handed to the default VFS: its `xWrite` takes the length modulo
/// 128 KiB (`seekAndWriteFd`: `nBuf &= 0x1ffff`), so a longer write would be cut short
/// and fail as a full disk.
const WRITE_MAX: usize = 120 << 10;

/// A WAL file open through this VFS: SQLite sees `base`; the default VFS's own file
/// follows in the same allocation, at [`INNER_AT`].
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    inner: *mut ffi::sqlite3_file,
    /// Bytes written by SQLite and not yet by the kernel, from offset `held_at` on.
    held: Vec<u8>,
    held_at: i64,
    /// SQLite's writes, and the writes handed to the default VFS.
    #[cfg(test)]
    counts: (u64, u64),
}

/// Where the default VFS's file starts in the allocation SQLite makes for a file.
const INNER_AT: usize = std::mem::size_of::<WalFile>().next_multiple_of(16);

static REGISTERED: OnceLock<Result<(), c_int>> = OnceLock::new();

/// Registers the VFS once per process: `Err` with SQLite's code if it could not be.
/// Looking up the default VFS initializes SQLite, so [`crate::store::open`] tunes the library
/// (`sqlite::tune_library`) before the writer registers this.
pub(in crate::store) fn register() -> Result<(), c_int> {
    *REGISTERED.get_or_init(|| {
        // SAFETY: `sqlite3_vfs_find(NULL)` returns the default VFS, which SQLite keeps
        // for the life of the process; the copy below is leaked for as long, as
        // `sqlite3_vfs_register` requires.
        unsafe {
            let inner = ffi::sqlite3_vfs_find(std::ptr::null());
            if inner.is_null() {
                return Err(ffi::SQLITE_ERROR);
            }
            let inner_size = usize::try_from((*inner).szOsFile).map_err(|_| ffi::SQLITE_ERROR)?;
            // The default VFS's own methods serve every call but `xOpen`: they take the
            // VFS object only to be told which one they are (its `pAppData` is read
            // by its `xOpen` alone, which gets the default VFS's object from here).
            let mut vfs: ffi::sqlite3_vfs = *inner;
            vfs.szOsFile = c_int::try_from(INNER_AT + inner_size).map_err(|_| ffi::SQLITE_ERROR)?;
            vfs.pNext = std::ptr::null_mut();
            vfs.zName = NAME_C.as_ptr();
            vfs.pAppData = inner.cast::<c_void>();
            vfs.xOpen = Some(open);
            let rc = ffi::sqlite3_vfs_register(Box::into_raw(Box::new(vfs)), 0);
            if rc != ffi::SQLITE_OK {
                return Err(rc);
            }
            Ok(())
        }
    })
}

/// `xOpen`: a WAL file is wrapped; any other file is the default VFS's own, opened in
/// the allocation SQLite made (at least as large as the default VFS asks).
unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite calls this with the VFS registered above, whose `pAppData` is the
    // default VFS, and `file` pointing to `szOsFile` bytes it owns until `xClose`.
    unsafe {
        let inner_vfs = (*vfs).pAppData.cast::<ffi::sqlite3_vfs>();
        let Some(inner_open) = (*inner_vfs).xOpen else {
            return ffi::SQLITE_ERROR;
        };
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            return inner_open(inner_vfs, name, file, flags, out_flags);
        }
        let inner = file.cast::<u8>().add(INNER_AT).cast::<ffi::sqlite3_file>();
        let rc = inner_open(inner_vfs, name, inner, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            // No methods: SQLite does not close a file it failed to open.
            (*file).pMethods = std::ptr::null();
            return rc;
        }
        file.cast::<WalFile>().write(WalFile {
            base: ffi::sqlite3_file {
                pMethods: &WAL_METHODS,
            },
            inner,
            held: Vec::new(),
            held_at: 0,
            #[cfg(test)]
            counts: (0, 0),
        });
        ffi::SQLITE_OK
    }
}

/// A WAL file's methods: the default VFS's, with its writes held.
static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    // Version 1: a WAL file has no shared memory and is never mapped.
    iVersion: 1,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

/// The wrapper of `file` (one this VFS opened as a WAL file).
///
/// # Safety
/// `file` must be a [`WalFile`] written by [`open`] and not yet closed.
unsafe fn wal<'a>(file: *mut ffi::sqlite3_file) -> &'a mut WalFile {
    // SAFETY: as the caller promises; SQLite never calls one file's methods at once from
    // two threads.
    unsafe { &mut *file.cast::<WalFile>() }
}

/// The default VFS's methods of the wrapped file.
///
/// # Safety
/// `inner` must be a file the default VFS opened.
unsafe fn methods<'a>(inner: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    // SAFETY: as the caller promises.
    unsafe { &*(*inner).pMethods }
}

impl WalFile {
    /// Writes what is held, in one write.
    fn flush(&mut self) -> c_int {
        let mut rc = ffi::SQLITE_OK;
        let mut at = self.held_at;
        for chunk in self.held.chunks(WRITE_MAX) {
            #[cfg(test)]
            {
                self.counts.1 += 1;
            }
            // SAFETY: `inner` is the default VFS's open file; its `xWrite` writes all of
            // the chunk's bytes (fewer than `WRITE_MAX`, so as many as asked), or fails.
            rc = unsafe {
                match methods(self.inner).xWrite {
                    Some(write) => write(
                        self.inner,
                        chunk.as_ptr().cast(),
                        c_int::try_from(chunk.len()).unwrap_or(c_int::MAX),
                        at,
                    ),
                    None => ffi::SQLITE_IOERR_WRITE,
                }
            };
            if rc != ffi::SQLITE_OK {
                break;
            }
            at += chunk.len() as i64;
        }
        // Written or failed, they are not held any more: a failure fails the sync (or the
        // call) that asked for them, and SQLite's transaction with it.
        self.held.clear();
        if self.held.capacity() > HELD_MAX {
            self.held.shrink_to(HELD_MAX);
        }
        rc
    }

    /// What `call` answers on the default VFS's file once what is held is written
    /// (`missing` if the default VFS lacks the method it calls).
    fn flushed_then(
        &mut self,
        call: impl FnOnce(*mut ffi::sqlite3_file, &ffi::sqlite3_io_methods) -> Option<c_int>,
        missing: c_int,
    ) -> c_int {
        let rc = self.flush();
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        // SAFETY: `inner` is the default VFS's open file.
        let methods = unsafe { methods(self.inner) };
        call(self.inner, methods).unwrap_or(missing)
    }

    /// Whether `len` bytes at `offset` overlap what is held.
    fn overlaps_held(&self, offset: i64, len: c_int) -> bool {
        let held_end = self.held_at + self.held.len() as i64;
        !self.held.is_empty() && offset < held_end && offset + i64::from(len) > self.held_at
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file once, after its last call on it.
    unsafe {
        let wal = wal(file);
        let flushed = wal.flush();
        let inner = wal.inner;
        std::ptr::drop_in_place(std::ptr::addr_of_mut!(wal.held));
        let closed = match methods(inner).xClose {
            Some(close) => close(inner),
            None => ffi::SQLITE_OK,
        };
        if flushed != ffi::SQLITE_OK {
            flushed
        } else {
            closed
        }
    }
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: `file` is open, `buf` has room for `amount` bytes; the default VFS's method
    // gets its own file.
    let wal = unsafe { wal(file) };
    let read = |inner, m: &ffi::sqlite3_io_methods| {
        m.xRead.map(|f| unsafe { f(inner, buf, amount, offset) })
    };
    if wal.overlaps_held(offset, amount) {
        return wal.flushed_then(read, ffi::SQLITE_IOERR_READ);
    }
    // SAFETY: as above.
    read(wal.inner, unsafe { methods(wal.inner) }).unwrap_or(ffi::SQLITE_IOERR_READ)
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: `file` is open; `buf` holds `amount` bytes (SQLite's contract).
    unsafe {
        let wal = wal(file);
        let Ok(len) = usize::try_from(amount) else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        #[cfg(test)]
        {
            wal.counts.0 += 1;
        }
        if !wal.held.is_empty() && offset != wal.held_at + wal.held.len() as i64 {
            let rc = wal.flush();
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        if wal.held.is_empty() {
            wal.held_at = offset;
        }
        wal.held
            .extend_from_slice(std::slice::from_raw_parts(buf.cast::<u8>(), len));
        if wal.held.len() >= HELD_MAX {
            return wal.flush();
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    // SAFETY: `file` is open; the default VFS's method gets its own file.
    unsafe { wal(file) }.flushed_then(
        |inner, m| m.xTruncate.map(|f| unsafe { f(inner, size) }),
        ffi::SQLITE_IOERR_TRUNCATE,
    )
}

unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: `file` is open; the default VFS's method gets its own file.
    unsafe { wal(file) }.flushed_then(
        |inner, m| m.xSync.map(|f| unsafe { f(inner, flags) }),
        ffi::SQLITE_IOERR_FSYNC,
    )
}

unsafe extern "C" fn file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: `file` is open, `size` SQLite's to write; the default VFS's method gets its
    // own file.
    unsafe { wal(file) }.flushed_then(
        |inner, m| m.xFileSize.map(|f| unsafe { f(inner, size) }),
        ffi::SQLITE_IOERR_FSTAT,
    )
}

unsafe extern "C" fn lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: `file` is open.
    unsafe {
        let inner = wal(file).inner;
        methods(inner)
            .xLock
            .map_or(ffi::SQLITE_OK, |f| f(inner, level))
    }
}

unsafe extern "C" fn unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: `file` is open.
    unsafe {
        let inner = wal(file).inner;
        methods(inner)
            .xUnlock
            .map_or(ffi::SQLITE_OK, |f| f(inner, level))
    }
}

unsafe extern "C" fn check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: `file` is open; `out` is SQLite's to write.
    unsafe {
        let inner = wal(file).inner;
        match methods(inner).xCheckReservedLock {
            Some(f) => f(inner, out),
            None => {
                *out = 0;
                ffi::SQLITE_OK
            }
        }
    }
}

unsafe extern "C" fn file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: `file` is open, `arg` what `op` takes; the default VFS's method gets its own
    // file. It may act on the file for these (grow it, name it, sync it): what is held is
    // written first.
    unsafe { wal(file) }.flushed_then(
        |inner, m| m.xFileControl.map(|f| unsafe { f(inner, op, arg) }),
        ffi::SQLITE_NOTFOUND,
    )
}

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is open.
    unsafe {
        let inner = wal(file).inner;
        methods(inner).xSectorSize.map_or(4096, |f| f(inner))
    }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is open.
    unsafe {
        let inner = wal(file).inner;
        methods(inner)
            .xDeviceCharacteristics
            .map_or(0, |f| f(inner))
    }
}

/// The file object `op` (`SQLITE_FCNTL_FILE_POINTER`: the database's,
/// `SQLITE_FCNTL_JOURNAL_POINTER`: the WAL's in WAL mode) names for `conn`'s main
/// database.
#[cfg(test)]
fn file_of(conn: &rusqlite::Connection, op: c_int) -> *mut ffi::sqlite3_file {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: both file controls write a pointer to a file object the connection owns.
    let rc = unsafe {
        ffi::sqlite3_file_control(conn.handle(), c"main".as_ptr(), op, (&raw mut file).cast())
    };
    assert_eq!(rc, ffi::SQLITE_OK);
    file
}

/// Whether `file` is a WAL open through this VFS.
#[cfg(test)]
fn wrapped(file: *mut ffi::sqlite3_file) -> bool {
    // SAFETY: a file object from `file_of`, open while its connection is.
    !file.is_null() && unsafe { (*file).pMethods } == &raw const WAL_METHODS
}

/// SQLite's writes to the WAL of `conn`'s main database and the writes that reached
/// the file, or `None` if that WAL is not open through this VFS.
#[cfg(test)]
pub(in crate::store) fn counts(conn: &rusqlite::Connection) -> Option<(u64, u64)> {
    let file = file_of(conn, ffi::SQLITE_FCNTL_JOURNAL_POINTER);
    // SAFETY: a WAL this VFS opened, open while the connection is in WAL mode.
    wrapped(file).then(|| unsafe { wal(file) }.counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &std::path::Path, synchronous: &str) -> rusqlite::Connection {
        register().unwrap();
        let conn = rusqlite::Connection::open_with_flags_and_vfs(
            path,
            rusqlite::OpenFlags::default(),
            NAME,
        )
        .unwrap();
        conn.execute_batch(&format!(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous}; \
             CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID; \
             CREATE INDEX IF NOT EXISTS t_by_v ON t (v)"
        ))
        .unwrap();
        conn
    }

    /// A new database in a directory of its own, open through this VFS with FULL.
    fn fresh() -> (tempfile::TempDir, std::path::PathBuf, rusqlite::Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open(&path, "FULL");
        (dir, path, conn)
    }

    fn insert(conn: &rusqlite::Connection, keys: std::ops::Range<u32>) {
        let tx = conn.unchecked_transaction().unwrap();
        for k in keys {
            tx.execute(
                "INSERT INTO t (k, v) VALUES (?1, randomblob(300))",
                [format!("{:08x}", k.wrapping_mul(2_654_435_761))],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }

    fn rows(path: &std::path::Path) -> i64 {
        let reader = rusqlite::Connection::open(path).unwrap();
        let check: String = reader
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_commit_reaches_the_wal_in_one_write_and_other_connections_read_it() {
        let (_dir, path, conn) = fresh();
        let (writes, written) = counts(&conn).expect("the WAL through this VFS");
        // Twenty rows in random key order: many pages, each frame two of SQLite's writes.
        insert(&conn, 0..20);
        let (writes, written) = {
            let (w, n) = counts(&conn).unwrap();
            (w - writes, n - written)
        };
        assert!(writes >= 6, "{writes}");
        assert_eq!(written, 1, "{writes} writes of SQLite's");
        assert_eq!(rows(&path), 20);
        // Commits after it, the WAL read back by a checkpoint on the writer between them.
        for i in 1..10 {
            insert(&conn, i * 100..i * 100 + 10);
        }
        conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)")
            .unwrap();
        insert(&conn, 5000..5010);
        assert_eq!(rows(&path), 120);
        drop(conn);
        // Reopened (the WAL checkpointed and removed at the last close).
        let conn = open(&path, "FULL");
        insert(&conn, 9000..9005);
        assert_eq!(rows(&path), 125);
    }

    /// A transaction larger than the page cache writes frames before it commits and
    /// reads them back: what is held is written before any read of it.
    #[test]
    fn frames_spilled_before_the_commit_are_read_back_as_written() {
        let (_dir, path, conn) = fresh();
        conn.execute_batch("PRAGMA cache_size=10").unwrap();
        insert(&conn, 0..3000);
        let (writes, written) = counts(&conn).unwrap();
        assert!(written > 1 && written < writes, "{written} of {writes}");
        let within: i64 = conn
            .query_row("SELECT count(*) FROM t WHERE v IS NOT NULL", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(within, 3000);
        assert_eq!(rows(&path), 3000);
    }

    /// A commit of more than a write's worth (and more than is held at most) reaches the
    /// file whole, in writes the default VFS takes in full.
    #[test]
    fn a_large_commit_is_written_in_parts() {
        let (_dir, path, conn) = fresh();
        conn.execute_batch("PRAGMA cache_size=-65536").unwrap();
        let before = counts(&conn).unwrap();
        insert(&conn, 0..6000);
        let (writes, written) = counts(&conn).unwrap();
        let (writes, written) = (writes - before.0, written - before.1);
        let pages_bytes = writes / 2 * 4096;
        assert!(pages_bytes > HELD_MAX as u64, "{writes} writes");
        assert!(
            written >= pages_bytes / WRITE_MAX as u64,
            "{written} of {writes}"
        );
        assert!(written < writes / 10, "{written} of {writes}");
        assert_eq!(rows(&path), 6000);
    }

    /// Rolled back: nothing of the transaction is read by anyone.
    #[test]
    fn a_rolled_back_transaction_leaves_nothing() {
        let (_dir, path, conn) = fresh();
        insert(&conn, 0..5);
        conn.execute_batch("PRAGMA cache_size=10").unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        for k in 100..2000 {
            tx.execute(
                "INSERT INTO t (k, v) VALUES (?1, randomblob(300))",
                [format!("{k:08}")],
            )
            .unwrap();
        }
        drop(tx);
        insert(&conn, 5..10);
        assert_eq!(rows(&path), 10);
    }

    /// Other files than the WAL are the default VFS's own.
    #[test]
    fn only_the_wal_is_wrapped() {
        let (dir, _, conn) = fresh();
        assert!(!wrapped(file_of(&conn, ffi::SQLITE_FCNTL_FILE_POINTER)));
        let plain = rusqlite::Connection::open(dir.path().join("u.db")).unwrap();
        plain.execute_batch("PRAGMA journal_mode=WAL").unwrap();
        assert_eq!(counts(&plain), None);
    }
}
