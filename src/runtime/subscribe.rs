//! Following a task: [`Subscriptions::subscribe`] through its thread's actor (or, for a task of
//! another node, through its log), and [`Subscriptions::events`], the ordered event stream of a
//! subscription.

use futures_util::Stream;

use crate::domain::{TaskId, TenantId};
use crate::error::{Error, Result};

use super::routing::Located;
use super::thread::{self, Subscribe, Subscription};
use super::{Runtime, SeqEvent, stream};

/// Subscriptions to a task's events ([`Runtime::subscriptions`]).
#[derive(Clone, Copy)]
pub struct Subscriptions<'a>(&'a Runtime);

impl Runtime {
    /// Subscriptions to a task's events.
    pub fn subscriptions(&self) -> Subscriptions<'_> {
        Subscriptions(self)
    }
}

impl Subscriptions<'_> {
    /// Subscribes to a task; with `last_event_id`, resumes after that event. In a
    /// cluster, a task of another node is followed through its log here.
    pub async fn subscribe(
        self,
        tenant: &TenantId,
        task_id: &TaskId,
        last_event_id: Option<i64>,
    ) -> Result<Subscription> {
        if self.0.lifecycle().is_leaving() {
            return Err(thread::maintenance::shutting_down());
        }
        let key = self.0.task_thread(tenant, task_id).await?;
        let token = match self.0.locate(&key, false).await? {
            Located::Here(token) => token,
            Located::Elsewhere(_) => {
                return self
                    .subscribe_elsewhere(tenant, task_id, last_event_id)
                    .await;
            }
        };
        self.0
            .registry
            .call_new(&key, false, token, || Subscribe {
                task_id: task_id.clone(),
                last_event_id,
            })
            .await
    }

    /// A subscription to a task of another node: its durable state and log, woken by the
    /// notifications of that node's commits.
    async fn subscribe_elsewhere(
        self,
        tenant: &TenantId,
        task_id: &TaskId,
        last_event_id: Option<i64>,
    ) -> Result<Subscription> {
        let cluster = self
            .0
            .cluster
            .as_ref()
            .ok_or_else(|| Error::internal("a remote subscription without a cluster"))?;
        // Watching before reading: nothing logged after the read goes unnoticed.
        let watch = cluster.hub().watch(tenant, task_id);
        let stored = self
            .0
            .store
            .load_task(tenant, task_id)
            .await?
            .ok_or_else(|| Error::TaskNotFound(task_id.clone()))?;
        let state = stored.task.status.state;
        if state.is_terminal() {
            return match last_event_id {
                Some(after) => Ok(Subscription {
                    tenant: tenant.clone(),
                    task_id: Some(task_id.clone()),
                    first: None,
                    live: None,
                    after_seq: after,
                    until_terminal: true,
                }),
                None => Err(Error::UnsupportedOperation(format!(
                    "task {task_id} is {}; there is nothing left to subscribe to",
                    state.as_str()
                ))),
            };
        }
        let (first, after_seq) = match last_event_id {
            Some(after) => (None, after.min(stored.last_event_seq)),
            None => (
                Some((
                    stored.last_event_seq,
                    crate::domain::StreamEvent::Task { task: stored.task },
                )),
                stored.last_event_seq,
            ),
        };
        Ok(Subscription {
            tenant: tenant.clone(),
            task_id: Some(task_id.clone()),
            first,
            live: Some(thread::Live::Notified {
                watch,
                poll: cluster.stream_poll(),
            }),
            after_seq,
            until_terminal: true,
        })
    }

    /// The ordered events of a subscription.
    pub fn events(
        self,
        sub: Subscription,
    ) -> impl Stream<Item = Result<SeqEvent>> + Send + 'static {
        stream::events(
            self.0.store.clone(),
            sub,
            self.0.replay_batch,
            self.0.shared.leaving.subscribe(),
        )
    }
}
