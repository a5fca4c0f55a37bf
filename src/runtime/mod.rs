//! The actor runtime: thread actors under supervision, the persistence actor, task
//! streams, and the [`Runtime`] facade the HTTP layer calls.
//!
//! A request becomes a message to the `ThreadActor` of its thread (`contextId`,
//! `thread/`); the actor validates it against the turn rules (`thread/plan/`), runs the
//! turn with the [`AgentExecutor`] (`executors/`), commits each change through the
//! persistence actor (`persistence.rs`) and publishes each committed event to the task's
//! subscribers (`stream.rs`).
//!
//! The runtime's lifecycle around that (`lifecycle/`): start-up recovery of active
//! threads (`recovery.rs`), the periodic janitor (`janitor.rs`, with the actors' side in
//! `thread/maintenance.rs`), health checks of every dependency (`health.rs`) and the
//! graceful shutdown ([`Lifecycle::begin_drain`](crate::runtime::Lifecycle::begin_drain), [`Lifecycle::wait_for_turns`](crate::runtime::Lifecycle::wait_for_turns),
//! [`Lifecycle::close`](crate::runtime::Lifecycle::close); `shutdown.rs`).
//!
//! The facade's operations are `impl Runtime` blocks of their own: sending a message and
//! idempotent retries (`send.rs`), reading and cancelling tasks (`tasks.rs`), push configs
//! (`push_configs.rs`), subscriptions (`subscribe.rs`), and where a request goes — its
//! thread and, in a cluster, that thread's node (`routing.rs`). This file holds the
//! runtime itself: its start, accessors and stop.

mod claim_filter;
pub mod executors;
mod idempotency;
mod lifecycle;
pub mod model_actor;
pub mod outbox;
mod persistence;
pub mod push;
mod push_configs;
mod registry;
mod routing;
mod send;
mod skill_actor;
mod stream;
mod subscribe;
mod tasks;
#[cfg(test)]
mod tests;
mod thread;
mod tools;

use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use std::time::Duration;

use actix::{Arbiter, ArbiterHandle};
use tokio::sync::watch;

pub use executor::{AgentExecutor, Turn, TurnSink};
pub use executors::executor;
pub use executors::{AgentLoopExecutor, RoutingExecutor, ToolRoutingExecutor};
pub use health::{Check, HealthReport, Overall, ProviderHealth};
pub use lifecycle::Lifecycle;
pub use lifecycle::health;
pub use lifecycle::janitor::JanitorReport;
pub use lifecycle::recovery::Recovery;
pub use model_actor::Models;
pub use persistence::PersistenceHandle;
pub use push_configs::PushConfigs;
pub use send::Sends;
pub use skill_actor::SkillStartError;
pub use stream::SeqEvent;
pub use subscribe::Subscriptions;
pub use tasks::Tasks;
pub use thread::Subscription;
pub use thread::maintenance::SweepReport;
pub use tools::Tools;

use crate::cluster::Cluster;
use crate::config::{Settings, ThreadSettings};
use crate::domain::{ContextId, TenantId};
use crate::error::Result;
use crate::skills::SkillRegistry;
use crate::store::Store;
use registry::ThreadRegistry;
use send::Accepted;
use thread::{Shared, ThreadDeps, ThreadKey};

/// Which executor runs the turns.
pub enum ExecutorSource {
    /// The one `[agent]` describes: the agent loop when `agent.provider` is set, the routing
    /// model when only `agent.routing_provider` is, direct tool routing otherwise.
    Configured,
    /// Exactly this one.
    Custom(Arc<dyn AgentExecutor>),
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Skills(#[from] SkillStartError),
    #[error("model provider: {0}")]
    Provider(#[from] crate::providers::ProviderError),
    #[error("agent configuration: {0}")]
    Agent(#[from] crate::agent::TreeError),
}

/// The running actor system behind the protocol handlers.
pub struct Runtime {
    registry: ThreadRegistry,
    store: Arc<dyn Store>,
    persistence: PersistenceHandle,
    shared: Arc<Shared>,
    push: Arc<push::PushHub>,
    /// Idempotency keys of sends accepted by this process whose turn has not answered
    /// yet: a concurrent retry joins that turn instead of racing it to the store.
    claims: DashMap<(TenantId, String), Accepted, foldhash::fast::RandomState>,
    /// The keys claimed in the idempotency window, when this process is its store's only
    /// writer: a key it rules out is not looked for in the store.
    claim_filter: Option<Arc<claim_filter::ClaimFilter>>,
    tools: Arc<Tools>,
    models: Models,
    /// The arbiters of thread, skill and model actors; emptied when stopped.
    arbiters: Mutex<Vec<Arbiter>>,
    /// The persistence actor's arbiter, stopped last.
    persistence_arbiter: Mutex<Option<Arbiter>>,
    replay_batch: usize,
    settings: RuntimeSettings,
    /// Turns true when the runtime stops: background work (janitor, recovery) ends.
    stop: watch::Sender<bool>,
    recovery: watch::Sender<Recovery>,
    /// Cluster mode: this node's membership; threads of other nodes are served there.
    cluster: Option<Arc<Cluster>>,
}

/// The settings the runtime itself reads after start.
struct RuntimeSettings {
    threads: ThreadSettings,
    /// `idempotency.enabled`.
    idempotency: bool,
    /// `idempotency.window_secs`, in ms.
    idempotency_window_ms: i64,
    /// `store.retention_secs`, in ms (0: threads are kept forever).
    retention_ms: i64,
    /// `store.retention_batch`.
    retention_batch: usize,
    health_timeout: Duration,
}

impl Runtime {
    /// Starts the arbiters, the persistence actor, one actor per skill of `skills`, one
    /// model actor per configured provider, and an empty thread registry. Must be called
    /// inside an actix `System`.
    pub fn start(
        settings: &Settings,
        store: Arc<dyn Store>,
        executor: ExecutorSource,
        skills: &SkillRegistry,
        cluster: Option<Arc<Cluster>>,
    ) -> Result<Runtime, StartError> {
        let persistence_arbiter = Arbiter::new();
        let push = Arc::new(push::PushHub::new(&settings.push));
        let persistence = persistence::start(
            store.clone(),
            &settings.persistence,
            &persistence_arbiter.handle(),
            push.clone(),
        );
        let actor_arbiters: Vec<Arbiter> = (0..settings.threads.arbiter_count())
            .map(|_| Arbiter::new())
            .collect();
        let handles: Vec<ArbiterHandle> = actor_arbiters.iter().map(Arbiter::handle).collect();
        let started = Tools::start(skills, &settings.skills, &handles)
            .map_err(StartError::from)
            .and_then(|tools| {
                let models = Models::start(&settings.providers, &settings.models, &handles[0])?;
                let executor = match executor {
                    ExecutorSource::Custom(executor) => executor,
                    ExecutorSource::Configured => {
                        let described: Vec<(String, String)> = skills
                            .skills()
                            .iter()
                            .map(|s| (s.info().name.clone(), s.info().description.clone()))
                            .collect();
                        executors::configured(settings, &models, &tools, &described)?
                    }
                };
                Ok((Arc::new(tools), executor, models))
            });
        let (tools, executor, models) = match started {
            Ok(started) => {
                Tools::follow_changes(&started.0);
                started
            }
            Err(e) => {
                for arbiter in actor_arbiters.iter().chain([&persistence_arbiter]) {
                    arbiter.stop();
                }
                return Err(e);
            }
        };
        let shared = Arc::new(Shared::new());
        let claim_filter = (settings.idempotency.enabled && settings.idempotency.filter_keys > 0)
            .then(|| {
                Arc::new(claim_filter::ClaimFilter::new(
                    window_ms(settings.idempotency.window_secs),
                    settings.idempotency.filter_keys,
                ))
            });
        // In a cluster the filter must hear every other node's claims too.
        if let (Some(cluster), Some(filter)) = (&cluster, &claim_filter) {
            cluster.hub().hear_claims(filter.clone());
        }
        let deps = Arc::new(ThreadDeps {
            store: store.clone(),
            persistence: persistence.clone(),
            executor,
            tools: tools.clone(),
            threads: settings.threads.clone(),
            streaming: settings.streaming.clone(),
            state: settings.state.clone(),
            shared: shared.clone(),
            push: push.clone(),
            start_grace: Duration::from_millis(settings.persistence.start_grace_ms),
            cluster: cluster.clone(),
            agent_name: settings.agent.name.as_str().into(),
            retention_ms: window_ms(settings.store.retention_secs),
        });
        Ok(Runtime {
            registry: ThreadRegistry::new(deps, handles),
            store,
            persistence,
            shared,
            push,
            tools,
            models,
            arbiters: Mutex::new(actor_arbiters),
            persistence_arbiter: Mutex::new(Some(persistence_arbiter)),
            replay_batch: settings.streaming.replay_batch,
            claims: DashMap::default(),
            claim_filter,
            settings: RuntimeSettings {
                threads: settings.threads.clone(),
                idempotency: settings.idempotency.enabled,
                idempotency_window_ms: window_ms(settings.idempotency.window_secs),
                retention_ms: window_ms(settings.store.retention_secs),
                retention_batch: settings.store.retention_batch,
                health_timeout: Duration::from_millis(settings.health.timeout_ms),
            },
            stop: watch::Sender::new(false),
            recovery: watch::Sender::new(Recovery::Pending),
            cluster,
        })
    }

    /// Cluster mode: this node's membership.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// Whether a send under a key never claimed skips the store read for an earlier
    /// claim now: the claim filter is loaded (in a cluster: and hears the other nodes'
    /// claims) and remembers every claim of the window.
    pub fn claim_filter_certain(&self) -> bool {
        self.claim_filter
            .as_ref()
            .is_some_and(|f| f.is_certain(crate::domain::Timestamp::now().millis()))
    }

    /// Whether a send of `key` by `tenant` would look for an earlier claim of it in the
    /// store: it may have been claimed (or the filter is not certain, or off).
    pub fn may_have_claimed(&self, tenant: &TenantId, key: &str) -> bool {
        self.claim_filter
            .as_ref()
            .is_none_or(|f| f.may_be_claimed(tenant, key, crate::domain::Timestamp::now().millis()))
    }

    /// Starts the runtime's background work on the current arbiter: start-up recovery
    /// (once) and the periodic janitor. Called once the server listens.
    pub fn start_maintenance(self: &Arc<Self>) {
        let every = Duration::from_secs(self.settings.threads.janitor_interval_secs);
        actix::spawn(lifecycle::janitor::run_periodically(
            Arc::downgrade(self),
            self.stop.subscribe(),
            every,
        ));
        actix::spawn(lifecycle::recovery::run(
            Arc::downgrade(self),
            self.stop.subscribe(),
        ));
        actix::spawn(lifecycle::claims::load(
            Arc::downgrade(self),
            self.stop.subscribe(),
        ));
        actix::spawn(lifecycle::cluster::run(
            Arc::downgrade(self),
            self.stop.subscribe(),
        ));
    }

    /// Model providers behind their actors.
    pub fn models(&self) -> &Models {
        &self.models
    }

    /// Whether the thread has an actor in memory.
    pub fn is_resident(&self, tenant: &TenantId, context_id: &ContextId) -> bool {
        let key = ThreadKey {
            tenant: tenant.clone(),
            context_id: context_id.clone(),
        };
        self.shared
            .actors
            .get(&key)
            .is_some_and(|entry| entry.value().1.connected())
    }

    /// Every registered tool.
    pub fn tools(&self) -> &Arc<Tools> {
        &self.tools
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Thread actors resident in memory.
    pub fn resident_threads(&self) -> usize {
        self.registry.resident()
    }
}

/// The guarded value even if a holder panicked (nothing here is left half-done by one).
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.lifecycle().shutdown();
    }
}

/// `idempotency.window_secs` in milliseconds.
fn window_ms(secs: u64) -> i64 {
    i64::try_from(secs)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000)
}
