//! Push configs of a thread's tasks: registered and removed by the thread's actor, so
//! that the next event of the task is queued for exactly the configs committed before it.

use actix::prelude::*;

use super::plan::check_push_room;
use super::{ActorError, ThreadActor};
use crate::domain::{PushConfig, PushSpec, TaskId, Timestamp};
use crate::error::Error;
use crate::store::WriteOp;

/// Registers a push config for a task of this thread.
#[derive(Message)]
#[rtype(result = "Result<PushConfig, ActorError>")]
pub struct AddPushConfig {
    pub task_id: TaskId,
    pub spec: PushSpec,
}

/// Removes a push config (and the deliveries still owed to it); removing one that does
/// not exist is not an error.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct RemovePushConfig {
    pub task_id: TaskId,
    pub config_id: String,
}

type Reply<T> = std::pin::Pin<Box<dyn ActorFuture<ThreadActor, Output = Result<T, ActorError>>>>;

impl ThreadActor {
    /// Resolves once nothing unsynced is pending and `task_id` is in memory (a config
    /// changes what the task's next event is queued for: it needs the task's entry).
    fn synced_and_resident(&mut self, task_id: TaskId, ctx: &mut Context<Self>) -> Reply<()> {
        Box::pin(
            self.synced(ctx)
                .then(move |synced, act: &mut Self, _| -> Reply<()> {
                    match synced {
                        Ok(()) => Box::pin(act.ensure_resident(task_id).map(|r, _, _| Ok(r?))),
                        Err(e) => Box::pin(fut::ready(Err(ActorError::Failed(e)))),
                    }
                }),
        )
    }
}

impl Handler<AddPushConfig> for ThreadActor {
    type Result = AtomicResponse<Self, Result<PushConfig, ActorError>>;

    fn handle(&mut self, msg: AddPushConfig, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.loaded() {
            return AtomicResponse::new(Box::pin(fut::ready(Err(e))));
        }
        let task_id = msg.task_id;
        let fut = self.synced_and_resident(task_id.clone(), ctx).then(
            move |resident, act: &mut Self, ctx| -> Reply<PushConfig> {
                let planned = resident.and_then(|()| {
                    let max = act.deps.push.max_configs_per_task();
                    let key = act.key.clone();
                    let loaded = act.loaded()?;
                    let entry = loaded
                        .tasks
                        .get(&task_id)
                        .filter(|e| e.materialized)
                        .ok_or_else(|| Error::TaskNotFound(task_id.clone()))?;
                    let config =
                        msg.spec
                            .into_config(key.tenant, task_id.clone(), Timestamp::now());
                    check_push_room(&entry.push, &config, max)?;
                    Ok(config)
                });
                let config = match planned {
                    Ok(config) => config,
                    Err(e) => return Box::pin(fut::ready(Err(e))),
                };
                let ops = vec![WriteOp::PutPushConfig(config.clone())];
                Box::pin(act.commit(ops, ctx).map(move |result, act: &mut Self, _| {
                    result?;
                    let loaded = act.loaded()?;
                    if let Some(entry) = loaded.tasks.get_mut(&task_id) {
                        entry.add_push(config.clone());
                    }
                    Ok(config)
                }))
            },
        );
        AtomicResponse::new(Box::pin(fut))
    }
}

impl Handler<RemovePushConfig> for ThreadActor {
    type Result = AtomicResponse<Self, Result<(), ActorError>>;

    fn handle(&mut self, msg: RemovePushConfig, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.loaded() {
            return AtomicResponse::new(Box::pin(fut::ready(Err(e))));
        }
        let RemovePushConfig { task_id, config_id } = msg;
        let fut = self.synced_and_resident(task_id.clone(), ctx).then(
            move |resident, act: &mut Self, ctx| -> Reply<()> {
                if let Err(e) = resident {
                    return Box::pin(fut::ready(Err(e)));
                }
                let ops = vec![WriteOp::DeletePushConfig {
                    tenant: act.key.tenant.clone(),
                    task_id: task_id.clone(),
                    config_id: config_id.clone(),
                }];
                Box::pin(act.commit(ops, ctx).map(move |result, act: &mut Self, _| {
                    result?;
                    let loaded = act.loaded()?;
                    if let Some(entry) = loaded.tasks.get_mut(&task_id) {
                        entry.push.retain(|t| t.config_id() != config_id);
                    }
                    Ok(())
                }))
            },
        );
        AtomicResponse::new(Box::pin(fut))
    }
}
