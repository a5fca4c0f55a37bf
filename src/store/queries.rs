//! The `Store` implementation and its writes, written once and stamped out per backend.
//!
//! Code generic over diesel-async connection types drowns in trait bounds, so the query
//! bodies live in a macro that `postgres.rs` instantiates for `AsyncPgConnection` and
//! `sqlite.rs` for `SyncConnectionWrapper<SqliteConnection>`. Both get the very same SQL
//! (the schema uses only types the two backends share), and the compiler checks each
//! instantiation against its backend.
//!
//! The write path (`commit`) is the hot path of every request: one transaction, one bound
//! statement per op, nothing read back.
//!
//! `store_impl!` generates, for one backend, a `writes` module (this file), a `reads`
//! module (`reads.rs`) and the [`Store`](crate::store::Store) impl that acquires a pooled
//! connection and calls into them.

/// Implements [`Store`](crate::store::Store) for `$store`, a struct with a
/// `pool: Pool<$conn>` and an `acquire_timeout: Duration`; `$backend` is the diesel
/// backend of `$conn` and `$name` what [`Store::backend`](crate::store::Store::backend)
/// reports.
macro_rules! store_impl {
    ($store:ty, $conn:ty, $backend:ty, $name:literal) => {
        // Named here so that the generated modules can refer to them as `super::…`.
        type StoreConn = $conn;
        type StoreBackend = $backend;

        mod writes {
            use diesel::ExpressionMethods;
            use diesel::upsert::excluded;
            use diesel_async::{AsyncConnection, RunQueryDsl};

            use $crate::store::rows::{
                NewHistoryLink, NewMessage, NewTask, NewTaskEvent, NewThread,
            };
            use $crate::store::schema::{messages, task_events, task_history, tasks, threads};
            use $crate::store::{StoreError, WriteOp};

            type Conn = super::StoreConn;

            pub(super) async fn commit(conn: &mut Conn, ops: &[WriteOp]) -> Result<(), StoreError> {
                if ops.is_empty() {
                    return Ok(());
                }
                conn.transaction(async |conn| {
                    for op in ops {
                        apply(conn, op).await?;
                    }
                    Ok::<(), StoreError>(())
                })
                .await
            }

            async fn apply(conn: &mut Conn, op: &WriteOp) -> Result<(), StoreError> {
                match op {
                    WriteOp::UpsertThread(thread) => {
                        diesel::insert_into(threads::table)
                            .values(NewThread::new(thread)?)
                            .on_conflict((threads::tenant_id, threads::thread_id))
                            .do_update()
                            .set((
                                threads::updated_at.eq(excluded(threads::updated_at)),
                                threads::expires_at.eq(excluded(threads::expires_at)),
                                threads::status.eq(excluded(threads::status)),
                                threads::conversation_context
                                    .eq(excluded(threads::conversation_context)),
                            ))
                            .execute(conn)
                            .await?;
                    }
                    WriteOp::AppendMessage(message) => {
                        diesel::insert_into(messages::table)
                            .values(NewMessage::new(message)?)
                            .execute(conn)
                            .await?;
                    }
                    WriteOp::UpsertTask(task) => {
                        diesel::insert_into(tasks::table)
                            .values(NewTask::new(task)?)
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
                            .execute(conn)
                            .await?;
                    }
                    WriteOp::LinkTaskMessage {
                        tenant,
                        task_id,
                        position,
                        thread_id,
                        message_seq,
                    } => {
                        diesel::insert_into(task_history::table)
                            .values(NewHistoryLink {
                                tenant_id: tenant.as_str(),
                                task_id: task_id.as_str(),
                                position: *position,
                                thread_id: thread_id.as_str(),
                                message_seq: *message_seq,
                            })
                            .execute(conn)
                            .await?;
                    }
                    WriteOp::AppendTaskEvent {
                        tenant,
                        task_id,
                        seq,
                        event,
                        created_at,
                    } => {
                        diesel::insert_into(task_events::table)
                            .values(NewTaskEvent::new(
                                tenant,
                                task_id,
                                *seq,
                                event,
                                *created_at,
                            )?)
                            .execute(conn)
                            .await?;
                    }
                }
                Ok(())
            }
        }

        $crate::store::reads::read_queries!();

        impl $store {
            /// A pooled connection, or `Unavailable` once the acquire timeout has passed:
            /// it bounds both the wait for a free slot and connecting to a dead server.
            async fn conn(
                &self,
            ) -> Result<
                diesel_async::pooled_connection::deadpool::Object<StoreConn>,
                $crate::store::StoreError,
            > {
                match tokio::time::timeout(self.acquire_timeout, self.pool.get()).await {
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
                writes::commit(&mut *self.conn().await?, ops).await
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
        }
    };
}

pub(super) use store_impl;
