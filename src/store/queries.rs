//! The `Store` implementation and its writes, written once and stamped out per backend.
//!
//! Code generic over diesel-async connection types drowns in trait bounds, so the query
//! bodies live in a macro that `postgres.rs` instantiates for `AsyncPgConnection` and
//! `sqlite.rs` for `SyncConnectionWrapper<SqliteConnection>`. Both get the very same SQL
//! (the schema uses only types the two backends share), and the compiler checks each
//! instantiation against its backend.
//!
//! The write path (`commit`) is the hot path of every request: one transaction with one
//! multi-row statement per table, nothing read back.
//!
//! `store_impl!` generates, for one backend, a `writes` module (this file), a `reads`
//! module (`reads.rs`) and the [`Store`](crate::store::Store) impl that acquires a pooled
//! connection and calls into them.

/// Inserts `$rows` with the statement `$stmt` built from `$chunk`: as multi-row
/// statements of at most `$size` rows (`batched`), or one statement per row
/// (`per_row`, for SQLite, where diesel-async cannot run diesel's SQLite batch insert and
/// a statement is an in-process call rather than a network round trip).
macro_rules! insert_rows {
    (batched, $size:expr, $conn:ident, $rows:expr, |$chunk:ident| $stmt:expr) => {
        for $chunk in $rows.chunks($size) {
            $stmt.execute($conn).await?;
        }
    };
    (per_row, $size:expr, $conn:ident, $rows:expr, |$chunk:ident| $stmt:expr) => {
        let _ = $size;
        for $chunk in $rows.iter() {
            $stmt.execute($conn).await?;
        }
    };
}

pub(super) use insert_rows;

/// Implements [`Store`](crate::store::Store) for `$store`, a struct with a
/// `pool: Pool<$conn>` for reads, a `writer: Pool<$conn>` for commits and an
/// `acquire_timeout: Duration`; `$backend` is the diesel
/// backend of `$conn` and `$name` what [`Store::backend`](crate::store::Store::backend)
/// reports; `$insert` is `batched` or `per_row` (see [`insert_rows`]).
macro_rules! store_impl {
    ($store:ty, $conn:ty, $backend:ty, $name:literal, $insert:ident) => {
        // Named here so that the generated modules can refer to them as `super::…`.
        type StoreConn = $conn;
        type StoreBackend = $backend;

        mod writes {
            use diesel::upsert::excluded;
            use diesel::{ExpressionMethods, QueryDsl};
            use diesel_async::{AsyncConnection, RunQueryDsl};

            use $crate::store::rows::{
                NewHistoryLink, NewMessage, NewTask, NewTaskEvent, NewThread,
            };
            use $crate::store::schema::{messages, task_events, task_history, tasks, threads};
            use $crate::store::{StoreError, ThreadStatus, WriteOp};

            type Conn = super::StoreConn;

            /// Rows per multi-row statement: far below Postgres' 65535 bind parameters
            /// for the widest table (12 columns).
            const CHUNK: usize = 500;

            /// Applies a batch as one statement per table: upserts deduplicated to the
            /// last write of each key (ops are full rows, so the last one is the state
            /// the batch leaves; Postgres also refuses `ON CONFLICT DO UPDATE` touching
            /// one row twice in a statement), appends in order. With no foreign keys,
            /// the order between tables does not matter; within a table it is kept.
            pub(super) async fn commit(conn: &mut Conn, ops: &[WriteOp]) -> Result<(), StoreError> {
                if ops.is_empty() {
                    return Ok(());
                }
                let mut thread_rows: Vec<NewThread<'_>> = Vec::new();
                let mut thread_at = std::collections::HashMap::new();
                let mut task_rows: Vec<NewTask<'_>> = Vec::new();
                let mut task_at = std::collections::HashMap::new();
                let mut message_rows = Vec::new();
                let mut link_rows = Vec::new();
                let mut event_rows = Vec::new();
                let mut expirations = Vec::new();
                for op in ops {
                    match op {
                        WriteOp::UpsertThread(thread) => {
                            let key = (thread.tenant.as_str(), thread.thread_id.as_str());
                            let row = NewThread::new(thread)?;
                            match thread_at.get(&key) {
                                Some(&i) => thread_rows[i] = row,
                                None => {
                                    thread_at.insert(key, thread_rows.len());
                                    thread_rows.push(row);
                                }
                            }
                        }
                        WriteOp::UpsertTask(task) => {
                            let key = (task.tenant.as_str(), task.id.as_str());
                            let row = NewTask::new(task)?;
                            match task_at.get(&key) {
                                Some(&i) => task_rows[i] = row,
                                None => {
                                    task_at.insert(key, task_rows.len());
                                    task_rows.push(row);
                                }
                            }
                        }
                        WriteOp::AppendMessage(message) => {
                            message_rows.push(NewMessage::new(message)?)
                        }
                        WriteOp::LinkTaskMessage {
                            tenant,
                            task_id,
                            position,
                            thread_id,
                            message_seq,
                        } => link_rows.push(NewHistoryLink {
                            tenant_id: tenant.as_str(),
                            task_id: task_id.as_str(),
                            position: *position,
                            thread_id: thread_id.as_str(),
                            message_seq: *message_seq,
                        }),
                        WriteOp::AppendTaskEvent {
                            tenant,
                            task_id,
                            seq,
                            event,
                            created_at,
                        } => event_rows.push(NewTaskEvent::new(
                            tenant,
                            task_id,
                            *seq,
                            event,
                            *created_at,
                        )?),
                        WriteOp::ExpireThreads {
                            tenant,
                            thread_ids,
                            at,
                        } => expirations.push((
                            tenant.as_str(),
                            thread_ids.iter().map(|id| id.as_str()).collect::<Vec<_>>(),
                            at.millis(),
                        )),
                    }
                }
                conn.transaction(async |conn| {
                    $crate::store::queries::insert_rows!(
                        $insert,
                        CHUNK,
                        conn,
                        thread_rows,
                        |rows| {
                            diesel::insert_into(threads::table)
                                .values(rows)
                                .on_conflict((threads::tenant_id, threads::thread_id))
                                .do_update()
                                .set((
                                    threads::updated_at.eq(excluded(threads::updated_at)),
                                    threads::expires_at.eq(excluded(threads::expires_at)),
                                    threads::status.eq(excluded(threads::status)),
                                    threads::conversation_context
                                        .eq(excluded(threads::conversation_context)),
                                ))
                        }
                    );
                    // Conditional, so that a thread continued since its expiry was read
                    // (its `expires_at` moved on) keeps its status.
                    for (tenant, ids, at) in &expirations {
                        for chunk in ids.chunks(CHUNK) {
                            diesel::update(
                                threads::table
                                    .filter(threads::tenant_id.eq(*tenant))
                                    .filter(threads::thread_id.eq_any(chunk))
                                    .filter(threads::status.eq(ThreadStatus::Active.as_str()))
                                    .filter(threads::expires_at.le(*at)),
                            )
                            .set(threads::status.eq(ThreadStatus::Expired.as_str()))
                            .execute(conn)
                            .await?;
                        }
                    }
                    $crate::store::queries::insert_rows!(
                        $insert,
                        CHUNK,
                        conn,
                        message_rows,
                        |rows| { diesel::insert_into(messages::table).values(rows) }
                    );
                    $crate::store::queries::insert_rows!($insert, CHUNK, conn, task_rows, |rows| {
                        diesel::insert_into(tasks::table)
                            .values(rows)
                            .on_conflict((tasks::tenant_id, tasks::task_id))
                            .do_update()
                            .set((
                                tasks::context_id.eq(excluded(tasks::context_id)),
                                tasks::state.eq(excluded(tasks::state)),
                                tasks::status_message.eq(excluded(tasks::status_message)),
                                tasks::status_timestamp.eq(excluded(tasks::status_timestamp)),
                                tasks::artifacts.eq(excluded(tasks::artifacts)),
                                tasks::transitions.eq(excluded(tasks::transitions)),
                                tasks::metadata.eq(excluded(tasks::metadata)),
                                tasks::updated_at.eq(excluded(tasks::updated_at)),
                            ))
                    });
                    $crate::store::queries::insert_rows!($insert, CHUNK, conn, link_rows, |rows| {
                        diesel::insert_into(task_history::table).values(rows)
                    });
                    $crate::store::queries::insert_rows!(
                        $insert,
                        CHUNK,
                        conn,
                        event_rows,
                        |rows| { diesel::insert_into(task_events::table).values(rows) }
                    );
                    Ok::<(), StoreError>(())
                })
                .await
            }
        }

        $crate::store::reads::read_queries!();

        impl $store {
            /// A connection for reads.
            async fn conn(
                &self,
            ) -> Result<
                diesel_async::pooled_connection::deadpool::Object<StoreConn>,
                $crate::store::StoreError,
            > {
                self.checkout(&self.pool).await
            }

            /// A connection for commits (see the backend's `writer`).
            async fn write_conn(
                &self,
            ) -> Result<
                diesel_async::pooled_connection::deadpool::Object<StoreConn>,
                $crate::store::StoreError,
            > {
                self.checkout(&self.writer).await
            }

            /// A pooled connection, or `Unavailable` once the acquire timeout has passed:
            /// it bounds both the wait for a free slot and connecting to a dead server.
            async fn checkout(
                &self,
                pool: &diesel_async::pooled_connection::deadpool::Pool<StoreConn>,
            ) -> Result<
                diesel_async::pooled_connection::deadpool::Object<StoreConn>,
                $crate::store::StoreError,
            > {
                match tokio::time::timeout(self.acquire_timeout, pool.get()).await {
                    Ok(Ok(conn)) => Ok(conn),
                    Ok(Err(e)) => Err($crate::store::StoreError::Unavailable(format!(
                        "{} pool: {e}",
                        $name
                    ))),
                    Err(_) => Err($crate::store::StoreError::Unavailable(format!(
                        "{} pool: no connection within {:?}",
                        $name, self.acquire_timeout
                    ))),
                }
            }
        }

        #[async_trait::async_trait]
        impl $crate::store::Store for $store {
            fn backend(&self) -> &'static str {
                $name
            }

            async fn commit(
                &self,
                ops: &[$crate::store::WriteOp],
            ) -> Result<(), $crate::store::StoreError> {
                writes::commit(&mut *self.write_conn().await?, ops).await
            }

            async fn load_thread(
                &self,
                tenant: &$crate::domain::TenantId,
                thread_id: &$crate::domain::ContextId,
                window: usize,
            ) -> Result<Option<$crate::store::ThreadSnapshot>, $crate::store::StoreError> {
                reads::load_thread(&mut *self.conn().await?, tenant, thread_id, window).await
            }

            async fn load_task(
                &self,
                tenant: &$crate::domain::TenantId,
                task_id: &$crate::domain::TaskId,
            ) -> Result<Option<$crate::store::StoredTask>, $crate::store::StoreError> {
                reads::load_task(&mut *self.conn().await?, tenant, task_id).await
            }

            async fn list_tasks(
                &self,
                tenant: &$crate::domain::TenantId,
                query: &$crate::domain::ListTasksQuery,
            ) -> Result<Option<$crate::domain::TaskPage>, $crate::store::StoreError> {
                reads::list_tasks(&mut *self.conn().await?, tenant, query).await
            }

            async fn task_events(
                &self,
                tenant: &$crate::domain::TenantId,
                task_id: &$crate::domain::TaskId,
                after_seq: i64,
                limit: usize,
            ) -> Result<Vec<(i64, $crate::domain::StreamEvent)>, $crate::store::StoreError> {
                reads::task_events(&mut *self.conn().await?, tenant, task_id, after_seq, limit)
                    .await
            }

            async fn ping(&self) -> Result<(), $crate::store::StoreError> {
                reads::ping(&mut *self.conn().await?).await
            }

            async fn census(
                &self,
                now: $crate::domain::Timestamp,
            ) -> Result<$crate::store::Census, $crate::store::StoreError> {
                reads::census(&mut *self.conn().await?, now).await
            }

            async fn due_threads(
                &self,
                now: $crate::domain::Timestamp,
                after: Option<&$crate::store::DueThread>,
                limit: usize,
            ) -> Result<Vec<$crate::store::DueThread>, $crate::store::StoreError> {
                reads::due_threads(&mut *self.conn().await?, now, after, limit).await
            }

            async fn recent_threads(
                &self,
                now: $crate::domain::Timestamp,
                limit: usize,
            ) -> Result<
                Vec<($crate::domain::TenantId, $crate::domain::ContextId)>,
                $crate::store::StoreError,
            > {
                reads::recent_threads(&mut *self.conn().await?, now, limit).await
            }
        }
    };
}

pub(super) use store_impl;
