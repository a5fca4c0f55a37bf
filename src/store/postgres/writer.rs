//! The Postgres write path: a group commit is one round trip of statements that were
//! prepared once, when their connection was opened.
//!
//! Every statement has one text whatever the batch holds — a table's rows go as one array
//! per column through `unnest`, so ten messages are the same statement as one — and each
//! writer connection prepares the whole set once ([`Prepared`]); a commit only binds and
//! executes. The five tables every turn writes are one statement ([`sql::write`]); a
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

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use futures_util::future::BoxFuture;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};

use crate::store::StoreError;
use crate::store::cluster;
use crate::store::fence::Fence;
use crate::store::packed::PgPacked;
use crate::store::writes::{PushRow, Rows};

use super::statements::{
    self as sql, AppendColumns, ClaimColumns, ConfigColumns, EventColumns, MessageColumns,
    OwedColumns, TaskColumns, ThreadColumns, last_configs, owed_rows,
};

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
    write = sql::write(),
    claim = sql::claim(),
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
