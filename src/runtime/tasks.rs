//! Reading and cancelling tasks, the [`Tasks`] handle: [`Tasks::get`] (from memory when
//! resident, with its long-poll [`Tasks::get_after`]), [`Tasks::list`] and
//! [`Tasks::cancel`].

use std::time::Duration;

use crate::cluster::forward;
use crate::domain::{ListTasksQuery, Task, TaskId, TaskPage, TenantId};
use crate::error::{Error, Result};

use super::Runtime;
use super::routing::Origin;
use super::thread::{CancelTask, GetResident, ThreadKey};

/// Reading and cancelling tasks ([`Runtime::tasks`]).
#[derive(Clone, Copy)]
pub struct Tasks<'a>(&'a Runtime);

impl Runtime {
    /// Reading and cancelling tasks.
    pub fn tasks(&self) -> Tasks<'_> {
        Tasks(self)
    }
}

impl Tasks<'_> {
    /// A task with at most `history_length` history messages (from memory when resident).
    pub async fn get(
        self,
        tenant: &TenantId,
        task_id: &TaskId,
        history_length: Option<u32>,
    ) -> Result<Task> {
        if let Some(context_id) = self.0.resident_context(tenant, task_id) {
            let key = ThreadKey {
                tenant: tenant.clone(),
                context_id,
            };
            let resident = self
                .0
                .registry
                .call(&key, || GetResident {
                    task_id: task_id.clone(),
                })
                .await?;
            if let Some(task) = resident {
                return Ok(task.view(history_length, true));
            }
        }
        let stored = self
            .0
            .store
            .load_task(tenant, task_id)
            .await?
            .ok_or_else(|| Error::TaskNotFound(task_id.clone()))?;
        Ok(stored.task.view(history_length, true))
    }

    /// A task once its generation exceeds `current` (or once it is terminal, or after
    /// `wait`, as it is then): `GetTask`'s long-poll.
    pub async fn get_after(
        self,
        tenant: &TenantId,
        task_id: &TaskId,
        history_length: Option<u32>,
        current: i64,
        wait: Duration,
    ) -> Result<Task> {
        use futures_util::StreamExt;
        let task = self.get(tenant, task_id, history_length).await?;
        if task.generation > current || task.status.state.is_terminal() {
            return Ok(task);
        }
        // Generation g + 1 is the task's event g: resume after event g - 1.
        let sub = self
            .0
            .subscriptions()
            .subscribe(tenant, task_id, Some(current - 1))
            .await?;
        let mut events = std::pin::pin!(self.0.subscriptions().events(sub));
        let _ = tokio::time::timeout(wait, events.next()).await;
        self.get(tenant, task_id, history_length).await
    }

    /// Tasks of the tenant, newest first.
    pub async fn list(self, tenant: &TenantId, query: &ListTasksQuery) -> Result<TaskPage> {
        self.0
            .store
            .list_tasks(tenant, query)
            .await?
            .ok_or_else(|| Error::invalid_params("pageToken: not a token this server issued"))
    }

    /// Cancels a task that is not terminal.
    pub async fn cancel(self, tenant: &TenantId, task_id: &TaskId) -> Result<Task> {
        self.cancel_as(tenant, task_id, Origin::Client).await
    }

    /// Serves a cancel another node forwarded to this one, the thread's owner.
    pub async fn serve_cancel(self, tenant: &TenantId, task_id: &TaskId) -> Result<Task> {
        self.cancel_as(tenant, task_id, Origin::Peer).await
    }

    async fn cancel_as(self, tenant: &TenantId, task_id: &TaskId, origin: Origin) -> Result<Task> {
        let call = || forward::CancelCall {
            tenant: tenant.clone(),
            task_id: task_id.clone(),
        };
        let cancel = || CancelTask {
            task_id: task_id.clone(),
        };
        self.0
            .on_task_thread(tenant, task_id, origin, "cancel", call, cancel)
            .await
    }
}
