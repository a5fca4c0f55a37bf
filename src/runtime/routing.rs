//! Where a request goes: the thread of its task or `contextId` ([`Runtime::route`],
//! [`Runtime::task_thread`]) and, in cluster mode, the node that serves that thread
//! ([`Runtime::locate`]) — called as the owner when it is another ([`Runtime::forward`]).

use crate::domain::{ContextId, SendMessage, TaskId, TenantId};
use crate::error::{Error, Result};

use super::Runtime;
use super::thread::{self, ThreadKey};

/// Where a thread is served, as far as a request is concerned.
pub(super) enum Located {
    /// Here; in cluster mode, under this fencing token (when an actor must be created).
    Here(Option<i64>),
    /// On another node of the cluster.
    Elsewhere(crate::store::cluster::Owner),
}

/// Who sent a request: a client, or another node of the cluster that forwarded it to
/// this one as the thread's owner (which must not forward it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Client,
    Peer,
}

impl Runtime {
    /// Decides which thread a message goes to: its task's thread, its `contextId`, or a
    /// new thread (then `fresh` is true). A `contextId` that disagrees with the task's is
    /// invalid.
    pub(super) async fn route(
        &self,
        tenant: &TenantId,
        mut cmd: SendMessage,
    ) -> Result<(ThreadKey, SendMessage, bool)> {
        let named_context = cmd.message.context_id.clone();
        let mut fresh = false;
        let context_id = match cmd.message.task_id.clone() {
            Some(task_id) => match self.task_thread(tenant, &task_id).await {
                Ok(key) => {
                    if let Some(given) = &named_context
                        && *given != key.context_id
                    {
                        return Err(Error::invalid_params(format!(
                            "message.contextId: {given} does not match the context of task {task_id}"
                        )));
                    }
                    key.context_id
                }
                Err(Error::TaskNotFound(_)) if cmd.create_missing_task => named_context
                    .unwrap_or_else(|| {
                        fresh = true;
                        ContextId::generate()
                    }),
                Err(e) => return Err(e),
            },
            None => named_context.unwrap_or_else(|| {
                fresh = true;
                ContextId::generate()
            }),
        };
        cmd.message.context_id = Some(context_id.clone());
        Ok((
            ThreadKey {
                tenant: tenant.clone(),
                context_id,
            },
            cmd,
            fresh,
        ))
    }

    /// The thread of an existing task (`TaskNotFound` for unknown and foreign ids).
    pub(super) async fn task_thread(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
    ) -> Result<ThreadKey> {
        let context_id = match self.resident_context(tenant, task_id) {
            Some(c) => c,
            None => self
                .store
                .task_context(tenant, task_id)
                .await?
                .ok_or_else(|| Error::TaskNotFound(task_id.clone()))?,
        };
        Ok(ThreadKey {
            tenant: tenant.clone(),
            context_id,
        })
    }

    pub(super) fn resident_context(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
    ) -> Option<ContextId> {
        self.shared
            .tasks
            .get(&(tenant.clone(), task_id.clone()))
            .map(|c| c.clone())
    }

    /// Where the thread is served: here (with the token an actor created for it commits
    /// under), or on the node that owns it.
    pub(super) async fn locate(&self, key: &ThreadKey, fresh: bool) -> Result<Located> {
        let Some(cluster) = &self.cluster else {
            return Ok(Located::Here(None));
        };
        if fresh {
            // A thread this node has just minted: nobody else knows it; its owner row
            // rides with its first batch.
            if !cluster.holds_lease() {
                return Err(crate::cluster::not_holding_lease());
            }
            return Ok(Located::Here(Some(cluster.token())));
        }
        if self.is_resident(&key.tenant, &key.context_id) {
            return Ok(Located::Here(None));
        }
        if self.lifecycle().is_draining() {
            // Placing a thread may claim it for this node, which takes nothing on now.
            return Err(thread::maintenance::shutting_down());
        }
        Ok(match cluster.place(&key.tenant, &key.context_id).await? {
            crate::cluster::Placement::Local { token } => Located::Here(Some(token)),
            crate::cluster::Placement::Remote(owner) => Located::Elsewhere(owner),
        })
    }

    /// The thread a send names (its task's, or its `contextId`), without routing it: a
    /// new conversation names none.
    async fn named_thread(
        &self,
        tenant: &TenantId,
        cmd: &crate::domain::SendMessage,
    ) -> Option<ThreadKey> {
        let context_id = match (&cmd.message.task_id, &cmd.message.context_id) {
            (Some(task_id), _) => self.task_thread(tenant, task_id).await.ok()?.context_id,
            (None, Some(context_id)) => context_id.clone(),
            (None, None) => return None,
        };
        Some(ThreadKey {
            tenant: tenant.clone(),
            context_id,
        })
    }

    /// Draining: the live node that serves the thread of a client's send, when it is
    /// another node's — the send goes there instead of being refused.
    pub(super) async fn served_elsewhere(
        &self,
        tenant: &TenantId,
        cmd: &crate::domain::SendMessage,
    ) -> Option<crate::store::cluster::Owner> {
        let cluster = self.cluster.as_ref()?;
        let key = self.named_thread(tenant, cmd).await?;
        if self.is_resident(&key.tenant, &key.context_id) {
            return None;
        }
        match cluster.live_owner(&key.tenant, &key.context_id).await {
            Ok(owner) => owner,
            Err(e) => {
                tracing::warn!(error = %e, context_id = %key.context_id, "draining: cannot read the thread's owner; the send is refused");
                None
            }
        }
    }

    /// Draining: gives up the thread of a send another node forwarded here, if nothing
    /// runs or waits on it, so that the retry of that send is served by the node that
    /// claims the thread next instead of coming back here until this node has left.
    pub(super) async fn hand_over(&self, tenant: &TenantId, cmd: &crate::domain::SendMessage) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let Some(key) = self.named_thread(tenant, cmd).await else {
            return;
        };
        let actor = self
            .shared
            .actors
            .get(&key)
            .map(|entry| entry.value().1.clone());
        let quiet = match actor {
            // A closed mailbox: the actor is gone already.
            Some(actor) => actor
                .send(thread::maintenance::HandOver)
                .await
                .unwrap_or(true),
            None => true,
        };
        if !quiet {
            return;
        }
        if let Err(e) = cluster.release(&key.tenant, &key.context_id).await {
            tracing::warn!(error = %e, context_id = %key.context_id, "draining: could not give the thread up; it moves when this node has left");
        }
    }

    /// Sends a message built by `make` to the actor of the task's thread — or, when
    /// another node serves the thread (cluster mode), the call built by `forwarded` to
    /// that node as `call`.
    pub(super) async fn on_task_thread<M, T, B, F>(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        origin: Origin,
        call: &'static str,
        forwarded: impl FnOnce() -> B,
        make: F,
    ) -> Result<T>
    where
        M: actix::Message<Result = Result<T, thread::ActorError>> + Send + 'static,
        T: Send + serde::de::DeserializeOwned + 'static,
        thread::ThreadActor: actix::Handler<M>,
        <thread::ThreadActor as actix::Actor>::Context:
            actix::dev::ToEnvelope<thread::ThreadActor, M>,
        B: serde::Serialize,
        F: FnMut() -> M,
    {
        let key = self.task_thread(tenant, task_id).await?;
        let token = match self.locate(&key, false).await? {
            Located::Here(token) => token,
            Located::Elsewhere(owner) if origin == Origin::Client => {
                return self.forward(&owner, call, &forwarded()).await;
            }
            Located::Elsewhere(owner) => return Err(not_the_owner(&owner)),
        };
        self.registry.call_new(&key, false, token, make).await
    }

    /// Calls the owner of a thread (cluster mode).
    pub(super) async fn forward<B: serde::Serialize, T: serde::de::DeserializeOwned>(
        &self,
        owner: &crate::store::cluster::Owner,
        call: &'static str,
        body: &B,
    ) -> Result<T> {
        let cluster = self
            .cluster
            .as_ref()
            .ok_or_else(|| Error::internal("forwarding without a cluster"))?;
        metrics::counter!(crate::telemetry::CLUSTER_FORWARDED, "call" => call).increment(1);
        cluster
            .peer()
            .call(&owner.url, cluster.node_id(), &format!("/{call}"), body)
            .await
    }
}

pub(super) fn not_the_owner(owner: &crate::store::cluster::Owner) -> Error {
    Error::Unavailable {
        detail: format!(
            "a forwarded request reached a node that does not serve its thread (node {} does)",
            owner.node_id
        ),
        retry_after_secs: 1,
    }
}
