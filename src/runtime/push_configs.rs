//! A task's push configs: created and deleted through the actor of the task's thread (or
//! its owner in a cluster), so that its next event is queued for exactly the configs
//! committed before it; listed from the store.

use crate::cluster::forward;
use crate::domain::{PushConfig, PushSpec, TaskId, TenantId};
use crate::error::Result;

use super::Runtime;
use super::routing::Origin;
use super::thread::push::{AddPushConfig, RemovePushConfig};

/// A task's push notification configs ([`Runtime::push_configs`]).
#[derive(Clone, Copy)]
pub struct PushConfigs<'a>(&'a Runtime);

impl Runtime {
    /// A task's push notification configs.
    pub fn push_configs(&self) -> PushConfigs<'_> {
        PushConfigs(self)
    }
}

impl PushConfigs<'_> {
    /// Registers a push config for a task (replacing the task's config of the same id).
    pub async fn create(
        self,
        tenant: &TenantId,
        task_id: &TaskId,
        spec: PushSpec,
    ) -> Result<PushConfig> {
        self.create_as(tenant, task_id, spec, Origin::Client).await
    }

    /// Serves a push config another node forwarded to this one, the thread's owner.
    pub async fn serve_create(
        self,
        tenant: &TenantId,
        task_id: &TaskId,
        spec: PushSpec,
    ) -> Result<PushConfig> {
        self.create_as(tenant, task_id, spec, Origin::Peer).await
    }

    async fn create_as(
        self,
        tenant: &TenantId,
        task_id: &TaskId,
        spec: PushSpec,
        origin: Origin,
    ) -> Result<PushConfig> {
        let call = || forward::CreatePushCall {
            tenant: tenant.clone(),
            task_id: task_id.clone(),
            spec: spec.clone(),
        };
        let add = || AddPushConfig {
            task_id: task_id.clone(),
            spec: spec.clone(),
        };
        self.0
            .on_task_thread(tenant, task_id, origin, "push/create", call, add)
            .await
    }

    /// The push configs of a task, in the order they were registered.
    pub async fn list(self, tenant: &TenantId, task_id: &TaskId) -> Result<Vec<PushConfig>> {
        // The task must exist for this tenant; its configs are read from the store,
        // where every acknowledged change already is.
        self.0.task_thread(tenant, task_id).await?;
        Ok(self
            .0
            .store
            .push_configs(tenant, std::slice::from_ref(task_id))
            .await?)
    }

    /// Removes a push config of a task; one that does not exist is already removed.
    pub async fn delete(self, tenant: &TenantId, task_id: &TaskId, config_id: &str) -> Result<()> {
        self.delete_as(tenant, task_id, config_id, Origin::Client)
            .await
    }

    /// Serves a push config removal another node forwarded to this one.
    pub async fn serve_delete(
        self,
        tenant: &TenantId,
        task_id: &TaskId,
        config_id: &str,
    ) -> Result<()> {
        self.delete_as(tenant, task_id, config_id, Origin::Peer)
            .await
    }

    async fn delete_as(
        self,
        tenant: &TenantId,
        task_id: &TaskId,
        config_id: &str,
        origin: Origin,
    ) -> Result<()> {
        let call = || forward::DeletePushCall {
            tenant: tenant.clone(),
            task_id: task_id.clone(),
            config_id: config_id.to_owned(),
        };
        let remove = || RemovePushConfig {
            task_id: task_id.clone(),
            config_id: config_id.to_owned(),
        };
        self.0
            .on_task_thread(tenant, task_id, origin, "push/delete", call, remove)
            .await
    }
}
