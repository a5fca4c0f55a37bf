//! The `Store` implementation, stamped out per backend: each method takes the backend's
//! connection for it, runs the read of `reads.rs` on it, and lets the backend settle the
//! outcome. The SQL is in the tables' modules (`tables/`); nothing here names a statement.
//!
//! Writes are not here: their rows are collected in `writes.rs`, and each backend runs
//! them its own way (`commit_ops`).

/// Implements [`Store`](crate::store::Store) for `$store`, a struct with these inherent
/// methods:
///
/// - `async fn conn(&self)` and `async fn point_conn(&self)`: a connection for a read, the
///   latter for a point read (a reload of a thread or a task, a claim, a task's events):
///   a smart pointer each backend chooses, which `$lend!(conn)` turns into the
///   `&mut` [`Reader`](crate::store::reads::Reader) the reads of `reads.rs` take;
/// - `async fn settle(&self, &mut <that pointer>, Result<T, StoreError>)`, which gets the
///   last word on a read's failure (Postgres tells a lost connection from a failed query
///   there);
/// - `fn point_read(&self, F) -> impl Future`: how a point read runs (SQLite on the
///   calling thread, Postgres as it is);
/// - `async fn commit_ops(&self, &[WriteOp])`, `async fn analyze_grown_tables(&self)`
///   (see [`Store::refresh_statistics`](crate::store::Store::refresh_statistics)),
///   `async fn count_census(&self, now)` (see [`Store::census`](crate::store::Store::census)),
///   `fn inline_claim(&self, …)` (see
///   [`Store::claim_inline`](crate::store::Store::claim_inline)) and
///   `fn blocking_writer(&self)` (see
///   [`Store::blocking_commit`](crate::store::Store::blocking_commit)).
///
/// `$name` is what [`Store::backend`](crate::store::Store::backend) reports.
macro_rules! store_impl {
    ($store:ty, $name:literal, $lend:ident) => {
        #[async_trait::async_trait]
        impl $crate::store::Store for $store {
            fn backend(&self) -> &'static str {
                $name
            }

            fn silence(&self) -> Option<&std::sync::Arc<$crate::store::Silence>> {
                self.silence_of()
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
                    let mut conn = self.point_conn().await?;
                    let result = self
                        .bounded($crate::store::reads::load_thread(
                            $lend!(conn),
                            tenant,
                            thread_id,
                            window,
                        ))
                        .await;
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
                    let mut conn = self.point_conn().await?;
                    let result = self
                        .bounded($crate::store::reads::task_context(
                            $lend!(conn),
                            tenant,
                            task_id,
                        ))
                        .await;
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
                    let mut conn = self.point_conn().await?;
                    let result = self
                        .bounded($crate::store::reads::load_task(
                            $lend!(conn),
                            tenant,
                            task_id,
                        ))
                        .await;
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
                let result = self
                    .bounded($crate::store::reads::list_tasks(
                        $lend!(conn),
                        tenant,
                        query,
                    ))
                    .await;
                self.settle(&mut conn, result).await
            }

            async fn task_events(
                &self,
                tenant: &$crate::domain::TenantId,
                task_id: &$crate::domain::TaskId,
                after_seq: i64,
                limit: usize,
            ) -> Result<Vec<(i64, $crate::domain::StreamEvent)>, $crate::store::StoreError> {
                let mut conn = self.point_conn().await?;
                let result = self
                    .bounded($crate::store::reads::task_events(
                        $lend!(conn),
                        tenant,
                        task_id,
                        after_seq,
                        limit,
                    ))
                    .await;
                self.settle(&mut conn, result).await
            }

            async fn ping(&self) -> Result<(), $crate::store::StoreError> {
                let mut conn = self.probe_conn().await?;
                let result = self.bounded($crate::store::reads::ping($lend!(conn))).await;
                self.settle(&mut conn, result).await
            }

            async fn census(
                &self,
                now: $crate::domain::Timestamp,
            ) -> Result<$crate::store::Census, $crate::store::StoreError> {
                self.count_census(now).await
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
                let result = self
                    .bounded($crate::store::reads::due_threads(
                        $lend!(conn),
                        status,
                        now,
                        after,
                        limit,
                    ))
                    .await;
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
                let result = self
                    .bounded($crate::store::reads::recent_threads(
                        $lend!(conn),
                        now,
                        limit,
                    ))
                    .await;
                self.settle(&mut conn, result).await
            }

            async fn push_configs(
                &self,
                tenant: &$crate::domain::TenantId,
                task_ids: &[$crate::domain::TaskId],
            ) -> Result<Vec<$crate::domain::PushConfig>, $crate::store::StoreError> {
                let mut conn = self.point_conn().await?;
                let result = self
                    .bounded($crate::store::reads::push_configs(
                        $lend!(conn),
                        tenant,
                        task_ids,
                    ))
                    .await;
                self.settle(&mut conn, result).await
            }

            async fn due_deliveries(
                &self,
                now: $crate::domain::Timestamp,
                limit: usize,
            ) -> Result<Vec<$crate::store::Delivery>, $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = self
                    .bounded($crate::store::reads::due_deliveries(
                        $lend!(conn),
                        now,
                        limit,
                        self.outbox_share(),
                    ))
                    .await;
                self.settle(&mut conn, result).await
            }

            async fn owed_deliveries(
                &self,
                limit: usize,
            ) -> Result<
                Vec<($crate::store::Delivery, $crate::domain::Timestamp)>,
                $crate::store::StoreError,
            > {
                let mut conn = self.conn().await?;
                let result = self
                    .bounded($crate::store::reads::owed_deliveries($lend!(conn), limit))
                    .await;
                self.settle(&mut conn, result).await
            }

            async fn outbox_depth(&self) -> Result<u64, $crate::store::StoreError> {
                let mut conn = self.conn().await?;
                let result = self
                    .bounded($crate::store::reads::outbox_depth($lend!(conn)))
                    .await;
                self.settle(&mut conn, result).await
            }

            async fn claim(
                &self,
                tenant: &$crate::domain::TenantId,
                key: &str,
            ) -> Result<Option<$crate::store::Claim>, $crate::store::StoreError> {
                // A store that reads claims on the calling thread reads them so here too
                // (SQLite's claims are found through its own index, `sqlite/claims.rs`).
                if let Some(result) = self.inline_claim(tenant, key) {
                    return result;
                }
                let mut conn = self.point_conn().await?;
                let result = self
                    .bounded($crate::store::reads::claim($lend!(conn), tenant, key))
                    .await;
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
                let result = self
                    .bounded($crate::store::reads::claim_keys(
                        $lend!(conn),
                        from,
                        until,
                        limit,
                    ))
                    .await;
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

/// A connection of `pool`, or `Unavailable` once `timeout` has passed: it bounds both the
/// wait for a free one and connecting to a dead server; `store` names the backend.
pub(super) async fn checkout<M: deadpool::managed::Manager>(
    pool: &deadpool::managed::Pool<M>,
    timeout: std::time::Duration,
    store: &str,
) -> Result<deadpool::managed::Object<M>, super::StoreError>
where
    M::Error: std::fmt::Display,
{
    match tokio::time::timeout(timeout, pool.get()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(super::StoreError::Unavailable(format!("{store} pool: {e}"))),
        Err(_) => Err(super::StoreError::Unavailable(format!(
            "{store} pool: no connection within {timeout:?}"
        ))),
    }
}
