//! SQLite's idempotency claims: a log in the order they are made, and an index from key to
//! claim written in sorted runs.
//!
//! A claim is keyed by the client's message id, which clients draw at random. Under a
//! primary key on it, each claim landed on a leaf page of its own — one more page written
//! to the WAL per send, and copied again by the checkpoint, growing with the table. Here a
//! claim is a row appended to `idempotency_keys` under an id this writer gives (rising,
//! never reused), which a group commit writes on the log's last page; the key's entry in
//! `idempotency_key_index` — `(key_hash, id)`, the hash [`key_hash`] of tenant and key —
//! waits in memory ([`ClaimIndex`]'s pending set) until `store.sqlite_claim_buffer` claims
//! wait, and from then on each commit also writes the pending entries of one 64th of the
//! hash range (more, if it added more claims than that), sorted, so that they share the
//! index's leaves instead of each dirtying one. At most the buffer and one commit's
//! claims wait.
//!
//! A lookup reads the candidates of the key's hash from the pending set, then from the
//! index, and takes the newest claim whose row has the very tenant and key (a hash may be
//! shared). The pending set is read before the index, and entries leave it only after the
//! commit that indexed them, so a reader never misses a committed claim; a claim joins it
//! when its commit returns, before the send it belongs to is answered.
//!
//! After a crash the pending set is gone, but the claims are not: `idempotency_index_state`
//! says from which id on claims may lack their entries (the smallest pending id, written by
//! each commit that indexes a run), and [`ClaimIndex::open`] indexes every claim from there
//! before the writer takes its first commit — also every claim a migration carried over.
//!
//! Only this process writes the file (`sqlite/lock.rs`), and its writer commits one group
//! at a time, so the check that refuses a key claimed within its window is exact here:
//! staged claims of the open transaction, the pending set, the index. A claim the runtime
//! vouches for (`Claim::known_unclaimed`: its claim filter rules the key out while the
//! send holds the key) is logged without that check.

use std::collections::{BTreeSet, HashSet};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::store::StoreError;
use crate::store::tables::idempotency_keys::{ClaimRow, NewClaim};

/// Index runs: the hash range is cut in this many parts, one written per commit.
const RUNS: u64 = 64;

/// Claims indexed per statement and transaction when the writer opens.
const OPEN_CHUNK: i64 = 65_536;

/// The 64-bit key of a claim in `idempotency_key_index`: the first eight bytes of
/// SHA-256 over tenant, a NUL and key (stable across releases, unlike std's hashers).
pub(in crate::store) fn key_hash(tenant: &str, key: &str) -> i64 {
    let digest = Sha256::new()
        .chain_update(tenant.as_bytes())
        .chain_update([0u8])
        .chain_update(key.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// A row of `SELECT id, tenant_id, idem_key` as its index entry: (key hash, id).
fn hash_and_id(row: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, i64)> {
    let id: i64 = row.get(0)?;
    let tenant: String = row.get(1)?;
    let key: String = row.get(2)?;
    Ok((key_hash(&tenant, &key), id))
}

/// The run of hash range `run` (of [`RUNS`]) as signed values: each run is contiguous
/// among them, as in the index's order.
fn run_range(run: u64) -> (i64, i64) {
    let width = u64::MAX / RUNS + 1;
    let low = run * width;
    (low as i64, (low + (width - 1)) as i64)
}

/// The claims of the log whose index entries wait in memory, and the next id to give.
pub(in crate::store) struct ClaimIndex {
    state: Mutex<State>,
    /// `store.sqlite_claim_buffer`: from this many pending claims on, commits index runs.
    buffer: usize,
}

struct State {
    /// (key hash, id) of every claim committed but not yet in the index.
    by_hash: BTreeSet<(i64, i64)>,
    /// Their ids, for the smallest.
    ids: BTreeSet<i64>,
    /// The id the next claim gets.
    next_id: i64,
    /// The run the next commit that indexes writes.
    next_run: u64,
}

/// What a transaction of the writer did to the claims, applied to the pending set once
/// it committed ([`ClaimIndex::committed`]); dropped with a rolled-back one.
#[derive(Default)]
pub(in crate::store) struct Staged {
    /// Claims the transaction logged: (key hash, id), in order.
    added: Vec<(i64, i64)>,
    /// Entries the transaction wrote to the index, or whose claims it forgot.
    removed: Vec<(i64, i64)>,
    /// Runs the transaction indexed: the next commit writes the one after them.
    runs: u64,
    /// The next id to give, past the transaction's claims.
    next_id: Option<i64>,
}

/// The newest claim of a key, as the writer checks it.
pub(in crate::store) struct Found {
    pub id: i64,
    pub created_at: i64,
}

impl ClaimIndex {
    /// Indexes every claim from `idempotency_index_state`'s id on (those a crash left
    /// unindexed, or a migration carried over), in chunks of [`OPEN_CHUNK`], each sorted
    /// and committed on its own; then nothing waits.
    pub(in crate::store) fn open(conn: &Connection, buffer: usize) -> Result<Self, StoreError> {
        let err = super::error::store_error;
        let mut from: i64 = conn
            .query_row(
                "SELECT unindexed_from FROM idempotency_index_state WHERE one = 1",
                [],
                |r| r.get(0),
            )
            .map_err(err)?;
        let mut indexed = 0u64;
        loop {
            // IMMEDIATE, as the writer's commits: another writer on the file (the memory
            // repository's) between this read and its writes would fail the upgrade of a
            // read transaction at once instead of waiting.
            let tx = rusqlite::Transaction::new_unchecked(
                conn,
                rusqlite::TransactionBehavior::Immediate,
            )
            .map_err(err)?;
            let chunk: Vec<(i64, i64)> = {
                let mut stmt = tx
                    .prepare(
                        "SELECT id, tenant_id, idem_key FROM idempotency_keys WHERE id >= ?1 \
                         ORDER BY id LIMIT ?2",
                    )
                    .map_err(err)?;
                let rows = stmt
                    .query_map(params![from, OPEN_CHUNK], hash_and_id)
                    .map_err(err)?;
                rows.collect::<rusqlite::Result<_>>().map_err(err)?
            };
            let Some(&(_, last)) = chunk.iter().max_by_key(|(_, id)| *id) else {
                break;
            };
            let mut sorted = chunk;
            sorted.sort_unstable();
            index_entries(&tx, &sorted).map_err(err)?;
            from = last + 1;
            set_unindexed_from(&tx, from).map_err(err)?;
            tx.commit().map_err(err)?;
            indexed += sorted.len() as u64;
        }
        let max_id: Option<i64> = conn
            .query_row("SELECT max(id) FROM idempotency_keys", [], |r| r.get(0))
            .map_err(err)?;
        let next_id = from.max(max_id.map_or(1, |m| m + 1)).max(1);
        if indexed > 0 {
            tracing::info!(
                claims = indexed,
                "sqlite: indexed the idempotency claims left unindexed"
            );
        }
        Ok(Self {
            state: Mutex::new(State {
                by_hash: BTreeSet::new(),
                ids: BTreeSet::new(),
                next_id,
                next_run: 0,
            }),
            buffer,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ids of the claims that may be `hash`'s, newest first: pending ones (read first,
    /// see the module documentation), then the index's.
    fn candidates(&self, conn: &Connection, hash: i64) -> rusqlite::Result<Vec<i64>> {
        let mut ids: Vec<i64> = self
            .state()
            .by_hash
            .range((hash, i64::MIN)..=(hash, i64::MAX))
            .map(|&(_, id)| id)
            .collect();
        let mut stmt =
            conn.prepare_cached("SELECT id FROM idempotency_key_index WHERE key_hash = ?1")?;
        for id in stmt.query_map([hash], |r| r.get::<_, i64>(0))? {
            ids.push(id?);
        }
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.dedup();
        Ok(ids)
    }

    /// The newest claim of `key` (its row), read on `conn`.
    pub(in crate::store) fn read(
        &self,
        conn: &Connection,
        tenant: &str,
        key: &str,
    ) -> rusqlite::Result<Option<ClaimRow>> {
        let mut stmt = conn.prepare_cached(
            "SELECT tenant_id, idem_key, context_id, task_id, digest, reply, created_at, \
             reply_seq FROM idempotency_keys WHERE id = ?1",
        )?;
        for id in self.candidates(conn, key_hash(tenant, key))? {
            let row = stmt
                .query_row([id], |row| {
                    Ok(ClaimRow {
                        tenant_id: row.get(0)?,
                        idem_key: row.get(1)?,
                        context_id: row.get(2)?,
                        task_id: row.get(3)?,
                        digest: row.get(4)?,
                        reply: row.get(5)?,
                        created_at: row.get(6)?,
                        reply_seq: row.get(7)?,
                    })
                })
                .optional()?;
            if let Some(row) = row
                && row.tenant_id == tenant
                && row.idem_key == key
            {
                return Ok(Some(row));
            }
        }
        Ok(None)
    }

    /// The newest claim of `key` as the writer's transaction `conn` sees it: its own
    /// claims first, then the committed ones.
    fn newest(
        &self,
        conn: &Connection,
        staged: &Staged,
        tenant: &str,
        key: &str,
    ) -> rusqlite::Result<Option<Found>> {
        let hash = key_hash(tenant, key);
        // The transaction's own claims are newer than any committed one.
        let own = staged.added.iter().rev().filter(|&&(h, _)| h == hash);
        let ids: Vec<i64> = own.map(|&(_, id)| id).collect();
        let mut stmt = conn.prepare_cached(
            "SELECT tenant_id, idem_key, created_at FROM idempotency_keys WHERE id = ?1",
        )?;
        for id in ids.into_iter().chain(self.candidates(conn, hash)?) {
            let row: Option<(String, String, i64)> = stmt
                .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?;
            if let Some((t, k, created_at)) = row
                && t == tenant
                && k == key
            {
                return Ok(Some(Found { id, created_at }));
            }
        }
        Ok(None)
    }

    /// Logs `claim` in the writer's transaction, unless its key was claimed at or after
    /// `taken_over_before` (within the window): then the batch is refused. A claim
    /// `known_unclaimed` is logged without looking.
    pub(in crate::store) fn claim(
        &self,
        tx: &Connection,
        staged: &mut Staged,
        claim: &NewClaim<'_>,
        taken_over_before: i64,
        known_unclaimed: bool,
    ) -> Result<(), StoreError> {
        let err = super::error::store_error;
        // A key the claiming process vouches for is not looked up: this process is the
        // file's only writer (see `Claim::known_unclaimed`).
        if !known_unclaimed
            && let Some(found) = self
                .newest(tx, staged, claim.tenant_id, claim.idem_key)
                .map_err(err)?
            && found.created_at >= taken_over_before
        {
            return Err(StoreError::Duplicate(claim.idem_key.to_owned()));
        }
        let id = match staged.next_id {
            Some(id) => id,
            None => self.state().next_id,
        };
        tx.prepare_cached(
            "INSERT INTO idempotency_keys (id, tenant_id, idem_key, context_id, task_id, \
             digest, reply, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                id,
                claim.tenant_id,
                claim.idem_key,
                claim.context_id,
                claim.task_id,
                claim.digest,
                claim.reply,
                claim.created_at
            ])
        })
        .map_err(err)?;
        staged.next_id = Some(id + 1);
        staged
            .added
            .push((key_hash(claim.tenant_id, claim.idem_key), id));
        Ok(())
    }

    /// Records the reply of the newest claim of `key`, if there is one.
    pub(in crate::store) fn settle(
        &self,
        tx: &Connection,
        staged: &Staged,
        tenant: &str,
        key: &str,
        reply: Option<&str>,
        reply_seq: Option<i64>,
    ) -> rusqlite::Result<()> {
        if let Some(found) = self.newest(tx, staged, tenant, key)? {
            tx.prepare_cached(
                "UPDATE idempotency_keys SET reply = ?2, reply_seq = ?3 WHERE id = ?1",
            )?
            .execute(params![found.id, reply, reply_seq])?;
        }
        Ok(())
    }

    /// Deletes every claim made before `before` and its index entry, a chunk at a time.
    pub(in crate::store) fn forget(
        &self,
        tx: &Connection,
        staged: &mut Staged,
        before: i64,
    ) -> rusqlite::Result<()> {
        loop {
            let mut gone: Vec<(i64, i64)> = {
                let mut stmt = tx.prepare_cached(
                    "SELECT id, tenant_id, idem_key FROM idempotency_keys \
                     WHERE created_at < ?1 ORDER BY created_at LIMIT ?2",
                )?;
                let rows = stmt.query_map(params![before, OPEN_CHUNK], hash_and_id)?;
                rows.collect::<rusqlite::Result<_>>()?
            };
            if gone.is_empty() {
                return Ok(());
            }
            gone.sort_unstable();
            let mut unindex = tx.prepare_cached(
                "DELETE FROM idempotency_key_index WHERE key_hash = ?1 AND id = ?2",
            )?;
            let mut delete = tx.prepare_cached("DELETE FROM idempotency_keys WHERE id = ?1")?;
            for &(hash, id) in &gone {
                unindex.execute(params![hash, id])?;
                delete.execute([id])?;
            }
            staged.removed.extend(gone);
        }
    }

    /// While `store.sqlite_claim_buffer` claims or more wait, writes the next run of
    /// their index entries in the writer's transaction (one run is enough unless the
    /// commit added more claims than a run holds), then the smallest id still waiting.
    pub(in crate::store) fn index_run(
        &self,
        tx: &Connection,
        staged: &mut Staged,
    ) -> rusqlite::Result<()> {
        let (entries, from) = {
            let state = self.state();
            if state.ids.len() + staged.added.len() < self.buffer {
                return Ok(());
            }
            // Claims this transaction forgot get no entry.
            let gone: HashSet<i64> = staged.removed.iter().map(|&(_, id)| id).collect();
            let mut waiting = state.ids.len() + staged.added.len();
            let mut entries: Vec<(i64, i64)> = Vec::new();
            while waiting >= self.buffer && staged.runs < RUNS {
                let (low, high) = run_range((state.next_run + staged.runs) % RUNS);
                let run = state.by_hash.range((low, i64::MIN)..=(high, i64::MAX));
                let before = entries.len();
                entries.extend(run.filter(|(_, id)| !gone.contains(id)).copied());
                waiting = waiting.saturating_sub(entries.len() - before);
                staged.runs += 1;
            }
            if entries.is_empty() {
                return Ok(());
            }
            let written: HashSet<i64> = entries.iter().map(|&(_, id)| id).collect();
            let from = state
                .ids
                .iter()
                .copied()
                .find(|id| !written.contains(id) && !gone.contains(id))
                .or_else(|| staged.added.first().map(|&(_, id)| id))
                .unwrap_or(staged.next_id.unwrap_or(state.next_id));
            (entries, from)
        };
        // Runs follow each other in the hash order, so the entries are sorted but where
        // the cursor wrapped around.
        let mut entries = entries;
        entries.sort_unstable();
        index_entries(tx, &entries)?;
        set_unindexed_from(tx, from)?;
        staged.removed.extend(entries);
        Ok(())
    }

    /// After the transaction of `staged` committed: its claims wait for their entries,
    /// what it indexed or forgot waits no more.
    pub(in crate::store) fn committed(&self, staged: Staged) {
        let mut state = self.state();
        for (hash, id) in staged.added {
            state.by_hash.insert((hash, id));
            state.ids.insert(id);
        }
        for (hash, id) in staged.removed {
            state.by_hash.remove(&(hash, id));
            state.ids.remove(&id);
        }
        if let Some(next) = staged.next_id {
            state.next_id = state.next_id.max(next);
        }
        state.next_run = (state.next_run + staged.runs) % RUNS;
    }
}

/// Writes index entries, given sorted (an entry already there is left as it is).
fn index_entries(tx: &Connection, entries: &[(i64, i64)]) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT OR IGNORE INTO idempotency_key_index (key_hash, id) VALUES (?1, ?2)",
    )?;
    for (hash, id) in entries {
        stmt.execute(params![hash, id])?;
    }
    Ok(())
}

fn set_unindexed_from(tx: &Connection, from: i64) -> rusqlite::Result<()> {
    tx.prepare_cached("UPDATE idempotency_index_state SET unindexed_from = ?1 WHERE one = 1")?
        .execute([from])?;
    Ok(())
}
