//! The `Store` implementation's reads, written once and stamped out per backend.
//!
//! Code generic over diesel-async connection types drowns in trait bounds, so the read
//! bodies live in a macro (`reads.rs`) that `postgres.rs` instantiates for
//! `AsyncPgConnection` and `sqlite.rs` for `SyncConnectionWrapper<SqliteConnection>`.
//! Both get the very same SQL (the schema uses only types the two backends share), and
//! the compiler checks each instantiation against its backend.
//!
//! Writes are not here: their statements are plain functions in `writes.rs`, and each
//! backend runs them its own way (`commit_ops`).

/// Implements [`Store`](crate::store::Store) for `$store`, a struct with a
/// `pool: Pool<$conn>` for reads, an `acquire_timeout: Duration`, and an inherent
/// `async fn commit_ops(&self, &[WriteOp])`, `async fn analyze_grown_tables(&self)`
/// (see [`Store::refresh_statistics`](crate::store::Store::refresh_statistics)),
/// `fn inline_claim(&self, …)` (see
/// [`Store::claim_inline`](crate::store::Store::claim_inline)) and `fn blocking_writer(&self)` (see
/// [`Store::blocking_commit`](crate::store::Store::blocking_commit)) and
/// `fn point_read(&self, F) -> impl Future` (a reload of a thread or a task: SQLite runs
/// it on the calling thread, Postgres as it is) and
/// `async fn settle(&self, &mut $conn, Result<T, StoreError>)`, which gets the last word
/// on a read's failure (Postgres tells a lost connection from a failed query there);
/// `$backend` is the diesel backend of `$conn`,
/// `$name` what [`Store::backend`](crate::store::Store::backend) reports and
/// `$independent` how a group of independent reads runs (`pipelined` or `sequential`,
/// see `reads.rs`).
macro_rules! store_impl {
    ($store:ty, $conn:ty, $backend:ty, $name:literal, $independent:ident) => {
        // Named here so that the generated modules can refer to them as `super::…`.
        type StoreConn = $conn;
        type StoreBackend = $backend;

        $crate::store::reads::read_queries!($independent);

        impl $store {
            /// A connection for reads: each backend says which pool it comes from
            /// (`read_pool`) and what it is (`ReadObject`, a smart pointer to `StoreConn`).
            async fn conn(&self) -> Result<ReadObject, $crate::store::StoreError> {
                self.checkout(&self.read_pool()?).await
            }

            /// A pooled connection, or `Unavailable` once the acquire timeout has passed:
            /// it bounds both the wait for a free slot and connecting to a dead server.
            async fn checkout<M: deadpool::managed::Manager>(
                &self,
                pool: &deadpool::managed::Pool<M>,
            ) -> Result<deadpool::managed::Object<M>, $crate::store::StoreError>
            where
                M::Error: std::fmt::Display,
            {
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
                self.commit_ops(ops.iter()).await
            }

            async fn commit_group(
                &self,
                batches: &[&[$crate::store::WriteOp]],
            ) -> Result<(), $crate::store::StoreError> {
                self.commit_ops(batches.iter().flat_map(|b| b.iter())).await
            }

            fn blocking_commit(&self) -> Option<std::sync::Arc<dyn $crate::store::BlockingCommit>> {
                self.blocking_writer()
            }

            async fn load_thread(
                &self,
                tenant: &$crate::domain::TenantId,
                thread_id: &$crate::domain::ContextId,
                window: usize,
            ) -> Result<Option<$crate::store::ThreadSnapshot>, $crate::store::StoreError> {
                self.point_read(async {
                    let mut conn = self.conn().await?;
                    let result = reads::load_thread(&mut conn, tenant, thread_id, window).await;
                    self.settle(&mut conn, result).await
                })
                .await
            }

            async fn task_context(
                &self,
                tenant: &$crate::domain::TenantId,
                task_id: &$crate::domain::TaskId,
            ) -> Result<Option<$crate::domain::ContextId>, $crate::store::StoreError> {
                self.point_read(async {
                    let mut conn = self.conn().await?;
                    let result = reads::task_context(&mut conn, tenant, task_id).await;
                    self.settle(&mut conn, result).await
                })
                .await
            }

            async fn load_task(
                &self,
                tenant: &$crate::domain::TenantId,
                task_id: &$crate::domain::TaskId,
            ) -> Result<Option<$crate::store::StoredTask>, $crate::store::StoreError> {
                self.point_read(async {
                    let mut conn = self.conn().await?;
                    let result = reads::load_task(&mut conn, tenant, task_id).await;
                    self.settle(&mut conn, result).await
                })
                .await
            }

            async fn list_tasks(
                &self,
                tenant: &$crate::domain::TenantId,
                query: &$crate::domain::ListTasksQuery,
            ) -> Result<Option<$crate::domain::TaskPage>, $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = reads::list_tasks(&mut conn, tenant, query).await;
                self.settle(&mut conn, result).await
            }

            async fn task_events(
                &self,
                tenant: &$crate::domain::TenantId,
                task_id: &$crate::domain::TaskId,
                after_seq: i64,
                limit: usize,
            ) -> Result<Vec<(i64, $crate::domain::StreamEvent)>, $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = reads::task_events(&mut conn, tenant, task_id, after_seq, limit).await;
                self.settle(&mut conn, result).await
            }

            async fn ping(&self) -> Result<(), $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = reads::ping(&mut conn).await;
                self.settle(&mut conn, result).await
            }

            async fn census(
                &self,
                now: $crate::domain::Timestamp,
            ) -> Result<$crate::store::Census, $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = reads::census(&mut conn, now).await;
                self.settle(&mut conn, result).await
            }

            async fn refresh_statistics(
                &self,
            ) -> Result<Vec<&'static str>, $crate::store::StoreError> {
                self.analyze_grown_tables().await
            }

            async fn due_threads(
                &self,
                status: $crate::store::ThreadStatus,
                now: $crate::domain::Timestamp,
                after: Option<&$crate::store::DueThread>,
                limit: usize,
            ) -> Result<Vec<$crate::store::DueThread>, $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = reads::due_threads(&mut conn, status, now, after, limit).await;
                self.settle(&mut conn, result).await
            }

            async fn recent_threads(
                &self,
                now: $crate::domain::Timestamp,
                limit: usize,
            ) -> Result<
                Vec<($crate::domain::TenantId, $crate::domain::ContextId)>,
                $crate::store::StoreError,
            > {
                let mut conn = self.conn().await?;
                let result = reads::recent_threads(&mut conn, now, limit).await;
                self.settle(&mut conn, result).await
            }

            async fn push_configs(
                &self,
                tenant: &$crate::domain::TenantId,
                task_ids: &[$crate::domain::TaskId],
            ) -> Result<Vec<$crate::domain::PushConfig>, $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = reads::push_configs(&mut conn, tenant, task_ids).await;
                self.settle(&mut conn, result).await
            }

            async fn due_deliveries(
                &self,
                now: $crate::domain::Timestamp,
                limit: usize,
            ) -> Result<Vec<$crate::store::Delivery>, $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = reads::due_deliveries(&mut conn, now, limit).await;
                self.settle(&mut conn, result).await
            }

            async fn outbox_depth(&self) -> Result<u64, $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = reads::outbox_depth(&mut conn).await;
                self.settle(&mut conn, result).await
            }

            async fn claim(
                &self,
                tenant: &$crate::domain::TenantId,
                key: &str,
            ) -> Result<Option<$crate::store::Claim>, $crate::store::StoreError> {
                // A store that reads claims on the calling thread reads them so here too
                // (SQLite's claims are found through its own index, `sqlite_claims.rs`).
                if let Some(result) = self.inline_claim(tenant, key) {
                    return result;
                }
                let mut conn = self.conn().await?;
                let result = reads::claim(&mut conn, tenant, key).await;
                self.settle(&mut conn, result).await
            }

            async fn claim_keys(
                &self,
                from: $crate::domain::Timestamp,
                until: Option<$crate::domain::Timestamp>,
                limit: Option<usize>,
            ) -> Result<
                Vec<($crate::domain::TenantId, String, $crate::domain::Timestamp)>,
                $crate::store::StoreError,
            > {
                let mut conn = self.conn().await?;
                let result = reads::claim_keys(&mut conn, from, until, limit).await;
                self.settle(&mut conn, result).await
            }

            fn claim_inline(
                &self,
                tenant: &$crate::domain::TenantId,
                key: &str,
            ) -> Option<Result<Option<$crate::store::Claim>, $crate::store::StoreError>> {
                self.inline_claim(tenant, key)
            }
        }
    };
}

pub(super) use store_impl;
