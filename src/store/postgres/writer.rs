//! The Postgres write path: a group commit is one round trip of statements that were
//! prepared once, when their connection was opened.
//!
//! Every statement has one text whatever the batch holds — a table's rows go as one array
//! per column through `unnest`, so ten messages are the same statement as one — and each
//! writer connection prepares the whole set once ([`Prepared`]); a commit only binds and
//! executes. The five tables every turn writes are one statement ([`sql::WRITE`]); a
//! commit of nothing else is that statement alone, a transaction in itself. A commit with
//! more sends `BEGIN`, the statements and `COMMIT` together (tokio-postgres pipelines
//! requests issued before their answers are read). Either way the server plans nothing
//! and the commit costs one network round trip.
//!
//! Since `COMMIT` is already on its way when the first answer arrives, the checks a
//! batch depends on fail the transaction themselves, through `a2a_require` (migration
//! `…_write_checks`), with an SQLSTATE of their own: a moved fencing token (`A2F01`), a
//! thread another node owns (`A2F02`), an idempotency key claimed within its window
//! (`A2D01`). A failed statement aborts the transaction, the statements after it fail
//! too, and the `COMMIT` becomes a rollback; the first failure says why.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use futures_util::future::BoxFuture;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};

use crate::store::StoreError;
use crate::store::cluster;
use crate::store::fence::Fence;
use crate::store::packed::PgPacked;
use crate::store::rows::{
    NewMessage, NewOutboxRow, NewPushConfig, NewTask, NewTaskEvent, NewThread,
};
use crate::store::writes::{HistoryAppend, PushRow, Rows};

/// A writer connection and its prepared statements.
pub(in crate::store) struct Writer {
    client: Client,
    statements: Prepared,
}

/// The pool of writer connections (`persistence.commits_in_flight`).
pub(in crate::store) type WriterPool = managed::Pool<WriterManager>;

/// Opens writer connections: connects, and prepares every statement of the write path.
pub(in crate::store) struct WriterManager {
    url: String,
}

impl WriterManager {
    pub(in crate::store) fn new(url: String) -> Self {
        Self { url }
    }
}

impl managed::Manager for WriterManager {
    type Type = Writer;
    type Error = tokio_postgres::Error;

    async fn create(&self) -> Result<Writer, tokio_postgres::Error> {
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls).await?;
        // The connection's I/O runs on the runtime that opened it: the persistence
        // arbiter's, which outlives the HTTP workers and the actors (see `postgres/mod.rs`).
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a Postgres writer connection ended");
            }
        });
        let statements = Prepared::on(&client).await?;
        Ok(Writer { client, statements })
    }

    async fn recycle(
        &self,
        writer: &mut Writer,
        _: &Metrics,
    ) -> RecycleResult<tokio_postgres::Error> {
        match writer.client.is_closed() {
            true => Err(RecycleError::message("the connection is closed")),
            false => Ok(()),
        }
    }
}

/// SQLSTATEs `a2a_require` raises (migration `…_write_checks`).
const FENCED: &str = "A2F01";
const OWNED_ELSEWHERE: &str = "A2F02";
const CLAIMED: &str = "A2D01";

pub(in crate::store) mod sql {
    use crate::store::writes::appended_history;

    /// Run first in every commit of a node in cluster mode: passes while the node's
    /// token is still `$2`. The KEY SHARE lock keeps a takeover (which locks the row FOR
    /// UPDATE) waiting until this commit is over.
    pub const FENCE: &str = "SELECT a2a_require(EXISTS (SELECT 1 FROM cluster_nodes \
        WHERE node_id = $1 AND token = $2 FOR KEY SHARE), 'A2F01', 'fenced')";

    /// A commit's rows of the five tables every turn writes — claims (of one window),
    /// threads, messages, tasks (each with the history entries it appends), events — as
    /// one statement: a thread's or task's first row (`NewThread::first`,
    /// `NewTask::first`) a plain insert (no look for a conflicting row first, nor the
    /// speculative insertion's second WAL record; a row of its key fails the statement
    /// with `unique_violation`), the others upserts; each table's
    /// insert a data-modifying `WITH` query (all run, whether read or not; none sees the
    /// others' rows, and none needs to). Alone, it is a whole transaction in itself. It
    /// fails with `A2D01` and the first key not claimed when a key is claimed within its
    /// window (`$8`), and with `A2F02` when a thread another node owns was left alone.
    pub const WRITE: &str = concat!(
        "WITH claimed AS (INSERT INTO idempotency_keys (tenant_id, \
        idem_key, context_id, task_id, digest, reply, created_at) \
        SELECT * FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::bytea[], $5::bytea[], \
        $6::text[], $7::int8[]) \
        ON CONFLICT (tenant_id, idem_key) DO UPDATE SET context_id = excluded.context_id, \
        task_id = excluded.task_id, digest = excluded.digest, reply = excluded.reply, \
        reply_seq = NULL, created_at = excluded.created_at \
        WHERE idempotency_keys.created_at < excluded.created_at - $8::int8 \
        RETURNING tenant_id, idem_key), \
        written AS (INSERT INTO threads (tenant_id, thread_id, created_at, updated_at, \
        expires_at, status, conversation_context, owner_node) \
        SELECT * FROM unnest($9::text[], $10::bytea[], $11::int8[], $12::int8[], $13::int8[], \
        $14::text[], $15::text[], $16::text[]) \
        ON CONFLICT (tenant_id, thread_id) DO UPDATE SET updated_at = excluded.updated_at, \
        expires_at = excluded.expires_at, status = excluded.status, \
        conversation_context = excluded.conversation_context, owner_node = excluded.owner_node \
        WHERE excluded.owner_node IS NULL OR threads.owner_node IS NULL \
        OR threads.owner_node = excluded.owner_node \
        RETURNING 1), \
        m AS (INSERT INTO messages (tenant_id, thread_id, seq, message_id, task_id, role, \
        author, content, parts, tool_calls, metadata, created_at, extensions, \
        reference_task_ids) \
        SELECT * FROM unnest($17::text[], $18::bytea[], $19::int8[], $20::bytea[], $21::bytea[], \
        $22::text[], $23::text[], $24::text[], $25::text[], $26::text[], $27::text[], \
        $28::int8[], $29::text[], $30::text[])), \
        t AS (INSERT INTO tasks (tenant_id, task_id, context_id, state, status_message, \
        status_timestamp, artifacts, transitions, metadata, created_at, updated_at, history, \
        status_entry, final_event_seq) \
        SELECT * FROM unnest($31::text[], $32::bytea[], $33::bytea[], $34::text[], $35::text[], \
        $36::int8[], $37::text[], $38::text[], $39::text[], $40::int8[], $41::int8[], \
        $42::text[], $43::int8[], $44::int8[]) \
        ON CONFLICT (tenant_id, task_id) DO UPDATE SET context_id = excluded.context_id, \
        state = excluded.state, status_message = excluded.status_message, \
        status_entry = excluded.status_entry, \
        final_event_seq = coalesce(excluded.final_event_seq, tasks.final_event_seq), \
        status_timestamp = excluded.status_timestamp, artifacts = excluded.artifacts, \
        transitions = excluded.transitions, metadata = excluded.metadata, \
        updated_at = excluded.updated_at, history = ",
        appended_history!("tasks.history", "excluded.history"),
        "), e AS (INSERT INTO task_events (tenant_id, task_id, seq, kind, payload, created_at, \
        message_seq) \
        SELECT * FROM unnest($45::text[], $46::bytea[], $47::int8[], $48::text[], $49::text[], \
        $50::int8[], $51::int8[])), \
        first_threads AS (INSERT INTO threads (tenant_id, thread_id, created_at, updated_at, \
        expires_at, status, conversation_context, owner_node) \
        SELECT * FROM unnest($52::text[], $53::bytea[], $54::int8[], $55::int8[], $56::int8[], \
        $57::text[], $58::text[], $59::text[])), \
        first_tasks AS (INSERT INTO tasks (tenant_id, task_id, context_id, state, \
        status_message, status_timestamp, artifacts, transitions, metadata, created_at, \
        updated_at, history, status_entry, final_event_seq) \
        SELECT * FROM unnest($60::text[], $61::bytea[], $62::bytea[], $63::text[], $64::text[], \
        $65::int8[], $66::text[], $67::text[], $68::text[], $69::int8[], $70::int8[], \
        $71::text[], $72::int8[], $73::int8[])) \
        SELECT CASE WHEN (SELECT count(*) FROM claimed) <> cardinality($1::text[]) \
        THEN a2a_require(false, 'A2D01', (SELECT a2a_id_text(u.k) FROM unnest($1::text[], $2::bytea[]) \
        WITH ORDINALITY AS u(t, k, n) WHERE NOT EXISTS (SELECT 1 FROM claimed c \
        WHERE c.tenant_id = u.t AND c.idem_key = u.k) ORDER BY u.n LIMIT 1)) \
        WHEN (SELECT count(*) FROM written) <> cardinality($9::text[]) \
        THEN a2a_require(false, 'A2F02', 'a thread is owned by another node') END"
    );

    /// History entries appended to the rows of tasks a commit does not upsert (rare: a
    /// turn links a message to its task together with the task's row).
    pub const APPEND_HISTORY: &str = concat!(
        "UPDATE tasks SET history = ",
        appended_history!("tasks.history", "u.seqs"),
        " FROM unnest($1::text[], $2::bytea[], $3::text[]) AS u(tenant_id, task_id, seqs) \
        WHERE tasks.tenant_id = u.tenant_id AND tasks.task_id = u.task_id"
    );

    /// Claims of a window other than those of [`WRITE`]'s (never, in practice: a process
    /// has one window), as [`WRITE`] claims them.
    pub const CLAIM: &str = "WITH claimed AS (INSERT INTO idempotency_keys (tenant_id, \
        idem_key, context_id, task_id, digest, reply, created_at) \
        SELECT * FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::bytea[], $5::bytea[], \
        $6::text[], $7::int8[]) \
        ON CONFLICT (tenant_id, idem_key) DO UPDATE SET context_id = excluded.context_id, \
        task_id = excluded.task_id, digest = excluded.digest, reply = excluded.reply, \
        reply_seq = NULL, created_at = excluded.created_at \
        WHERE idempotency_keys.created_at < excluded.created_at - $8::int8 \
        RETURNING tenant_id, idem_key) \
        SELECT CASE WHEN (SELECT count(*) FROM claimed) = cardinality($1::text[]) THEN NULL \
        ELSE a2a_require(false, 'A2D01', (SELECT a2a_id_text(u.k) FROM unnest($1::text[], $2::bytea[]) \
        WITH ORDINALITY AS u(t, k, n) WHERE NOT EXISTS (SELECT 1 FROM claimed c \
        WHERE c.tenant_id = u.t AND c.idem_key = u.k) ORDER BY u.n LIMIT 1)) END";

    pub const SETTLE: &str = "UPDATE idempotency_keys SET reply = $3, reply_seq = $4 \
        WHERE tenant_id = $1 AND idem_key = $2";

    pub const FORGET: &str = "DELETE FROM idempotency_keys WHERE created_at < $1";

    /// The conditions on `status` and `expires_at` are written so that no index serves
    /// them (`|| ''`, `+ 0`): through `threads_by_expiry` Postgres read every thread due
    /// (a bitmap of them, for each page's statement) rather than each id by the key.
    pub const EXPIRE: &str = "UPDATE threads SET status = 'expired' WHERE tenant_id = $1 \
        AND thread_id = ANY($2::bytea[]) AND status || '' = 'active' AND expires_at + 0 <= $3";

    /// [`WriteOp::RetireThreads`]: the tenant's threads among `$2` marked expired with an
    /// expiry at or before `$3`, and everything in them (every sub-statement sees the
    /// rows as they were before the statement, so each finds its rows through the
    /// deleted threads and tasks).
    /// Each table's rows are found by their key, with the ids as an array
    /// (`= ANY(ARRAY(…))`) of bytes, as every table keeps them (`packed.rs`): ids that
    /// compared otherwise than their keys (text in another collation, once) had Postgres
    /// read every event and outbox row of the tenant for each statement. The thread's
    /// conditions are written as in [`EXPIRE`].
    pub const RETIRE: &str = "WITH gone AS (DELETE FROM threads WHERE tenant_id = $1 \
        AND thread_id = ANY($2::bytea[]) AND status || '' = 'expired' AND expires_at + 0 <= $3 \
        RETURNING thread_id), \
        tasks_gone AS (DELETE FROM tasks WHERE tenant_id = $1 \
        AND context_id = ANY(ARRAY(SELECT thread_id FROM gone)) \
        RETURNING task_id), \
        events_gone AS (DELETE FROM task_events WHERE tenant_id = $1 \
        AND task_id = ANY(ARRAY(SELECT task_id FROM tasks_gone))), \
        owed_gone AS (DELETE FROM push_outbox WHERE tenant_id = $1 \
        AND task_id = ANY(ARRAY(SELECT task_id FROM tasks_gone))), \
        configs_gone AS (DELETE FROM push_configs WHERE tenant_id = $1 \
        AND task_id = ANY(ARRAY(SELECT task_id FROM tasks_gone))), \
        messages_gone AS (DELETE FROM messages WHERE tenant_id = $1 \
        AND thread_id = ANY(ARRAY(SELECT thread_id FROM gone))) \
        SELECT thread_id FROM gone";

    pub const NOTIFY: &str = "SELECT pg_notify($1, $2)";

    pub const PUT_CONFIG: &str = "INSERT INTO push_configs (tenant_id, task_id, config_id, \
        dialect, url, token, auth_scheme, auth_credentials, created_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
        ON CONFLICT (tenant_id, task_id, config_id) DO UPDATE SET dialect = excluded.dialect, \
        url = excluded.url, token = excluded.token, auth_scheme = excluded.auth_scheme, \
        auth_credentials = excluded.auth_credentials, created_at = excluded.created_at";

    pub const DELETE_CONFIG: &str =
        "DELETE FROM push_configs WHERE tenant_id = $1 AND task_id = $2 AND config_id = $3";

    pub const DELETE_OWED: &str =
        "DELETE FROM push_outbox WHERE tenant_id = $1 AND task_id = $2 AND config_id = $3";

    /// An owed delivery, the committing node's to make (`$9`: '' outside cluster mode).
    pub const ENQUEUE: &str = "INSERT INTO push_outbox (tenant_id, task_id, config_id, seq, \
        payload, created_at, attempts, next_attempt_at, node_id) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

    /// [`PUT_CONFIG`] for many configs at once (each key at most once).
    pub const PUT_CONFIGS: &str = "INSERT INTO push_configs (tenant_id, task_id, config_id, \
        dialect, url, token, auth_scheme, auth_credentials, created_at) \
        SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[], $4::text[], $5::text[], \
        $6::text[], $7::text[], $8::text[], $9::bigint[]) \
        ON CONFLICT (tenant_id, task_id, config_id) DO UPDATE SET dialect = excluded.dialect, \
        url = excluded.url, token = excluded.token, auth_scheme = excluded.auth_scheme, \
        auth_credentials = excluded.auth_credentials, created_at = excluded.created_at";

    /// [`ENQUEUE`] for many rows at once.
    pub const ENQUEUES: &str = "INSERT INTO push_outbox (tenant_id, task_id, config_id, seq, \
        payload, created_at, attempts, next_attempt_at, node_id) \
        SELECT u.*, $9 FROM unnest($1::text[], $2::bytea[], $3::text[], $4::bigint[], \
        $5::text[], $6::bigint[], $7::bigint[], $8::bigint[]) AS u";

    /// A cluster node writes a delivery's outcome only while the row is still its own
    /// (`$5`, `$7`): a node whose rows were taken over after its lease expired
    /// (`store::cluster::adopt_owed`) changes nothing of them when it wakes up. A server
    /// without cluster mode (`''`) owns every row.
    pub const DONE: &str = "DELETE FROM push_outbox WHERE tenant_id = $1 AND task_id = $2 \
        AND config_id = $3 AND seq = $4 AND ($5 = '' OR node_id = $5)";

    pub const RETRY: &str = "UPDATE push_outbox SET attempts = $5, next_attempt_at = $6 \
        WHERE tenant_id = $1 AND task_id = $2 AND config_id = $3 AND seq = $4 \
        AND ($7 = '' OR node_id = $7)";
}

/// [`Prepared`]: a field per statement, each named once with its text; `on` sends every
/// `prepare` before reading an answer (`try_join!`): one round trip.
macro_rules! prepared {
    ($($field:ident = $text:expr),+ $(,)?) => {
        /// Every statement of the write path, prepared on one connection.
        struct Prepared {
            $($field: Statement,)+
        }

        /// How many statements a writer connection prepares ([`Prepared`]).
        #[cfg(test)]
        pub(in crate::store) const PREPARED_STATEMENTS: usize = [$(stringify!($field)),+].len();

        impl Prepared {
            /// Prepares the set on `client`, the requests sent together: one round trip.
            async fn on(client: &Client) -> Result<Self, tokio_postgres::Error> {
                let ($($field,)+) = tokio::try_join!($(client.prepare($text)),+)?;
                Ok(Self { $($field),+ })
            }
        }
    };
}

prepared! {
    fence = sql::FENCE,
    write = sql::WRITE,
    claim = sql::CLAIM,
    append_history = sql::APPEND_HISTORY,
    settle = sql::SETTLE,
    forget = sql::FORGET,
    expire = sql::EXPIRE,
    retire = sql::RETIRE,
    notify = sql::NOTIFY,
    put_config = sql::PUT_CONFIG,
    put_configs = sql::PUT_CONFIGS,
    delete_config = sql::DELETE_CONFIG,
    delete_owed = sql::DELETE_OWED,
    enqueue = sql::ENQUEUE,
    enqueues = sql::ENQUEUES,
    done = sql::DONE,
    retry = sql::RETRY,
}

/// What a statement of a commit was, to tell why the commit failed.
#[derive(Clone, Copy)]
enum Step {
    Begin,
    Fence(i64),
    Write,
    Commit,
}

type Answer<'f> = BoxFuture<'f, Result<u64, tokio_postgres::Error>>;

/// Applies `rows` in one transaction on `writer`, in one round trip. With a `fence`
/// (cluster mode) the batch's tokens are checked first and its task events notified.
pub(in crate::store) async fn commit(
    writer: &Writer,
    rows: &Rows<'_>,
    fence: Option<&Fence>,
) -> Result<(), StoreError> {
    let client = &writer.client;
    let s = &writer.statements;
    // What the statements bind, first: they borrow it.
    let threads = ThreadColumns::of(rows.threads.iter().filter(|t| !t.first));
    let first_threads = ThreadColumns::of(rows.threads.iter().filter(|t| t.first));
    let messages = MessageColumns::of(&rows.messages);
    let tasks = TaskColumns::of(rows.tasks.iter().filter(|t| !t.first));
    let first_tasks = TaskColumns::of(rows.tasks.iter().filter(|t| t.first));
    let appends = AppendColumns::of(&rows.appends);
    let events = EventColumns::of(&rows.events);
    let claims = ClaimColumns::of(rows);
    // In a cluster, the events logged (for subscribers on other nodes) and the keys
    // claimed (for the other nodes' claim filters).
    let notifications: Vec<(&str, String)> = match fence {
        Some(fence) => {
            // The final events the task rows stand for are events like the others.
            let finals = rows
                .tasks
                .iter()
                .filter_map(|t| t.final_event_seq.map(|seq| (t.tenant_id, t.task_id, seq)));
            let events = cluster::event_payloads(
                rows.events
                    .iter()
                    .map(|e| (e.tenant_id, e.task_id, e.seq))
                    .chain(finals),
            );
            let claims = cluster::claim_payloads(
                fence.node_id(),
                rows.claims.iter().map(|(c, ..)| (c.tenant_id, c.idem_key)),
            );
            (events.into_iter().map(|p| (cluster::EVENTS_CHANNEL, p)))
                .chain(claims.into_iter().map(|p| (cluster::CLAIMS_CHANNEL, p)))
                .collect()
        }
        None => Vec::new(),
    };
    let node = match (fence, rows.fences.is_empty()) {
        (Some(fence), _) => fence.node_id(),
        (None, true) => "",
        (None, false) => {
            return Err(StoreError::Config(
                "a fenced batch on a store that is not in a cluster".into(),
            ));
        }
    };
    // The node whose delivery loop makes the deliveries this batch owes ('' outside
    // cluster mode: no node), and whose outcomes it writes.
    let owner: &str = fence.map_or("", |f| f.node_id());
    let push_keys: Vec<PushKey> = rows.push.iter().map(push_key).collect();
    // The common push rows — configs registered, deliveries owed and done — as one
    // statement per kind: configs before the rows owed to them, outcomes last (a row's
    // outcome never shares a commit with the row). A commit that also deletes a config
    // or reschedules a delivery writes its push rows one by one, in order.
    let by_kind = rows.push.iter().all(PushRow::is_common);
    let last_configs = match by_kind {
        true => last_configs(&rows.push),
        false => Vec::new(),
    };
    let configs = ConfigColumns::of(last_configs.iter().copied());
    let owed = match by_kind {
        true => OwedColumns::of(owed_rows(&rows.push)),
        false => OwedColumns::of(std::iter::empty()),
    };
    // The id arrays of the expirations and retirements, packed (`packed.rs`).
    let expiring: Vec<Vec<PgPacked>> = (rows.expirations.iter())
        .map(|e| e.thread_ids.iter().map(|id| PgPacked(id)).collect())
        .collect();
    let retiring: Vec<Vec<PgPacked>> = (rows.retirements.iter())
        .map(|r| r.thread_ids.iter().map(|id| PgPacked(id)).collect())
        .collect();
    let settled_keys: Vec<PgPacked> = rows.settled.iter().map(|s| PgPacked(s.key)).collect();

    let no_claims = ClaimColumns::default();
    let (first_claims, other_claims) = match claims.split_first() {
        Some(((window, set), rest)) => ((*window, set), rest),
        None => ((0, &no_claims), &[][..]),
    };
    let mut written: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(73);
    written.extend(first_claims.1.params(&first_claims.0));
    written.extend(threads.params());
    written.extend(messages.params());
    written.extend(tasks.params());
    written.extend(events.params());
    written.extend(first_threads.params());
    written.extend(first_tasks.params());
    let has_rows = !(rows.claims.is_empty()
        && rows.threads.is_empty()
        && rows.messages.is_empty()
        && rows.tasks.is_empty()
        && rows.events.is_empty());
    let alone = rows.fences.is_empty()
        && rows.appends.is_empty()
        && other_claims.is_empty()
        && rows.settled.is_empty()
        && rows.forget_before.is_empty()
        && rows.expirations.is_empty()
        && rows.push.is_empty()
        && rows.retirements.is_empty();
    if alone {
        // The common commit (a turn's rows): one statement, its own transaction.
        if !has_rows {
            return Ok(());
        }
        return client
            .execute_raw(&s.write, written)
            .await
            .map(drop)
            .map_err(|e| refusal(Step::Write, &e, fence));
    }

    let mut steps: Vec<(Step, Answer)> = Vec::with_capacity(8 + rows.push.len());
    steps.push((
        Step::Begin,
        Box::pin(async { client.batch_execute("BEGIN").await.map(|()| 0) }),
    ));
    for token in &rows.fences {
        steps.push((
            Step::Fence(*token),
            run(client, &s.fence, vec![&node, token]),
        ));
    }
    if has_rows {
        steps.push((Step::Write, run(client, &s.write, written)));
    }
    if !rows.appends.is_empty() {
        steps.push((
            Step::Write,
            run(client, &s.append_history, appends.params()),
        ));
    }
    for (window, claims) in other_claims {
        steps.push((Step::Write, run(client, &s.claim, claims.params(window))));
    }
    for (settled, key) in rows.settled.iter().zip(&settled_keys) {
        steps.push((
            Step::Write,
            run(
                client,
                &s.settle,
                vec![&settled.tenant_id, key, &settled.reply, &settled.reply_seq],
            ),
        ));
    }
    for before in &rows.forget_before {
        steps.push((Step::Write, run(client, &s.forget, vec![before])));
    }
    for (e, ids) in rows.expirations.iter().zip(&expiring) {
        let params: Vec<&(dyn ToSql + Sync)> = vec![&e.tenant, ids, &e.at];
        steps.push((Step::Write, run(client, &s.expire, params)));
    }
    // Delivered to the listening nodes only if the transaction commits.
    for (channel, payload) in &notifications {
        let params: Vec<&(dyn ToSql + Sync)> = vec![channel, payload];
        steps.push((Step::Write, run(client, &s.notify, params)));
    }
    if !configs.tenant.is_empty() {
        steps.push((Step::Write, run(client, &s.put_configs, configs.params())));
    }
    if !owed.tenant.is_empty() {
        let mut params = owed.params();
        params.push(&owner);
        steps.push((Step::Write, run(client, &s.enqueues, params)));
    }
    for (row, (tenant, task, config)) in rows.push.iter().zip(&push_keys) {
        if by_kind && matches!(row, PushRow::PutConfig(_) | PushRow::Enqueue(_)) {
            continue;
        }
        match row {
            PushRow::PutConfig(r) => {
                let params: Vec<&(dyn ToSql + Sync)> = vec![
                    &r.tenant_id,
                    task,
                    &r.config_id,
                    &r.dialect,
                    &r.url,
                    &r.token,
                    &r.auth_scheme,
                    &r.auth_credentials,
                    &r.created_at,
                ];
                steps.push((Step::Write, run(client, &s.put_config, params)));
            }
            PushRow::DeleteConfig { .. } => {
                steps.push((
                    Step::Write,
                    run(client, &s.delete_owed, vec![tenant, task, config]),
                ));
                steps.push((
                    Step::Write,
                    run(client, &s.delete_config, vec![tenant, task, config]),
                ));
            }
            PushRow::Enqueue(r) => {
                let params: Vec<&(dyn ToSql + Sync)> = vec![
                    &r.tenant_id,
                    task,
                    &r.config_id,
                    &r.seq,
                    &r.payload,
                    &r.created_at,
                    &r.attempts,
                    &r.next_attempt_at,
                    &owner,
                ];
                steps.push((Step::Write, run(client, &s.enqueue, params)));
            }
            PushRow::Done(key) => {
                steps.push((
                    Step::Write,
                    run(
                        client,
                        &s.done,
                        vec![tenant, task, config, &key.seq, &owner],
                    ),
                ));
            }
            PushRow::Retry {
                key,
                attempts,
                next_attempt_at,
            } => {
                let params: Vec<&(dyn ToSql + Sync)> = vec![
                    tenant,
                    task,
                    config,
                    &key.seq,
                    attempts,
                    next_attempt_at,
                    &owner,
                ];
                steps.push((Step::Write, run(client, &s.retry, params)));
            }
        }
    }
    for (r, ids) in rows.retirements.iter().zip(&retiring) {
        let params: Vec<&(dyn ToSql + Sync)> = vec![&r.tenant, ids, &r.at];
        steps.push((Step::Write, run(client, &s.retire, params)));
    }
    steps.push((
        Step::Commit,
        Box::pin(async { client.batch_execute("COMMIT").await.map(|()| 0) }),
    ));

    // Each request is sent as its future is first polled, in this order, and answered in
    // the same order: one round trip for all of them.
    let (kinds, answers): (Vec<Step>, Vec<Answer>) = steps.into_iter().unzip();
    let answers = futures_util::future::join_all(answers).await;
    for (step, answer) in kinds.into_iter().zip(answers) {
        // The first failure is the cause; the statements after it only found the
        // transaction aborted, and the COMMIT rolled it back.
        if let Err(e) = answer {
            return Err(refusal(step, &e, fence));
        }
    }
    Ok(())
}

/// One statement of a commit.
fn run<'f>(
    client: &'f Client,
    statement: &'f Statement,
    params: Vec<&'f (dyn ToSql + Sync)>,
) -> Answer<'f> {
    Box::pin(client.execute_raw(statement, params))
}

/// The key columns of a push row's statements: tenant, task (packed), config.
type PushKey<'a> = (&'a str, PgPacked<'a>, &'a str);

/// The key columns a push row's statements bind.
fn push_key<'a>(row: &PushRow<'a>) -> PushKey<'a> {
    match row {
        PushRow::DeleteConfig {
            tenant_id,
            task_id,
            config_id,
        } => (tenant_id, PgPacked(task_id), config_id),
        PushRow::Done(key) | PushRow::Retry { key, .. } => (
            key.tenant.as_str(),
            PgPacked(key.task_id.as_str()),
            key.config_id.as_str(),
        ),
        PushRow::PutConfig(r) => (r.tenant_id, PgPacked(r.task_id), r.config_id),
        PushRow::Enqueue(r) => (r.tenant_id, PgPacked(r.task_id), r.config_id),
    }
}

/// Why a commit failed, from its first failed statement.
fn refusal(step: Step, e: &tokio_postgres::Error, fence: Option<&Fence>) -> StoreError {
    let code = e.code().map(SqlState::code);
    match (step, code) {
        (Step::Fence(token), Some(FENCED)) => {
            // The node's current token moved: its lease was taken over just now.
            if let Some(fence) = fence
                && fence.token() == token
            {
                fence.mark_lost();
            }
            StoreError::Fenced
        }
        (_, Some(OWNED_ELSEWHERE)) => StoreError::Fenced,
        // A thread's first row met one another node wrote first (`WriteOp::InsertThread`).
        (_, Some(code))
            if fence.is_some()
                && code == SqlState::UNIQUE_VIOLATION.code()
                && e.as_db_error().and_then(|db| db.constraint()) == Some("threads_pkey") =>
        {
            StoreError::Fenced
        }
        (_, Some(CLAIMED)) => StoreError::Duplicate(
            e.as_db_error()
                .map_or_else(String::new, |db| db.message().to_owned()),
        ),
        _ => classify(e),
    }
}

/// A Postgres error in the store's terms: the database not being there (a closed
/// connection, a connection exception, a shutdown, too many connections) or a lost
/// serialization race is `Unavailable`, which the client may retry; the rest is a failed
/// query.
pub(in crate::store) fn classify(e: &tokio_postgres::Error) -> StoreError {
    let detail = e
        .as_db_error()
        .map_or_else(|| e.to_string(), |db| db.message().to_owned());
    match e.code() {
        None => StoreError::Unavailable(detail),
        Some(code) if unavailable(code) => StoreError::Unavailable(detail),
        Some(&SqlState::UNIQUE_VIOLATION | &SqlState::FOREIGN_KEY_VIOLATION) => {
            StoreError::Conflict(detail)
        }
        Some(_) => StoreError::Query(detail),
    }
}

/// The SQLSTATEs that mean "not now": connection exceptions (class 08), operator
/// intervention (57P01–57P03, 57014 excepted: a cancelled statement is not a database
/// going away), too many connections (53300), and serialization failures and deadlocks
/// (40001, 40P01), whose transaction was rolled back whole.
pub(in crate::store) fn unavailable(code: &SqlState) -> bool {
    let code = code.code();
    code.starts_with("08")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "53300" | "40001" | "40P01"
        )
}

/// A table's rows as one array per column, bound to its `unnest` statement in column
/// order: `$name` over rows of type `$row` (`of` takes any iteration of them, e.g. a
/// filtered one), each field `$field: Vec<$ty>` taken from a row `$r` by `$get`.
macro_rules! columns {
    ($name:ident<$lt:lifetime>, $row:ident, { $($field:ident: $ty:ty = |$r:ident| $get:expr),+ $(,)? }) => {
        struct $name<$lt> {
            $($field: Vec<$ty>,)+
        }

        impl<$lt> $name<$lt> {
            fn of<'r: $lt>(rows: impl IntoIterator<Item = &$lt $row<'r>> + Clone) -> Self {
                Self {
                    $($field: rows.clone().into_iter().map(|$r| $get).collect(),)+
                }
            }

            fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
                vec![$(&self.$field),+]
            }
        }
    };
}

/// The configs among a commit's push rows, each key once as its last write leaves it
/// (one `INSERT … ON CONFLICT` may not touch a row twice), in first-write order.
fn last_configs<'a>(rows: &'a [PushRow<'_>]) -> Vec<&'a NewPushConfig<'a>> {
    let mut last: Vec<&NewPushConfig> = Vec::new();
    let mut at: HashMap<(&str, &str, &str), usize> = HashMap::new();
    for row in rows {
        if let PushRow::PutConfig(c) = row {
            match at.entry((c.tenant_id, c.task_id, c.config_id)) {
                Entry::Occupied(i) => last[*i.get()] = c,
                Entry::Vacant(v) => {
                    v.insert(last.len());
                    last.push(c);
                }
            }
        }
    }
    last
}

/// The outbox rows among a commit's push rows.
fn owed_rows<'a, 'r>(
    rows: &'a [PushRow<'r>],
) -> impl Iterator<Item = &'a NewOutboxRow<'r>> + Clone {
    rows.iter().filter_map(|row| match row {
        PushRow::Enqueue(r) => Some(r),
        _ => None,
    })
}

/// The claims of a commit as column arrays, one set per window (in practice one: a
/// process has one `idempotency.window_secs`): the window is the statement's scalar.
#[derive(Default)]
struct ClaimColumns<'a> {
    tenant: Vec<&'a str>,
    key: Vec<PgPacked<'a>>,
    context: Vec<PgPacked<'a>>,
    task: Vec<PgPacked<'a>>,
    digest: Vec<PgPacked<'a>>,
    reply: Vec<Option<&'a str>>,
    created: Vec<i64>,
}

impl<'a> ClaimColumns<'a> {
    fn of(rows: &'a Rows<'_>) -> Vec<(i64, Self)> {
        let mut sets: Vec<(i64, Self)> = Vec::new();
        for (row, taken_over_before, _) in &rows.claims {
            let window = row.created_at.saturating_sub(*taken_over_before);
            let i = match sets.iter().position(|(w, _)| *w == window) {
                Some(i) => i,
                None => {
                    sets.push((window, Self::default()));
                    sets.len() - 1
                }
            };
            let set = &mut sets[i].1;
            set.tenant.push(row.tenant_id);
            set.key.push(PgPacked(row.idem_key));
            set.context.push(PgPacked(row.context_id));
            set.task.push(PgPacked(row.task_id));
            set.digest.push(PgPacked(row.digest));
            set.reply.push(row.reply.as_deref());
            set.created.push(row.created_at);
        }
        sets
    }

    fn params<'s>(&'s self, window: &'s i64) -> Vec<&'s (dyn ToSql + Sync)> {
        vec![
            &self.tenant,
            &self.key,
            &self.context,
            &self.task,
            &self.digest,
            &self.reply,
            &self.created,
            window,
        ]
    }
}

columns!(ConfigColumns<'a>, NewPushConfig, {
    tenant: &'a str = |r| r.tenant_id,
    task: PgPacked<'a> = |r| PgPacked(r.task_id),
    config: &'a str = |r| r.config_id,
    dialect: &'static str = |r| r.dialect,
    url: &'a str = |r| r.url,
    token: Option<&'a str> = |r| r.token,
    auth_scheme: Option<&'a str> = |r| r.auth_scheme,
    auth_credentials: Option<&'a str> = |r| r.auth_credentials,
    created: i64 = |r| r.created_at,
});

// The owner is the statement's scalar, after these.
columns!(OwedColumns<'a>, NewOutboxRow, {
    tenant: &'a str = |r| r.tenant_id,
    task: PgPacked<'a> = |r| PgPacked(r.task_id),
    config: &'a str = |r| r.config_id,
    seq: i64 = |r| r.seq,
    payload: &'a str = |r| r.payload.as_str(),
    created: i64 = |r| r.created_at,
    attempts: i64 = |r| r.attempts,
    next_attempt: i64 = |r| r.next_attempt_at,
});

columns!(ThreadColumns<'a>, NewThread, {
    tenant: &'a str = |r| r.tenant_id,
    thread: PgPacked<'a> = |r| PgPacked(r.thread_id),
    created: i64 = |r| r.created_at,
    updated: i64 = |r| r.updated_at,
    expires: i64 = |r| r.expires_at,
    status: &'a str = |r| r.status,
    context: &'a str = |r| r.conversation_context.as_str(),
    owner: Option<&'a str> = |r| r.owner_node,
});

columns!(MessageColumns<'a>, NewMessage, {
    tenant: &'a str = |r| r.tenant_id,
    thread: PgPacked<'a> = |r| PgPacked(r.thread_id),
    seq: i64 = |r| r.seq,
    message_id: Option<PgPacked<'a>> = |r| r.message_id.map(PgPacked),
    task_id: Option<PgPacked<'a>> = |r| r.task_id.map(PgPacked),
    role: &'a str = |r| r.role,
    author: Option<&'a str> = |r| r.author,
    content: &'a str = |r| r.content,
    parts: &'a str = |r| r.parts.as_str(),
    tool_calls: &'a str = |r| r.tool_calls.as_str(),
    metadata: Option<&'a str> = |r| r.metadata.as_deref(),
    created: i64 = |r| r.created_at,
    extensions: Option<&'a str> = |r| r.extensions.as_deref(),
    reference_task_ids: Option<&'a str> = |r| r.reference_task_ids.as_deref(),
});

columns!(TaskColumns<'a>, NewTask, {
    tenant: &'a str = |r| r.tenant_id,
    task: PgPacked<'a> = |r| PgPacked(r.task_id),
    context: PgPacked<'a> = |r| PgPacked(r.context_id),
    state: &'a str = |r| r.state,
    status_message: Option<&'a str> = |r| r.status_message.as_deref(),
    status_timestamp: i64 = |r| r.status_timestamp,
    artifacts: &'a str = |r| r.artifacts.as_str(),
    transitions: &'a str = |r| r.transitions.as_str(),
    metadata: Option<&'a str> = |r| r.metadata.as_deref(),
    created: i64 = |r| r.created_at,
    updated: i64 = |r| r.updated_at,
    history: &'a str = |r| r.history.as_str(),
    status_entry: Option<i64> = |r| r.status_entry,
    final_event_seq: Option<i64> = |r| r.final_event_seq,
});

columns!(AppendColumns<'a>, HistoryAppend, {
    tenant: &'a str = |r| r.tenant_id,
    task: PgPacked<'a> = |r| PgPacked(r.task_id),
    seqs: &'a str = |r| r.seqs.as_str(),
});

columns!(EventColumns<'a>, NewTaskEvent, {
    tenant: &'a str = |r| r.tenant_id,
    task: PgPacked<'a> = |r| PgPacked(r.task_id),
    seq: i64 = |r| r.seq,
    kind: &'a str = |r| r.kind,
    payload: &'a str = |r| r.payload.as_str(),
    created: i64 = |r| r.created_at,
    message_seq: Option<i64> = |r| r.message_seq,
});

/// The statements `writer`'s session has prepared, by text, with how often each ran.
#[cfg(test)]
pub(in crate::store) async fn prepared_statements(writer: &Writer) -> Vec<(String, i64)> {
    let rows = writer
        .client
        .query(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements \
             WHERE statement NOT LIKE '%pg_prepared_statements%' ORDER BY statement",
            &[],
        )
        .await
        .expect("pg_prepared_statements");
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_there_right_now_is_unavailable() {
        for code in [
            SqlState::CONNECTION_EXCEPTION,
            SqlState::CONNECTION_FAILURE,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
        ] {
            assert!(unavailable(&code), "{code:?}");
        }
        for code in [
            SqlState::UNIQUE_VIOLATION,
            SqlState::SYNTAX_ERROR,
            SqlState::QUERY_CANCELED,
            SqlState::UNDEFINED_TABLE,
        ] {
            assert!(!unavailable(&code), "{code:?}");
        }
    }
}
