//! The read queries of the store, stamped out per backend by `read_queries!` (invoked by
//! `store_impl!` in `queries.rs`, for the same reason: generic code over diesel-async
//! connection types is impractical).
//!
//! Reads batch per thread or page: one history query and one event-sequence query for all
//! the tasks involved, never one per task. Queries that do not depend on each other's
//! answers are written as one `independent!` group: on Postgres the group is sent in one
//! round trip (tokio-postgres pipelines the statements of one connection), on SQLite,
//! whose connection answers in-process, it runs one query after the other. A thread's
//! reload, the read a follow-up after eviction waits for, starts from the rows of
//! [`thread_queries!`], which each backend's `thread_rows` runs its own cheapest way.
//!
//! Why this file is a thousand lines: `read_queries!` is one `macro_rules!` stamped out
//! per backend, and a macro's body cannot be divided between files. What takes the reads
//! out of it is a statement catalogue like `memories/statements.rs` — one text per
//! statement and dialect, bound and run by each backend — table by table.

use crate::store::schema::tasks;

/// Generates the `reads` module for the connection type `super::StoreConn<'_>` (declared
/// by the backend; a shared reference to the connection on Postgres) of the backend
/// `super::StoreBackend` (declared by `store_impl!`); `$independent` names how a group of
/// independent queries runs: [`pipelined`] or [`sequential`].
macro_rules! read_queries {
    ($independent:ident) => {
        mod reads {
            use $crate::store::reads::$independent as independent;
            use std::collections::HashMap;

            use diesel::dsl::max;
            use diesel::{
                BoolExpressionMethods, ExpressionMethods, OptionalExtension, QueryDsl,
                SelectableHelper,
            };
            use diesel_async::RunQueryDsl;

            use $crate::domain::{
                ContextId, ListTasksQuery, Message, StreamEvent, TaskId, TaskPage,
                TenantId,
            };
            use $crate::store::packed::Id;
            use $crate::store::page_token::Cursor;
            use $crate::store::tables::messages::MessageRow;
            use $crate::store::tables::task_events::{EventRow, decode_event};
            use $crate::store::tables::tasks::TaskRow;
            use $crate::store::schema::{messages, push_configs, task_events, tasks, threads};
            use $crate::store::{StoreError, StoredTask, ThreadSnapshot};

            type Conn<'c> = super::StoreConn<'c>;

            use $crate::store::reads::limit;
            use $crate::store::tables::push_configs::PushConfigRow;

            /// The last event's sequence number of each of the tenant's tasks `$ids`.
            macro_rules! last_event_seqs_query {
                ($tenant:expr, $ids:expr) => {
                    task_events::table
                        .filter(task_events::tenant_id.eq($tenant.as_str()))
                        .filter(task_events::task_id.eq_any($ids.iter().map(|id| Id(id))))
                        .group_by(task_events::task_id)
                        .select((task_events::task_id, max(task_events::seq)))
                };
            }

            /// The push configs of the tenant's tasks `$ids`, by task, then in the order
            /// they were registered.
            macro_rules! push_configs_query {
                ($tenant:expr, $ids:expr) => {
                    push_configs::table
                        .filter(push_configs::tenant_id.eq($tenant.as_str()))
                        .filter(push_configs::task_id.eq_any($ids.iter().map(|id| Id(id))))
                        .order((
                            push_configs::task_id.asc(),
                            push_configs::created_at.asc(),
                            push_configs::config_id.asc(),
                        ))
                        .select(PushConfigRow::as_select())
                };
            }

            pub(super) async fn load_thread(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                thread_id: &ContextId,
                window: usize,
            ) -> Result<Option<ThreadSnapshot>, StoreError> {
                // The backend's own run of `thread_queries!` (postgres.rs, sqlite.rs).
                let $crate::store::reads::ThreadRows {
                    mut thread,
                    mut newest_first,
                    open,
                } = super::thread_rows(conn, tenant, thread_id, window).await?;
                let Some(thread) = thread.pop() else {
                    return Ok(None);
                };
                let thread = thread.into_record()?;

                // The newest message of the window is the newest of the thread; only an
                // empty window needs to ask for the maximum separately. (`as_slice`:
                // `RunQueryDsl::first` would shadow the slice method on the Vec itself.)
                let last_seq = match newest_first.as_slice().first() {
                    Some(newest) => newest.seq,
                    None if window > 0 => 0,
                    None => messages::table
                        .filter(messages::tenant_id.eq(tenant.as_str()))
                        .filter(messages::thread_id.eq(Id(thread_id.as_str())))
                        .select(max(messages::seq))
                        .first::<Option<i64>>(conn)
                        .await?
                        .unwrap_or(0),
                };
                // The open tasks' last events and push configs together; their histories
                // are mostly messages of the window: only entries older than it are read.
                let (last_seqs, push_configs) = if open.is_empty() {
                    (Vec::new(), Vec::new())
                } else {
                    let ids: Vec<&str> = open.iter().map(|r| r.task_id.as_str()).collect();
                    independent!(conn; c =>
                        last_event_seqs_query!(tenant, &ids).load(c),
                        push_configs_query!(tenant, &ids).load(c),
                    )?
                };
                let open_tasks = with_histories(
                    conn,
                    tenant,
                    open,
                    last_seqs.into_iter().collect(),
                    &newest_first,
                )
                .await?;
                newest_first.reverse();
                let recent = newest_first
                    .into_iter()
                    .map(MessageRow::into_record)
                    .collect::<Result<Vec<_>, _>>()?;
                let push_configs = push_configs
                    .into_iter()
                    .map(PushConfigRow::into_config)
                    .collect::<Result<Vec<_>, _>>()?;

                Ok(Some(ThreadSnapshot {
                    thread,
                    recent,
                    next_seq: last_seq + 1,
                    open_tasks,
                    push_configs,
                }))
            }

            pub(super) async fn task_context(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                task_id: &TaskId,
            ) -> Result<Option<ContextId>, StoreError> {
                let context: Option<String> = tasks::table
                    .filter(tasks::tenant_id.eq(tenant.as_str()))
                    .filter(tasks::task_id.eq(Id(task_id.as_str())))
                    .select(tasks::context_id)
                    .first(conn)
                    .await
                    .optional()?;
                context
                    .map(|c| {
                        ContextId::parse(c)
                            .map_err(|e| StoreError::Corrupt(format!("task context id: {e}")))
                    })
                    .transpose()
            }

            pub(super) async fn load_task(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                task_id: &TaskId,
            ) -> Result<Option<StoredTask>, StoreError> {
                // The row and the task's last event sequence in one statement, so both
                // are of one snapshot: read apart, a commit to the task between them (in a
                // cluster, another node's) paired the row with a later event, and a
                // follower starting after that event missed the ones between. The
                // history, which the row names, after them.
                let last_seq = task_events::table
                    .filter(task_events::tenant_id.eq(tasks::tenant_id))
                    .filter(task_events::task_id.eq(tasks::task_id))
                    .select(max(task_events::seq))
                    .single_value();
                let mut row: Vec<(TaskRow, Option<i64>)> = tasks::table
                    .filter(tasks::tenant_id.eq(tenant.as_str()))
                    .filter(tasks::task_id.eq(Id(task_id.as_str())))
                    .select((TaskRow::as_select(), last_seq))
                    .limit(1)
                    .load(conn)
                    .await?;
                let Some((row, last_seq)) = row.pop() else {
                    return Ok(None);
                };
                let last_seqs = HashMap::from([(row.task_id.clone(), last_seq)]);
                Ok(with_histories(conn, tenant, vec![row], last_seqs, &[])
                    .await?
                    .pop())
            }

            /// Tasks with their full history, given the sequence number of each one's last
            /// logged event (none: no event yet) and messages already read (`known`).
            async fn with_histories(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                rows: Vec<TaskRow>,
                last_seqs: HashMap<String, Option<i64>>,
                known: &[MessageRow],
            ) -> Result<Vec<StoredTask>, StoreError> {
                let mut histories = histories(conn, tenant, &rows, None, known).await?;
                rows.into_iter()
                    .map(|row| {
                        let last_event_seq =
                            row.last_event_seq(last_seqs.get(&row.task_id).copied().flatten());
                        let (history, status) =
                            histories.remove(&row.task_id).unwrap_or_default();
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
            async fn last_event_seqs(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                ids: &[&str],
            ) -> Result<HashMap<String, Option<i64>>, StoreError> {
                if ids.is_empty() {
                    return Ok(HashMap::new());
                }
                Ok(last_event_seqs_query!(tenant, ids)
                    .load::<(String, Option<i64>)>(conn)
                    .await?
                    .into_iter()
                    .collect())
            }

            /// The histories of the given tasks, each oldest first and cut to its newest
            /// `keep` entries (all without), and the entry each row names as its status
            /// message: the messages their rows refer to, taken from `known` (messages
            /// already read) or read together (one query per few thousand of them).
            async fn histories(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                rows: &[TaskRow],
                keep: Option<usize>,
                known: &[MessageRow],
            ) -> Result<HashMap<String, (Vec<Message>, Option<Message>)>, StoreError> {
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
                let mut read = Vec::new();
                for chunk in seqs.chunks(SEQS_PER_QUERY) {
                    read.extend(
                        messages::table
                            .filter(messages::tenant_id.eq(tenant.as_str()))
                            .filter(messages::thread_id.eq_any(threads.iter().map(|id| Id(id))))
                            .filter(messages::seq.eq_any(chunk))
                            .select(MessageRow::as_select())
                            .load::<MessageRow>(conn)
                            .await?,
                    );
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
                        // A message the row names but the thread lacks is left out, as a
                        // join would leave it.
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

            /// The tenant's tasks matching the query's filters (not its cursor).
            fn matching<'a>(
                tenant: &'a TenantId,
                query: &'a ListTasksQuery,
            ) -> tasks::BoxedQuery<'a, super::StoreBackend> {
                let mut q = tasks::table
                    .filter(tasks::tenant_id.eq(tenant.as_str()))
                    .into_boxed();
                if let Some(context_id) = &query.context_id {
                    q = q.filter(tasks::context_id.eq(Id(context_id.as_str())));
                }
                if let Some(state) = query.status {
                    q = q.filter(tasks::state.eq(state.as_str()));
                }
                if let Some(after) = query.status_timestamp_after {
                    q = q.filter(tasks::status_timestamp.ge(after.millis()));
                }
                q
            }

            pub(super) async fn list_tasks(
                conn: &mut Conn<'_>,
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
                let mut page = matching(tenant, query);
                if let Some(c) = &cursor {
                    page = page.filter(
                        tasks::status_timestamp
                            .lt(c.status_timestamp)
                            .or(tasks::status_timestamp
                                .eq(c.status_timestamp)
                                .and(tasks::task_id.lt(Id(c.task_id.as_str())))),
                    );
                }
                let page_size = query.page_size as usize;
                // One row more than asked tells whether another page follows.
                let (total, mut rows): (i64, Vec<TaskRow>) = independent!(conn; c =>
                    matching(tenant, query).count().get_result(c),
                    page.order((tasks::status_timestamp.desc(), tasks::task_id.desc()))
                        .limit(limit(page_size + 1))
                        .select(TaskRow::as_select())
                        .load(c),
                )?;
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
                let mut histories = histories(conn, tenant, &rows, keep, &[]).await?;
                let last_seqs = last_event_seqs(conn, tenant, &ids).await?;
                let tasks = rows
                    .into_iter()
                    .map(|row| {
                        let (history, status) =
                            histories.remove(&row.task_id).unwrap_or_default();
                        let last_seq =
                            row.last_event_seq(last_seqs.get(&row.task_id).copied().flatten());
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

            pub(super) async fn task_events(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                task_id: &TaskId,
                after_seq: i64,
                max_events: usize,
            ) -> Result<Vec<(i64, StreamEvent)>, StoreError> {
                // The task's row, and the log: the row is the task's final status update
                // when it says so (`TaskRow::final_event_seq`), the last of its events.
                // The row is read first (the two reads are two statements, each seeing
                // the commits done when it starts): a final event it shows was committed
                // with or after every earlier event, so the log read after it holds them
                // all. Read the other way round, a commit landing between the two gave
                // the final event without the ones it logged (a follower missed them).
                let (mut task, rows): (Vec<TaskRow>, Vec<EventRow>) = independent!(conn; c =>
                    tasks::table
                        .filter(tasks::tenant_id.eq(tenant.as_str()))
                        .filter(tasks::task_id.eq(Id(task_id.as_str())))
                        .filter(tasks::final_event_seq.gt(after_seq))
                        .select(TaskRow::as_select())
                        .limit(1)
                        .load(c),
                    task_events::table
                        .filter(task_events::tenant_id.eq(tenant.as_str()))
                        .filter(task_events::task_id.eq(Id(task_id.as_str())))
                        .filter(task_events::seq.gt(after_seq))
                        .order(task_events::seq.asc())
                        .limit(limit(max_events))
                        .select(EventRow::as_select())
                        .load(c),
                )?;
                let logged = rows.len();
                let mut events = rows
                    .into_iter()
                    .map(|row| Ok((row.seq, decode_event(&row.payload)?, row.message_seq)))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                if let Some(row) = task.pop().filter(|_| logged < max_events) {
                    events.push(final_event(conn, tenant, row).await?);
                }
                // Status updates whose message is a row of the task's thread: read together.
                let mut wanted: Vec<i64> = events.iter().filter_map(|e| e.2).collect();
                let thread = events.iter().find_map(|(_, event, seq)| match event {
                    StreamEvent::StatusUpdate { context_id, .. } if seq.is_some() => {
                        Some(context_id.clone())
                    }
                    _ => None,
                });
                if let Some(thread) = thread {
                    wanted.sort_unstable();
                    wanted.dedup();
                    let found: HashMap<i64, MessageRow> = messages::table
                        .filter(messages::tenant_id.eq(tenant.as_str()))
                        .filter(messages::thread_id.eq(Id(thread.as_str())))
                        .filter(messages::seq.eq_any(&wanted))
                        .select(MessageRow::as_select())
                        .load::<MessageRow>(conn)
                        .await?
                        .into_iter()
                        .map(|m| (m.seq, m))
                        .collect();
                    for (_, event, message_seq) in &mut events {
                        if let (StreamEvent::StatusUpdate { status, .. }, Some(seq)) =
                            (event, *message_seq)
                        {
                            let row = found.get(&seq).ok_or_else(|| {
                                StoreError::Corrupt(format!(
                                    "task {task_id}: an event names message {seq}, which its \
                                     thread lacks"
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

            /// The final status update a task's row stands for (`final_event_seq`), as
            /// `task_events` returns a logged one: with its message, which the row names
            /// among its history entries, already read.
            async fn final_event(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                row: TaskRow,
            ) -> Result<(i64, StreamEvent, Option<i64>), StoreError> {
                let seq = row.final_event_seq().unwrap_or(0);
                // The status entry alone (`keep` 0): the history is not part of the event.
                let (_, status) = histories(conn, tenant, std::slice::from_ref(&row), Some(0), &[])
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

            pub(super) async fn ping(conn: &mut Conn<'_>) -> Result<(), StoreError> {
                diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>("1"))
                    .get_result::<i32>(conn)
                    .await?;
                Ok(())
            }

            pub(super) async fn due_threads(
                conn: &mut Conn<'_>,
                status: $crate::store::ThreadStatus,
                now: $crate::domain::Timestamp,
                after: Option<&$crate::store::DueThread>,
                max: usize,
            ) -> Result<Vec<$crate::store::DueThread>, StoreError> {
                if max == 0 {
                    return Ok(Vec::new());
                }
                let mut due = threads::table
                    .filter(threads::status.eq(status.as_str()))
                    .filter(threads::expires_at.le(now.millis()))
                    .into_boxed::<super::StoreBackend>();
                if let Some(c) = after {
                    let at = c.expires_at.millis();
                    due = due.filter(
                        threads::expires_at
                            .gt(at)
                            .or(threads::expires_at.eq(at).and(
                                threads::tenant_id
                                    .gt(c.tenant.as_str())
                                    .or(threads::tenant_id
                                        .eq(c.tenant.as_str())
                                        .and(threads::thread_id.gt(Id(c.thread_id.as_str())))),
                            )),
                    );
                }
                let rows: Vec<(String, String, i64)> = due
                    .order((
                        threads::expires_at.asc(),
                        threads::tenant_id.asc(),
                        threads::thread_id.asc(),
                    ))
                    .limit(limit(max))
                    .select((threads::tenant_id, threads::thread_id, threads::expires_at))
                    .load(conn)
                    .await?;
                rows.into_iter()
                    .map(|(tenant_id, thread_id, expires_at)| {
                        let (tenant, thread_id) =
                            $crate::store::tables::threads::thread_key(tenant_id, thread_id)?;
                        Ok($crate::store::DueThread {
                            tenant,
                            thread_id,
                            expires_at: $crate::domain::Timestamp(expires_at),
                        })
                    })
                    .collect()
            }

            pub(super) async fn recent_threads(
                conn: &mut Conn<'_>,
                now: $crate::domain::Timestamp,
                max: usize,
            ) -> Result<Vec<(TenantId, ContextId)>, StoreError> {
                if max == 0 {
                    return Ok(Vec::new());
                }
                let rows: Vec<(String, String)> = threads::table
                    .filter(threads::status.eq($crate::store::ThreadStatus::Active.as_str()))
                    .filter(threads::expires_at.gt(now.millis()))
                    .order((
                        threads::expires_at.desc(),
                        threads::tenant_id.asc(),
                        threads::thread_id.asc(),
                    ))
                    .limit(limit(max))
                    .select((threads::tenant_id, threads::thread_id))
                    .load(conn)
                    .await?;
                rows.into_iter()
                    .map(|(tenant_id, thread_id)| {
                        $crate::store::tables::threads::thread_key(tenant_id, thread_id)
                    })
                    .collect()
            }

            pub(super) async fn push_configs(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                task_ids: &[TaskId],
            ) -> Result<Vec<$crate::domain::PushConfig>, StoreError> {
                if task_ids.is_empty() {
                    return Ok(Vec::new());
                }
                let ids: Vec<&str> = task_ids.iter().map(TaskId::as_str).collect();
                let rows: Vec<PushConfigRow> = push_configs_query!(tenant, &ids).load(conn).await?;
                rows.into_iter().map(PushConfigRow::into_config).collect()
            }

            /// The earliest owed delivery of each config whose time has come
            /// ([`due_deliveries_sql`]($crate::store::reads::due_deliveries_sql)).
            pub(super) async fn due_deliveries(
                conn: &mut Conn<'_>,
                now: $crate::domain::Timestamp,
                max: usize,
                share: $crate::store::reads::OutboxShare<'_>,
            ) -> Result<Vec<$crate::store::Delivery>, StoreError> {
                use $crate::store::reads::OutboxShare;
                use $crate::store::tables::push_outbox::DeliveryRow;
                if max == 0 {
                    return Ok(Vec::new());
                }
                let sql =
                    $crate::store::reads::due_deliveries_sql(now, max, super::CONFIGS_OF_DUE, share);
                let rows: Vec<DeliveryRow> = match share {
                    OutboxShare::Node(node) => {
                        diesel::sql_query(sql)
                            .bind::<diesel::sql_types::Text, _>(node)
                            .load(conn)
                            .await?
                    }
                    OutboxShare::All => {
                        diesel::sql_query(sql).load(conn).await?
                    }
                };
                rows.into_iter().map(DeliveryRow::into_delivery).collect()
            }

            pub(super) async fn claim(
                conn: &mut Conn<'_>,
                tenant: &TenantId,
                key: &str,
            ) -> Result<Option<$crate::store::Claim>, StoreError> {
                use $crate::store::tables::idempotency_keys::ClaimRow;
                use $crate::store::schema::idempotency_keys;
                let Some(row) = idempotency_keys::table
                    .filter(idempotency_keys::tenant_id.eq(tenant.as_str()))
                    .filter(idempotency_keys::idem_key.eq(Id(key)))
                    .select(ClaimRow::as_select())
                    .first(conn)
                    .await
                    .optional()?
                else {
                    return Ok(None);
                };
                // A reply that is a row of the claim's thread is read from there.
                let reply = match row.reply_seq {
                    Some(seq) => {
                        let message: Option<MessageRow> = messages::table
                            .filter(messages::tenant_id.eq(tenant.as_str()))
                            .filter(messages::thread_id.eq(Id(row.context_id.as_str())))
                            .filter(messages::seq.eq(seq))
                            .select(MessageRow::as_select())
                            .first(conn)
                            .await
                            .optional()?;
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

            pub(super) async fn claim_keys(
                conn: &mut Conn<'_>,
                from: $crate::domain::Timestamp,
                until: Option<$crate::domain::Timestamp>,
                limit: Option<usize>,
            ) -> Result<Vec<(TenantId, String, $crate::domain::Timestamp)>, StoreError> {
                use $crate::store::schema::idempotency_keys::dsl;
                let mut query = dsl::idempotency_keys
                    .filter(dsl::created_at.ge(from.millis()))
                    .select((dsl::tenant_id, dsl::idem_key, dsl::created_at))
                    .order(dsl::created_at.asc())
                    .into_boxed();
                if let Some(until) = until {
                    query = query.filter(dsl::created_at.lt(until.millis()));
                }
                if let Some(n) = limit {
                    query = query.limit(i64::try_from(n).unwrap_or(i64::MAX));
                }
                let rows: Vec<(String, String, i64)> = query.load(conn).await?;
                rows.into_iter()
                    .map(|(tenant, key, at)| {
                        let tenant = TenantId::from_store(tenant).map_err(|e| {
                            StoreError::Corrupt(format!("claim tenant: {e}"))
                        })?;
                        Ok((tenant, key, $crate::domain::Timestamp(at)))
                    })
                    .collect()
            }

            /// Every owed delivery with its config and next attempt, at most `max`.
            pub(super) async fn owed_deliveries(
                conn: &mut Conn<'_>,
                max: usize,
            ) -> Result<Vec<($crate::store::Delivery, $crate::domain::Timestamp)>, StoreError> {
                use $crate::store::tables::push_outbox::OwedRow;
                if max == 0 {
                    return Ok(Vec::new());
                }
                let sql = format!(
                    "SELECT c.tenant_id, c.task_id, c.config_id, c.dialect, c.url, c.token, \
                     c.auth_scheme, c.auth_credentials, c.created_at, o.seq, o.payload, \
                     o.created_at AS logged_at, o.attempts, o.next_attempt_at \
                     FROM push_outbox o JOIN push_configs c ON c.tenant_id = o.tenant_id \
                     AND c.task_id = o.task_id AND c.config_id = o.config_id LIMIT {}",
                    $crate::store::reads::limit(max)
                );
                let rows: Vec<OwedRow> = diesel::sql_query(sql).load(conn).await?;
                rows.into_iter().map(OwedRow::into_owed).collect()
            }

            pub(super) async fn outbox_depth(conn: &mut Conn<'_>) -> Result<u64, StoreError> {
                use $crate::store::schema::push_outbox;
                let n: i64 = push_outbox::table.count().get_result(conn).await?;
                Ok(u64::try_from(n).unwrap_or(0))
            }
        }
    };
}

pub(super) use read_queries;

/// The condition of a task row in a state it can still leave (not one of
/// [`TaskState::TERMINAL`](crate::domain::TaskState::TERMINAL)), as [`IsOpen`] writes it
/// after the column on Postgres; the partial index `tasks_open` has it in its `WHERE`.
const NOT_TERMINAL: &str = " NOT IN ('completed', 'canceled', 'failed', 'rejected')";

/// The same condition as SQLite's `tasks_open` has it: one comparison per state, each
/// written after the column. SQLite evaluates a partial index's `WHERE` on every write of
/// a row and codes `NOT IN` a list of more than two constants as a temporary b-tree built
/// for each run of the statement (migration `…_open_tasks_term_by_term`).
const NOT_TERMINAL_TERMS: [&str; 4] = [
    " <> 'completed'",
    " <> 'canceled'",
    " <> 'failed'",
    " <> 'rejected'",
];

/// A task row in a state it can still leave: `state` [`NOT_TERMINAL`] on Postgres,
/// [`NOT_TERMINAL_TERMS`] on SQLite, the states written into the SQL. A planner uses a
/// partial index only for a condition it can prove implies the index's `WHERE`, which a
/// bound parameter never does (Postgres' generic plans, SQLite's plans): written out, the
/// condition is the index's own, and a thread's reload reads its open tasks from
/// `tasks_open` — a few entries — rather than every task the thread ever had from
/// `tasks_by_context`. A type of its own (not `diesel::dsl::sql`) so that diesel keeps the
/// query prepared.
#[derive(Debug, Clone, Copy, diesel::query_builder::QueryId, diesel::expression::ValidGrouping)]
pub(super) struct IsOpen;

impl diesel::Expression for IsOpen {
    type SqlType = diesel::sql_types::Bool;
}

impl<QS> diesel::AppearsOnTable<QS> for IsOpen where tasks::state: diesel::AppearsOnTable<QS> {}

impl diesel::query_builder::QueryFragment<diesel::pg::Pg> for IsOpen {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> diesel::QueryResult<()> {
        let state: &'static tasks::state = &tasks::state;
        state.walk_ast(out.reborrow())?;
        out.push_sql(NOT_TERMINAL);
        Ok(())
    }
}

impl diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite> for IsOpen {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::sqlite::Sqlite>,
    ) -> diesel::QueryResult<()> {
        let state: &'static tasks::state = &tasks::state;
        out.push_sql("(");
        for (i, term) in NOT_TERMINAL_TERMS.iter().enumerate() {
            if i > 0 {
                out.push_sql(" AND ");
            }
            state.walk_ast(out.reborrow())?;
            out.push_sql(term);
        }
        out.push_sql(")");
        Ok(())
    }
}

/// Whether a task row is in a state it can still leave (see [`IsOpen`]).
pub(super) fn is_open() -> IsOpen {
    IsOpen
}

/// The SQL of `due_deliveries`: the earliest owed delivery of each config whose time has
/// come, at most `max`, oldest first, with its config. The owed rows are chosen first, by
/// themselves, so that the planner walks `push_outbox_due` in order and stops after
/// `max` of them, and each one's config is then looked up by its key (on Postgres,
/// `OFFSET 0` keeps the lookup from being merged into a join the planner may run by
/// reading every config). Joined in one query, Postgres misjudged the join's size on
/// tables without statistics and read both whole on every poll (76 ms a poll at 28 000
/// owed). The two numbers are formatted into the SQL (they are integers), so one text
/// serves both backends' placeholder styles; a node's id (`share`) is bound as `$1`.
///
/// On Postgres the owed rows come from the functions `a2a_due_deliveries` and
/// `a2a_owned_due_deliveries` (migration `…_due_plan`), which hold the plan that walks
/// the index in order whatever the statistics say: inline, a plan made from statistics
/// of a smaller outbox read every due row per poll. Each cluster node reads only the
/// rows it owns (`push_outbox.node_id`, through `push_outbox_owned`), and the earliest
/// row of a config may be another node's: the config's later rows then wait for that
/// node (a config's events stay in order while a thread's rows are shared between its
/// old and new owner).
pub(super) fn due_deliveries_sql(
    now: crate::domain::Timestamp,
    max: usize,
    configs: ConfigsOfDue,
    share: OutboxShare<'_>,
) -> String {
    let (now, max) = (now.millis(), limit(max));
    let (owed, configs) = match configs {
        ConfigsOfDue::EachByKey => (
            match share {
                OutboxShare::All => format!("a2a_due_deliveries({now}, {max})"),
                OutboxShare::Node(_) => format!("a2a_owned_due_deliveries({now}, {max}, $1)"),
            },
            "CROSS JOIN LATERAL (SELECT * FROM push_configs k WHERE k.tenant_id = o.tenant_id \
             AND k.task_id = o.task_id AND k.config_id = o.config_id OFFSET 0) c",
        ),
        ConfigsOfDue::Joined => (
            // (SQLite: one process, every row its own.)
            format!(
                "(SELECT * FROM push_outbox d WHERE d.next_attempt_at <= {now} \
                 AND NOT EXISTS (SELECT 1 FROM push_outbox p \
                     WHERE p.tenant_id = d.tenant_id AND p.task_id = d.task_id \
                     AND p.config_id = d.config_id AND p.seq < d.seq) \
                 ORDER BY d.next_attempt_at, d.seq LIMIT {max})"
            ),
            "JOIN push_configs c ON c.tenant_id = o.tenant_id \
             AND c.task_id = o.task_id AND c.config_id = o.config_id",
        ),
    };
    format!(
        "SELECT c.tenant_id, c.task_id, c.config_id, c.dialect, c.url, c.token, \
         c.auth_scheme, c.auth_credentials, c.created_at, o.seq, o.payload, \
         o.created_at AS logged_at, o.attempts \
         FROM {owed} o {configs} ORDER BY o.next_attempt_at, o.seq"
    )
}

/// Which owed rows a store's poll of the outbox reads ([`due_deliveries_sql`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OutboxShare<'a> {
    /// Every row: a server without cluster mode (on SQLite, which has no owner
    /// column; on Postgres, where such a server makes every row one of no node when it
    /// opens the store).
    All,
    /// The rows of this cluster node.
    Node(&'a str),
}

/// How [`due_deliveries_sql`] joins the owed rows it chose with their configs.
#[derive(Debug, Clone, Copy)]
pub(super) enum ConfigsOfDue {
    /// A lookup by key for each (Postgres: a `LATERAL` subquery the planner cannot merge).
    EachByKey,
    /// A plain join (SQLite, whose planner looks each up by its key anyway, and which has
    /// no `LATERAL`).
    Joined,
}

/// `usize` limits as SQL `LIMIT`s (saturating: nobody asks for 2^63 rows).
pub(super) fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `thread_queries!(tenant, thread_id, window)`: the three queries a thread's reload
/// starts from, not yet run — the thread's row (at most one), its newest `window`
/// messages newest first, and its open tasks oldest first — for either of diesel's APIs
/// to run: each backend's `thread_rows` runs them its own way (Postgres pipelined on the
/// async connection, SQLite on its synchronous connection in place).
macro_rules! thread_queries {
    ($tenant:expr, $thread_id:expr, $window:expr) => {{
        use diesel::{ExpressionMethods, QueryDsl, SelectableHelper};
        use $crate::store::packed::Id;
        use $crate::store::schema::{messages, tasks, threads};
        use $crate::store::tables::{messages::MessageRow, tasks::TaskRow, threads::ThreadRow};
        let (tenant, thread_id): (&str, &str) = ($tenant, $thread_id);
        (
            threads::table
                .filter(threads::tenant_id.eq(tenant))
                .filter(threads::thread_id.eq(Id(thread_id)))
                .select(ThreadRow::as_select())
                .limit(1),
            messages::table
                .filter(messages::tenant_id.eq(tenant))
                .filter(messages::thread_id.eq(Id(thread_id)))
                .order(messages::seq.desc())
                .limit($crate::store::reads::limit($window))
                .select(MessageRow::as_select()),
            tasks::table
                .filter(tasks::tenant_id.eq(tenant))
                .filter(tasks::context_id.eq(Id(thread_id)))
                .filter($crate::store::reads::is_open())
                .order((tasks::created_at.asc(), tasks::task_id.asc()))
                .select(TaskRow::as_select()),
        )
    }};
}

pub(super) use thread_queries;

/// What the three [`thread_queries!`] return.
pub(super) struct ThreadRows {
    /// The thread's row: none or one.
    pub thread: Vec<crate::store::tables::threads::ThreadRow>,
    /// Its newest messages, newest first.
    pub newest_first: Vec<crate::store::tables::messages::MessageRow>,
    /// Its open tasks, oldest first.
    pub open: Vec<crate::store::tables::tasks::TaskRow>,
}

/// `independent!(conn; c => a, b[, c])`: the queries `a`, `b` (and `c`), each run on `c`,
/// a handle on the connection `conn`, their futures all made before any is awaited and
/// polled together, so that their statements leave in one write and come back in one
/// round trip; a `Result` of the tuple of their answers, the first error otherwise. The
/// handle is a shared reference, which is how diesel-async's `AsyncPgConnection` lets
/// queries overlap (it pipelines them).
macro_rules! pipelined {
    ($conn:ident; $c:ident => $a:expr, $b:expr $(,)?) => {{
        let shared: &diesel_async::AsyncPgConnection = &**$conn;
        futures_util::future::try_join(
            {
                let $c = &mut &*shared;
                $a
            },
            {
                let $c = &mut &*shared;
                $b
            },
        )
        .await
    }};
    ($conn:ident; $c:ident => $a:expr, $b:expr, $d:expr $(,)?) => {{
        let shared: &diesel_async::AsyncPgConnection = &**$conn;
        futures_util::future::try_join3(
            {
                let $c = &mut &*shared;
                $a
            },
            {
                let $c = &mut &*shared;
                $b
            },
            {
                let $c = &mut &*shared;
                $d
            },
        )
        .await
    }};
}

/// `independent!(conn; c => a, b[, c])` for a connection that answers in-process: each
/// query in turn on `c` (the connection itself), the first error ending the group (the
/// same result as [`pipelined`]).
macro_rules! sequential {
    ($conn:ident; $c:ident => $($q:expr),+ $(,)?) => {
        async {
            let $c = &mut *$conn;
            Ok::<_, diesel::result::Error>(($($q.await?),+))
        }
        .await
    };
}

pub(super) use {pipelined, sequential};

#[cfg(test)]
mod tests {
    use crate::domain::TaskState;

    #[test]
    fn not_terminal_names_the_terminal_states() {
        let states: Vec<String> = TaskState::TERMINAL
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        assert_eq!(
            super::NOT_TERMINAL,
            format!(" NOT IN ({})", states.join(", "))
        );
        let terms: Vec<String> = states.iter().map(|s| format!(" <> {s}")).collect();
        assert_eq!(super::NOT_TERMINAL_TERMS.to_vec(), terms);
    }
}
