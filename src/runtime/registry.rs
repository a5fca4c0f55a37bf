//! The `ThreadRegistry`: finds or starts the actor of a thread.
//!
//! A thread's actor starts on the arbiter that is handling the request that needs it —
//! an HTTP worker — whether the thread was just minted (a message without `contextId`) or
//! is reloaded from the store after an eviction: the request, the reload's reads (on that
//! thread's own database connections, see `store/postgres/readers.rs`), the turn and the answer
//! stay on one thread. Work that does not come from an arbiter (gRPC's runtime, tasks on
//! plain tokio threads) places the actor on one of the runtime's arbiters (one per core)
//! by a hash of the thread key (an actix actor lives on one arbiter thread; putting them
//! all on one would serialise the server). Each runs under an actix `Supervisor`. An
//! evicted actor answers `Gone` and a dead one has a closed mailbox; either way the
//! registry starts a fresh actor and retries, a bounded number of times.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use actix::dev::ToEnvelope;
use actix::prelude::*;
use dashmap::mapref::entry::Entry;

use super::thread::{ActorError, ThreadActor, ThreadDeps, ThreadKey, next_actor_id};
use crate::error::{Error, Result};

/// Attempts to reach a live actor before giving up.
const ATTEMPTS: usize = 3;

pub struct ThreadRegistry {
    deps: Arc<ThreadDeps>,
    arbiters: Vec<ArbiterHandle>,
    hasher: RandomState,
}

impl ThreadRegistry {
    pub fn new(deps: Arc<ThreadDeps>, arbiters: Vec<ArbiterHandle>) -> Self {
        Self {
            deps,
            arbiters,
            hasher: RandomState::new(),
        }
    }

    /// Thread actors currently resident.
    pub fn resident(&self) -> usize {
        self.deps.shared.actors.len()
    }

    /// The resident actor of the thread, if there is one.
    fn resident_actor(&self, key: &ThreadKey) -> Option<Addr<ThreadActor>> {
        self.deps
            .shared
            .actors
            .get(key)
            .filter(|entry| entry.1.connected())
            .map(|entry| entry.1.clone())
    }

    /// In cluster mode, the fencing token an actor created now for the thread commits
    /// under: the one `token` was placed with, or a placement of its own (a thread that
    /// left memory since, or one reached without a placement: recovery, a retry). A
    /// thread another node serves cannot get an actor here.
    async fn token(&self, key: &ThreadKey, token: Option<i64>) -> Result<Option<i64>> {
        let Some(cluster) = &self.deps.cluster else {
            return Ok(None);
        };
        if token.is_some() || self.resident_actor(key).is_some() {
            return Ok(token);
        }
        match cluster.place(&key.tenant, &key.context_id).await? {
            crate::cluster::Placement::Local { token } => Ok(Some(token)),
            crate::cluster::Placement::Remote(owner) => Err(Error::Unavailable {
                detail: format!(
                    "thread {} is served by node {}",
                    key.context_id, owner.node_id
                ),
                retry_after_secs: 1,
            }),
        }
    }

    fn addr(&self, key: &ThreadKey, fresh: bool, token: Option<i64>) -> Addr<ThreadActor> {
        if let Some(addr) = self.resident_actor(key) {
            return addr;
        }
        match self.deps.shared.actors.entry(key.clone()) {
            Entry::Occupied(o) if o.get().1.connected() => o.get().1.clone(),
            entry => {
                let id = next_actor_id(&self.deps.shared);
                let deps = self.deps.clone();
                let actor_key = key.clone();
                let make = move |_: &mut Context<ThreadActor>| {
                    ThreadActor::new(id, actor_key, deps, fresh, token)
                };
                let addr = match Arbiter::try_current() {
                    // Here, where the request that needs it is (no hand-off).
                    Some(_) => Supervisor::start(make),
                    _ => {
                        let arbiter = &self.arbiters
                            [self.hasher.hash_one(key) as usize % self.arbiters.len()];
                        Supervisor::start_in_arbiter(arbiter, make)
                    }
                };
                match entry {
                    Entry::Occupied(mut o) => {
                        o.insert((id, addr.clone()));
                    }
                    Entry::Vacant(v) => {
                        v.insert((id, addr.clone()));
                    }
                }
                addr
            }
        }
    }

    /// Sends a message built by `make` to the thread's actor, retrying with a fresh actor
    /// when the current one was evicted or has died.
    pub async fn call<M, T, F>(&self, key: &ThreadKey, make: F) -> Result<T>
    where
        M: Message<Result = Result<T, ActorError>> + Send + 'static,
        T: Send + 'static,
        ThreadActor: Handler<M>,
        <ThreadActor as Actor>::Context: ToEnvelope<ThreadActor, M>,
        F: FnMut() -> M,
    {
        self.call_new(key, false, None, make).await
    }

    /// Like [`ThreadRegistry::call`]; `fresh` says the thread id was just minted by this
    /// server, so a new actor need not look for the thread in the store; `token` is the
    /// fencing token the thread was placed under (cluster mode).
    pub async fn call_new<M, T, F>(
        &self,
        key: &ThreadKey,
        fresh: bool,
        mut token: Option<i64>,
        mut make: F,
    ) -> Result<T>
    where
        M: Message<Result = Result<T, ActorError>> + Send + 'static,
        T: Send + 'static,
        ThreadActor: Handler<M>,
        <ThreadActor as Actor>::Context: ToEnvelope<ThreadActor, M>,
        F: FnMut() -> M,
    {
        for attempt in 0..ATTEMPTS {
            token = self.token(key, token).await?;
            let addr = self.addr(key, fresh && attempt == 0, token);
            // An actor that has to be created again places its thread again.
            token = None;
            match addr.send(make()).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(ActorError::Failed(e))) => return Err(e),
                Ok(Err(ActorError::Gone)) | Err(MailboxError::Closed) => {
                    let stale = addr.clone();
                    self.deps
                        .shared
                        .actors
                        .remove_if(key, |_, (_, current)| *current == stale);
                }
                Err(MailboxError::Timeout) => {
                    return Err(Error::Unavailable {
                        detail: "thread actor timed out".into(),
                        retry_after_secs: 1,
                    });
                }
            }
        }
        Err(Error::Unavailable {
            detail: format!("thread {} could not be reached", key.context_id),
            retry_after_secs: 1,
        })
    }
}
