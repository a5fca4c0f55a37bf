//! The reads of the store, written once for both backends over a [`Reader`]: the
//! statements come from the tables' modules (`tables/`), the backend runs them.
//!
//! Reads batch per thread or page: one history query and one event-sequence query for all
//! the tasks involved, never one per task. Statements that do not depend on each other's
//! answers are run together ([`Reader::two`], [`Reader::three`]): on Postgres in one
//! round trip (tokio-postgres pipelines the statements of one connection), on SQLite,
//! whose connection answers in-process, one after the other in one hop to the connection.

use std::collections::HashMap;
use std::future::Future;

use diesel::QueryableByName;
use diesel::pg::Pg;
use diesel::sqlite::Sqlite;

use crate::domain::{
    ContextId, ListTasksQuery, Message, PushConfig, StreamEvent, TaskId, TaskPage, TenantId,
    Timestamp,
};
use crate::store::ThreadStatus;
use crate::store::page_token::Cursor;
use crate::store::statement::{Dialect, Statement};
use crate::store::tables::Count;
use crate::store::tables::idempotency_keys::{self, ClaimRow, KeyRow};
use crate::store::tables::messages::{self, MaxSeq, MessageRow};
use crate::store::tables::push_configs::{self, PushConfigRow};
use crate::store::tables::push_outbox::{self, DeliveryRow, OutboxShare, OwedRow};
use crate::store::tables::task_events::{self, EventRow, LastSeqRow, decode_event};
use crate::store::tables::tasks::{self, ContextRow, TaskRow, TaskWithLastSeq};
use crate::store::tables::threads::{self, ThreadKeyRow, ThreadRow};
use crate::store::{Claim, Delivery, DueThread, StoreError, StoredTask, ThreadSnapshot};

/// A row a statement of either backend returns.
pub(in crate::store) trait Row:
    QueryableByName<Pg> + QueryableByName<Sqlite> + Send + 'static
{
}

impl<T: QueryableByName<Pg> + QueryableByName<Sqlite> + Send + 'static> Row for T {}

/// The rows of a [`Reader`]'s statements, or its error.
type Rows<T> = Result<T, StoreError>;

/// A read connection of a backend: runs statements of its dialect.
pub(in crate::store) trait Reader: Send {
    /// The dialect its statements are written in.
    const DIALECT: Dialect;

    /// The rows `st` returns.
    fn rows<R: Row>(&mut self, st: Statement) -> impl Future<Output = Rows<Vec<R>>> + Send;

    /// The rows of two statements that do not depend on each other.
    fn two<A: Row, B: Row>(
        &mut self,
        a: Statement,
        b: Statement,
    ) -> impl Future<Output = Rows<(Vec<A>, Vec<B>)>> + Send;

    /// The rows of three statements that do not depend on each other.
    fn three<A: Row, B: Row, C: Row>(
        &mut self,
        a: Statement,
        b: Statement,
        c: Statement,
    ) -> impl Future<Output = Rows<(Vec<A>, Vec<B>, Vec<C>)>> + Send;
}

/// A thread's row, its newest `window` messages and open tasks, the open tasks' last
/// events and push configs.
pub(in crate::store) async fn load_thread<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    thread_id: &ContextId,
    window: usize,
) -> Result<Option<ThreadSnapshot>, StoreError> {
    let d = C::DIALECT;
    let (tenant_id, id) = (tenant.as_str(), thread_id.as_str());
    let (mut thread, newest_first, open): (Vec<ThreadRow>, Vec<MessageRow>, Vec<TaskRow>) = c
        .three(
            threads::row(d, tenant_id, id),
            messages::newest(d, tenant_id, id, window),
            tasks::open_of_thread(d, tenant_id, id),
        )
        .await?;
    let Some(thread) = thread.pop() else {
        return Ok(None);
    };
    let thread = thread.into_record()?;

    // The newest message of the window is the newest of the thread; only an empty window
    // needs to ask for the maximum separately.
    let last_seq = match newest_first.first() {
        Some(newest) => newest.seq,
        None if window > 0 => 0,
        None => {
            let max: Vec<MaxSeq> = c.rows(messages::last_seq(d, tenant_id, id)).await?;
            max.into_iter().next().and_then(|m| m.seq).unwrap_or(0)
        }
    };
    // The open tasks' last events and push configs together; their histories are mostly
    // messages of the window: only entries older than it are read.
    let (last_seqs, push_configs): (Vec<LastSeqRow>, Vec<PushConfigRow>) = if open.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let ids: Vec<&str> = open.iter().map(|r| r.task_id.as_str()).collect();
        c.two(
            task_events::last_seqs(d, tenant_id, &ids),
            push_configs::of_tasks(d, tenant_id, &ids),
        )
        .await?
    };
    let last_seqs = last_seqs.into_iter().map(|r| (r.task_id, r.seq)).collect();
    let open_tasks = with_histories(c, tenant, open, last_seqs, &newest_first).await?;
    let push_configs = push_configs
        .into_iter()
        .map(PushConfigRow::into_config)
        .collect::<Result<Vec<_>, _>>()?;
    let mut recent = newest_first
        .into_iter()
        .map(MessageRow::into_record)
        .collect::<Result<Vec<_>, _>>()?;
    recent.reverse();
    Ok(Some(ThreadSnapshot {
        thread,
        recent,
        next_seq: last_seq + 1,
        open_tasks,
        push_configs,
    }))
}

pub(in crate::store) async fn task_context<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    task_id: &TaskId,
) -> Result<Option<ContextId>, StoreError> {
    let rows: Vec<ContextRow> = c
        .rows(tasks::context(
            C::DIALECT,
            tenant.as_str(),
            task_id.as_str(),
        ))
        .await?;
    rows.into_iter()
        .next()
        .map(ContextRow::into_context)
        .transpose()
}

pub(in crate::store) async fn load_task<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    task_id: &TaskId,
) -> Result<Option<StoredTask>, StoreError> {
    // The row and the task's last event sequence in one statement, so both are of one
    // snapshot: read apart, a commit to the task between them (in a cluster, another
    // node's) paired the row with a later event, and a follower starting after that event
    // missed the ones between. The history, which the row names, after them.
    let mut row: Vec<TaskWithLastSeq> = c
        .rows(tasks::with_last_seq(
            C::DIALECT,
            tenant.as_str(),
            task_id.as_str(),
        ))
        .await?;
    let Some(TaskWithLastSeq { task, last_seq }) = row.pop() else {
        return Ok(None);
    };
    let last_seqs = HashMap::from([(task.task_id.clone(), last_seq)]);
    Ok(with_histories(c, tenant, vec![task], last_seqs, &[])
        .await?
        .pop())
}

/// Tasks with their full history, given the sequence number of each one's last logged
/// event (none: no event yet) and messages already read (`known`).
async fn with_histories<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    rows: Vec<TaskRow>,
    last_seqs: HashMap<String, Option<i64>>,
    known: &[MessageRow],
) -> Result<Vec<StoredTask>, StoreError> {
    let mut histories = histories(c, tenant, &rows, None, known).await?;
    rows.into_iter()
        .map(|row| {
            let last_event_seq = row.last_event_seq(last_seqs.get(&row.task_id).copied().flatten());
            let (history, status) = histories.remove(&row.task_id).unwrap_or_default();
            let mut task = row.into_task(history, status, true)?;
            task.generation = last_event_seq + 1;
            Ok(StoredTask {
                task,
                last_event_seq,
            })
        })
        .collect()
}

/// The sequence number of each task's last logged event (none: no event yet).
async fn last_event_seqs<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    ids: &[&str],
) -> Result<HashMap<String, Option<i64>>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<LastSeqRow> = c
        .rows(task_events::last_seqs(C::DIALECT, tenant.as_str(), ids))
        .await?;
    Ok(rows.into_iter().map(|r| (r.task_id, r.seq)).collect())
}

/// A task's history and the entry its row names as its status message.
type History = (Vec<Message>, Option<Message>);

/// The histories of the given tasks, each oldest first and cut to its newest `keep`
/// entries (all without), and the entry each row names as its status message: the
/// messages their rows refer to, taken from `known` (messages already read) or read
/// together (one query per few thousand of them).
async fn histories<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    rows: &[TaskRow],
    keep: Option<usize>,
    known: &[MessageRow],
) -> Result<HashMap<String, History>, StoreError> {
    /// `seq`s per query: well under SQLite's 32 766 bound parameters.
    const SEQS_PER_QUERY: usize = 4096;
    // By (thread, seq): the messages already read, then those read here.
    let mut found: HashMap<(&str, i64), &MessageRow> = known
        .iter()
        .filter(|m| m.tenant_id == tenant.as_str())
        .map(|m| ((m.thread_id.as_str(), m.seq), m))
        .collect();
    let mut wanted = Vec::with_capacity(rows.len());
    let mut threads: Vec<&str> = Vec::new();
    let mut seqs: Vec<i64> = Vec::new();
    for row in rows {
        let list = row.history_seqs()?;
        let first_kept = keep.map_or(0, |k| list.len().saturating_sub(k));
        let status = row.status_entry().filter(|e| *e < list.len());
        if first_kept == list.len() && status.is_none() {
            continue;
        }
        let thread = row.context_id();
        for &seq in list[first_kept..].iter().chain(status.map(|e| &list[e])) {
            if !found.contains_key(&(thread, seq)) {
                if !threads.contains(&thread) {
                    threads.push(thread);
                }
                seqs.push(seq);
            }
        }
        wanted.push((row, list, first_kept, status));
    }
    if wanted.is_empty() {
        return Ok(HashMap::new());
    }
    seqs.sort_unstable();
    seqs.dedup();
    let mut read: Vec<MessageRow> = Vec::new();
    for chunk in seqs.chunks(SEQS_PER_QUERY) {
        let st = messages::of_threads(C::DIALECT, tenant.as_str(), &threads, chunk);
        read.extend(c.rows::<MessageRow>(st).await?);
    }
    for m in &read {
        found.entry((m.thread_id.as_str(), m.seq)).or_insert(m);
    }
    let mut by_task = HashMap::new();
    for (row, list, first_kept, status_entry) in wanted {
        let task_id = TaskId::parse(row.task_id.as_str())
            .map_err(|e| StoreError::Corrupt(format!("history task id: {e}")))?;
        let thread = row.context_id();
        let mut history = Vec::with_capacity(list.len() - first_kept);
        let mut status = None;
        for (entry, seq) in list.into_iter().enumerate() {
            let is_status = status_entry == Some(entry);
            if entry < first_kept && !is_status {
                continue;
            }
            // A message the row names but the thread lacks is left out, as a join would
            // leave it.
            if let Some(message) = found.get(&(thread, seq)) {
                let message = message.to_history_message(&task_id)?;
                match (entry >= first_kept, is_status) {
                    (true, true) => {
                        status = Some(message.clone());
                        history.push(message);
                    }
                    (true, false) => history.push(message),
                    (false, _) => status = Some(message),
                }
            }
        }
        by_task.insert(row.task_id.clone(), (history, status));
    }
    Ok(by_task)
}

pub(in crate::store) async fn list_tasks<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    query: &ListTasksQuery,
) -> Result<Option<TaskPage>, StoreError> {
    // An empty token is what clients send for "first page" as often as none.
    let cursor = match query.page_token.as_deref() {
        None | Some("") => None,
        Some(token) => match Cursor::decode(token) {
            Some(cursor) => Some(cursor),
            None => return Ok(None),
        },
    };
    let page_size = query.page_size as usize;
    let d = C::DIALECT;
    // One row more than asked tells whether another page follows.
    let (total, mut rows): (Vec<Count>, Vec<TaskRow>) = c
        .two(
            tasks::count(d, tenant.as_str(), query),
            tasks::page(d, tenant.as_str(), query, cursor.as_ref(), page_size + 1),
        )
        .await?;
    let total = total.first().map_or(0, |t| t.n);
    let next_page_token = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last()
            .map(|last| {
                Cursor {
                    status_timestamp: last.status_timestamp,
                    task_id: last.task_id.clone(),
                }
                .encode()
            })
            .unwrap_or_default()
    } else {
        String::new()
    };

    let ids: Vec<&str> = rows.iter().map(|r| r.task_id.as_str()).collect();
    let keep = query.history_length.map(|n| n as usize);
    let mut histories = histories(c, tenant, &rows, keep, &[]).await?;
    let last_seqs = last_event_seqs(c, tenant, &ids).await?;
    let tasks = rows
        .into_iter()
        .map(|row| {
            let (history, status) = histories.remove(&row.task_id).unwrap_or_default();
            let last_seq = row.last_event_seq(last_seqs.get(&row.task_id).copied().flatten());
            let mut task = row.into_task(history, status, query.include_artifacts)?;
            task.generation = last_seq + 1;
            Ok(task)
        })
        .collect::<Result<Vec<_>, StoreError>>()?;

    Ok(Some(TaskPage {
        tasks,
        next_page_token,
        page_size: query.page_size,
        total_size: u64::try_from(total).unwrap_or(0),
    }))
}

pub(in crate::store) async fn task_events<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    task_id: &TaskId,
    after_seq: i64,
    max_events: usize,
) -> Result<Vec<(i64, StreamEvent)>, StoreError> {
    // The task's row, and the log: the row is the task's final status update when it says
    // so (`TaskRow::final_event_seq`), the last of its events. The row is read first (the
    // two reads are two statements, each seeing the commits done when it starts): a final
    // event it shows was committed with or after every earlier event, so the log read
    // after it holds them all. Read the other way round, a commit landing between the two
    // gave the final event without the ones it logged (a follower missed them).
    let d = C::DIALECT;
    let (mut task, rows): (Vec<TaskRow>, Vec<EventRow>) = c
        .two(
            tasks::final_after(d, tenant.as_str(), task_id.as_str(), after_seq),
            task_events::after(d, tenant.as_str(), task_id.as_str(), after_seq, max_events),
        )
        .await?;
    let logged = rows.len();
    let mut events = rows
        .into_iter()
        .map(|row| Ok((row.seq, decode_event(&row.payload)?, row.message_seq)))
        .collect::<Result<Vec<_>, StoreError>>()?;
    if let Some(row) = task.pop().filter(|_| logged < max_events) {
        events.push(final_event(c, tenant, row).await?);
    }
    // Status updates whose message is a row of the task's thread: read together.
    let mut wanted: Vec<i64> = events.iter().filter_map(|e| e.2).collect();
    let thread = events.iter().find_map(|(_, event, seq)| match event {
        StreamEvent::StatusUpdate { context_id, .. } if seq.is_some() => Some(context_id.clone()),
        _ => None,
    });
    if let Some(thread) = thread {
        wanted.sort_unstable();
        wanted.dedup();
        let st = messages::of_threads(d, tenant.as_str(), &[thread.as_str()], &wanted);
        let found: HashMap<i64, MessageRow> = c
            .rows::<MessageRow>(st)
            .await?
            .into_iter()
            .map(|m| (m.seq, m))
            .collect();
        for (_, event, message_seq) in &mut events {
            if let (StreamEvent::StatusUpdate { status, .. }, Some(seq)) = (event, *message_seq) {
                let row = found.get(&seq).ok_or_else(|| {
                    StoreError::Corrupt(format!(
                        "task {task_id}: an event names message {seq}, which its thread lacks"
                    ))
                })?;
                status.message = Some(row.to_history_message(task_id)?);
            }
        }
    }
    Ok(events
        .into_iter()
        .map(|(seq, event, _)| (seq, event))
        .collect())
}

/// The final status update a task's row stands for (`final_event_seq`), as `task_events`
/// returns a logged one: with its message, which the row names among its history
/// entries, already read.
async fn final_event<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    row: TaskRow,
) -> Result<(i64, StreamEvent, Option<i64>), StoreError> {
    let seq = row.final_event_seq().unwrap_or(0);
    // The status entry alone (`keep` 0): the history is not part of the event.
    let (_, status) = histories(c, tenant, std::slice::from_ref(&row), Some(0), &[])
        .await?
        .remove(&row.task_id)
        .unwrap_or_default();
    let task = row.into_task(Vec::new(), status, false)?;
    let event = StreamEvent::StatusUpdate {
        task_id: task.id,
        context_id: task.context_id,
        status: task.status,
        metadata: None,
    };
    Ok((seq, event, None))
}

/// The answer of a database that answers at all.
#[derive(QueryableByName)]
struct One {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    #[allow(dead_code)]
    one: i32,
}

pub(in crate::store) async fn ping<C: Reader>(c: &mut C) -> Result<(), StoreError> {
    c.rows::<One>(Statement::new(C::DIALECT, "SELECT 1 AS one"))
        .await?;
    Ok(())
}

pub(in crate::store) async fn due_threads<C: Reader>(
    c: &mut C,
    status: ThreadStatus,
    now: Timestamp,
    after: Option<&DueThread>,
    max: usize,
) -> Result<Vec<DueThread>, StoreError> {
    if max == 0 {
        return Ok(Vec::new());
    }
    let rows: Vec<ThreadKeyRow> = c
        .rows(threads::due(C::DIALECT, status, now, after, max))
        .await?;
    rows.into_iter().map(ThreadKeyRow::into_due).collect()
}

pub(in crate::store) async fn recent_threads<C: Reader>(
    c: &mut C,
    now: Timestamp,
    max: usize,
) -> Result<Vec<(TenantId, ContextId)>, StoreError> {
    if max == 0 {
        return Ok(Vec::new());
    }
    let rows: Vec<ThreadKeyRow> = c.rows(threads::recent(C::DIALECT, now, max)).await?;
    rows.into_iter().map(ThreadKeyRow::into_key).collect()
}

pub(in crate::store) async fn push_configs<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    task_ids: &[TaskId],
) -> Result<Vec<PushConfig>, StoreError> {
    if task_ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = task_ids.iter().map(TaskId::as_str).collect();
    let rows: Vec<PushConfigRow> = c
        .rows(push_configs::of_tasks(C::DIALECT, tenant.as_str(), &ids))
        .await?;
    rows.into_iter().map(PushConfigRow::into_config).collect()
}

/// The earliest owed delivery of each config whose time has come ([`push_outbox::due`]).
pub(in crate::store) async fn due_deliveries<C: Reader>(
    c: &mut C,
    now: Timestamp,
    max: usize,
    share: OutboxShare<'_>,
) -> Result<Vec<Delivery>, StoreError> {
    if max == 0 {
        return Ok(Vec::new());
    }
    let rows: Vec<DeliveryRow> = c
        .rows(push_outbox::due(C::DIALECT, now, max, share))
        .await?;
    rows.into_iter().map(DeliveryRow::into_delivery).collect()
}

pub(in crate::store) async fn claim<C: Reader>(
    c: &mut C,
    tenant: &TenantId,
    key: &str,
) -> Result<Option<Claim>, StoreError> {
    let rows: Vec<ClaimRow> = c
        .rows(idempotency_keys::claim(C::DIALECT, tenant.as_str(), key))
        .await?;
    let Some(row) = rows.into_iter().next() else {
        return Ok(None);
    };
    // A reply that is a row of the claim's thread is read from there.
    let reply = match row.reply_seq {
        Some(seq) => {
            let st = messages::at(C::DIALECT, tenant.as_str(), &row.context_id, seq);
            let message: Option<MessageRow> = c.rows(st).await?.into_iter().next();
            let message = message.ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "claim {key:?} names message {seq}, which its thread lacks"
                ))
            })?;
            Some(message.to_message(None)?)
        }
        None => None,
    };
    let mut claim = row.into_claim()?;
    if reply.is_some() {
        claim.reply = reply;
    }
    Ok(Some(claim))
}

pub(in crate::store) async fn claim_keys<C: Reader>(
    c: &mut C,
    from: Timestamp,
    until: Option<Timestamp>,
    max: Option<usize>,
) -> Result<Vec<(TenantId, String, Timestamp)>, StoreError> {
    let rows: Vec<KeyRow> = c
        .rows(idempotency_keys::keys(C::DIALECT, from, until, max))
        .await?;
    rows.into_iter().map(KeyRow::into_key).collect()
}

/// Every owed delivery with its config and next attempt, at most `max`.
pub(in crate::store) async fn owed_deliveries<C: Reader>(
    c: &mut C,
    max: usize,
) -> Result<Vec<(Delivery, Timestamp)>, StoreError> {
    if max == 0 {
        return Ok(Vec::new());
    }
    let rows: Vec<OwedRow> = c.rows(push_outbox::owed(C::DIALECT, max)).await?;
    rows.into_iter().map(OwedRow::into_owed).collect()
}

pub(in crate::store) async fn outbox_depth<C: Reader>(c: &mut C) -> Result<u64, StoreError> {
    let rows: Vec<Count> = c.rows(push_outbox::depth(C::DIALECT)).await?;
    Ok(rows.first().map_or(0, |n| u64::try_from(n.n).unwrap_or(0)))
}
