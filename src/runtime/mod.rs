//! The actor runtime: thread actors under supervision, the persistence actor, task
//! streams, and the [`Runtime`] facade the HTTP layer calls.
//!
//! A request becomes a message to the `ThreadActor` of its thread (`contextId`,
//! `thread/`); the actor validates it against the turn rules (`thread/plan.rs`), runs the
//! turn with the [`AgentExecutor`] (`executors/`), commits each change through the
//! persistence actor (`persistence.rs`) and publishes each committed event to the task's
//! subscribers (`stream.rs`).
//!
//! The runtime's lifecycle around that (`lifecycle/`): start-up recovery of active
//! threads (`recovery.rs`), the periodic janitor (`janitor.rs`, with the actors' side in
//! `thread/maintenance.rs`), health checks of every dependency (`health.rs`) and the
//! graceful shutdown ([`Runtime::begin_drain`], [`Runtime::wait_for_turns`],
//! [`Runtime::close`]; `shutdown.rs`).

mod claim_filter;
pub mod executors;
mod idempotency;
mod lifecycle;
pub mod model_actor;
mod persistence;
pub mod push;
mod registry;
mod skill_actor;
mod stream;
mod thread;
#[cfg(test)]
mod write_path_tests;

use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use std::time::Duration;

use actix::{Arbiter, ArbiterHandle};
use futures_util::Stream;
use tokio::sync::{oneshot, watch};

pub use executor::{AgentExecutor, Turn, TurnSink};
pub use executors::executor;
pub use executors::{AgentLoopExecutor, RoutingExecutor, ToolRoutingExecutor};
pub use health::{Check, HealthReport, Overall, ProviderHealth};
pub use lifecycle::health;
pub use lifecycle::janitor::JanitorReport;
pub use lifecycle::recovery::Recovery;
pub use model_actor::Models;
pub use persistence::PersistenceHandle;
pub use skill_actor::{SkillStartError, Tools};
pub use stream::SeqEvent;
pub use thread::Subscription;
pub use thread::maintenance::SweepReport;

use crate::cluster::Cluster;
use crate::cluster::forward::{self, SendMode, Sent, StreamStart};
use crate::config::{Settings, ThreadSettings};
use crate::domain::{
    ContextId, ListTasksQuery, PushConfig, PushSpec, SendMessage, SendOutcome, Task, TaskId,
    TaskPage, TenantId,
};
use crate::error::{Error, Result};
use crate::skills::SkillRegistry;
use crate::store::Store;
use registry::ThreadRegistry;
use thread::push::{AddPushConfig, RemovePushConfig};
use thread::rejoin::Rejoin;
use thread::{
    CancelTask, GetResident, Mode, SendTurn, Shared, Subscribe, ThreadDeps, ThreadKey, TurnClaim,
    Waiter,
};

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
    claims: DashMap<(TenantId, String), Accepted>,
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

/// Where a thread is served, as far as a request is concerned.
enum Located {
    /// Here; in cluster mode, under this fencing token (when an actor must be created).
    Here(Option<i64>),
    /// On another node of the cluster.
    Elsewhere(crate::store::cluster::Owner),
}

/// Who sent a request: a client, or another node of the cluster that forwarded it to
/// this one as the thread's owner (which must not forward it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Client,
    Peer,
}

/// A turn started here, or the owner that must run it.
enum Started<T> {
    Here(T),
    Elsewhere(crate::store::cluster::Owner, Box<SendMessage>),
}

/// The settings the runtime itself reads after start.
struct RuntimeSettings {
    threads: ThreadSettings,
    /// `idempotency.enabled`.
    idempotency: bool,
    /// `idempotency.window_secs`, in ms.
    idempotency_window_ms: i64,
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
        let persistence = persistence::start(
            store.clone(),
            &settings.persistence,
            &persistence_arbiter.handle(),
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
            Ok(started) => started,
            Err(e) => {
                for arbiter in actor_arbiters.iter().chain([&persistence_arbiter]) {
                    arbiter.stop();
                }
                return Err(e);
            }
        };
        let shared = Arc::new(Shared::new());
        let push = Arc::new(push::PushHub::new(&settings.push));
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
            claims: DashMap::new(),
            claim_filter: (settings.idempotency.enabled
                && settings.idempotency.filter_keys > 0
                && cluster.is_none())
            .then(|| {
                Arc::new(claim_filter::ClaimFilter::new(
                    window_ms(settings.idempotency.window_secs),
                    settings.idempotency.filter_keys,
                ))
            }),
            settings: RuntimeSettings {
                threads: settings.threads.clone(),
                idempotency: settings.idempotency.enabled,
                idempotency_window_ms: window_ms(settings.idempotency.window_secs),
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

    /// Turns true when the runtime stops (background work ends).
    pub fn stopped(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Model providers behind their actors.
    pub fn models(&self) -> &Models {
        &self.models
    }

    /// Ready for traffic: start-up recovery has finished and no shutdown has begun.
    /// (`/health/ready` adds a store round trip.)
    pub fn is_ready(&self) -> bool {
        matches!(self.recovery(), Recovery::Done { .. })
            && !self.is_draining()
            && self.cluster.as_ref().is_none_or(|c| c.holds_lease())
    }

    /// A graceful shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.shared.is_draining()
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

    /// Runs a turn and answers when the task is terminal or interrupted — or at once
    /// with `return_immediately`. Refused once a graceful shutdown has begun. In a
    /// cluster, a thread of another node is served there.
    pub async fn send(&self, tenant: &TenantId, cmd: SendMessage) -> Result<SendOutcome> {
        let mode = if cmd.config.return_immediately {
            Mode::Immediate
        } else {
            Mode::Blocking
        };
        let history_length = cmd.config.history_length;
        let started = self
            .start_turn(tenant, cmd, mode, Origin::Client, |tx| Waiter::Outcome {
                tx,
                history_length,
            })
            .await?;
        match started {
            Started::Here(outcome) => Ok(outcome),
            Started::Elsewhere(owner, cmd) => {
                let mode = match mode {
                    Mode::Immediate => SendMode::Immediate,
                    _ => SendMode::Blocking,
                };
                match self.forward_send(&owner, tenant, *cmd, mode).await? {
                    Sent::Outcome(outcome) => Ok(outcome),
                    Sent::Stream(_) => Err(Error::internal("a stream answered a blocking send")),
                }
            }
        }
    }

    /// Runs a turn and returns its live events.
    pub async fn send_streaming(
        &self,
        tenant: &TenantId,
        cmd: SendMessage,
    ) -> Result<Subscription> {
        let started = self
            .start_turn(tenant, cmd, Mode::Streaming, Origin::Client, Waiter::Stream)
            .await?;
        match started {
            Started::Here(sub) => Ok(sub),
            Started::Elsewhere(owner, cmd) => {
                match self
                    .forward_send(&owner, tenant, *cmd, SendMode::Streaming)
                    .await?
                {
                    Sent::Stream(start) => Ok(self.follow(tenant, start)),
                    Sent::Outcome(_) => Err(Error::internal("an outcome answered a stream")),
                }
            }
        }
    }

    /// Serves a send another node forwarded to this one, the thread's owner.
    pub async fn serve_send(
        &self,
        tenant: &TenantId,
        cmd: SendMessage,
        mode: SendMode,
    ) -> Result<Sent> {
        let history_length = cmd.config.history_length;
        let started = match mode {
            SendMode::Blocking | SendMode::Immediate => {
                let mode = if mode == SendMode::Immediate {
                    Mode::Immediate
                } else {
                    Mode::Blocking
                };
                self.start_turn(tenant, cmd, mode, Origin::Peer, |tx| Waiter::Outcome {
                    tx,
                    history_length,
                })
                .await?
                .map(Sent::Outcome)
            }
            SendMode::Streaming => self
                .start_turn(tenant, cmd, Mode::Streaming, Origin::Peer, Waiter::Stream)
                .await?
                .map(|sub| {
                    Sent::Stream(StreamStart {
                        task_id: sub.task_id,
                        first: sub.first,
                        after_seq: sub.after_seq,
                        until_terminal: sub.until_terminal,
                    })
                }),
        };
        match started {
            Started::Here(sent) => Ok(sent),
            Started::Elsewhere(owner, _) => Err(not_the_owner(&owner)),
        }
    }

    async fn forward_send(
        &self,
        owner: &crate::store::cluster::Owner,
        tenant: &TenantId,
        cmd: SendMessage,
        mode: SendMode,
    ) -> Result<Sent> {
        let call = forward::SendCall {
            tenant: tenant.clone(),
            cmd,
            mode,
        };
        self.forward(owner, "send", &call).await
    }

    /// Calls the owner of a thread (cluster mode).
    async fn forward<B: serde::Serialize, T: serde::de::DeserializeOwned>(
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

    /// A subscription that follows, through its log, a task whose turn another node runs.
    fn follow(&self, tenant: &TenantId, start: StreamStart) -> Subscription {
        let live = match (&self.cluster, &start.task_id) {
            (Some(cluster), Some(task_id)) => Some(thread::Live::Notified {
                watch: cluster.hub().watch(tenant, task_id),
                poll: cluster.stream_poll(),
            }),
            _ => None,
        };
        Subscription {
            tenant: tenant.clone(),
            task_id: start.task_id,
            first: start.first,
            live,
            after_seq: start.after_seq,
            until_terminal: start.until_terminal,
        }
    }

    /// Where the thread is served: here (with the token an actor created for it commits
    /// under), or on the node that owns it.
    async fn locate(&self, key: &ThreadKey, fresh: bool) -> Result<Located> {
        let Some(cluster) = &self.cluster else {
            return Ok(Located::Here(None));
        };
        if fresh {
            // A thread this node has just minted: nobody else knows it; its owner row
            // rides with its first batch.
            if !cluster.holds_lease() {
                return Err(Error::Unavailable {
                    detail: "this node is not holding its cluster lease (renewal pending)".into(),
                    retry_after_secs: 1,
                });
            }
            return Ok(Located::Here(Some(cluster.token())));
        }
        if self.is_resident(&key.tenant, &key.context_id) {
            return Ok(Located::Here(None));
        }
        Ok(match cluster.place(&key.tenant, &key.context_id).await? {
            crate::cluster::Placement::Local { token } => Located::Here(Some(token)),
            crate::cluster::Placement::Remote(owner) => Located::Elsewhere(owner),
        })
    }

    /// Routes `cmd` to its thread, queues the turn there with a waiter built by
    /// `waiter`, and waits for what the waiter receives.
    ///
    /// A send whose idempotency key (the message's id, or the request's
    /// `Idempotency-Key`) the tenant used within `idempotency.window_secs` runs nothing:
    /// it gets the outcome of the first send of that key — or an error if it differs from
    /// it. The key is claimed in the store with the turn's first write, under a unique
    /// key: of two racing sends, one wins and the other joins it.
    async fn start_turn<T>(
        &self,
        tenant: &TenantId,
        cmd: SendMessage,
        mode: Mode,
        origin: Origin,
        waiter: impl Fn(oneshot::Sender<Result<T>>) -> Waiter,
    ) -> Result<Started<T>> {
        // Counted before the check, so that a shutdown that begins now waits for it.
        let busy = self.shared.activity.busy();
        if self.is_draining() {
            return Err(thread::maintenance::shutting_down());
        }
        if !self.settings.idempotency {
            let (key, cmd, fresh) = self.route(tenant, cmd).await?;
            let token = match self.locate(&key, fresh).await? {
                Located::Here(token) => token,
                Located::Elsewhere(owner) => return elsewhere(origin, owner, cmd),
            };
            let rx = self
                .queue_turn(&key, fresh, token, &busy, &waiter, (cmd, mode, None))
                .await?;
            return await_reply(Some(rx)).await.map(Started::Here);
        }
        let idem = (tenant.clone(), cmd.idempotency_key().to_owned());
        let digest = idempotency::digest(&cmd);
        if let Some(first) = self.accepted(&idem, &digest).await? {
            return self.rejoin(tenant, first, mode, origin, cmd, &waiter).await;
        }
        let (key, cmd, fresh) = self.route(tenant, cmd).await?;
        let token = match self.locate(&key, fresh).await? {
            Located::Here(token) => token,
            Located::Elsewhere(owner) => return elsewhere(origin, owner, cmd),
        };
        let now = crate::domain::Timestamp::now();
        let claim = TurnClaim {
            key: idem.1.clone(),
            digest: digest.clone(),
            task_id: cmd.message.task_id.clone().unwrap_or_else(TaskId::generate),
            at: now,
            taken_over_before: crate::domain::Timestamp(
                now.millis()
                    .saturating_sub(self.settings.idempotency_window_ms),
            ),
        };
        // Tells retries that joined the turn before it was queued when it is.
        let (queued, queued_rx) = watch::channel(None);
        let accepted = Accepted {
            context_id: key.context_id.clone(),
            task_id: claim.task_id.clone(),
            digest,
            reply: None,
            queued: Some(queued_rx),
        };
        // Registered before the turn is queued: a retry from now on joins it. (The map's
        // lock is released before anything is awaited.)
        let raced = match self.claims.entry(idem.clone()) {
            dashmap::Entry::Occupied(first) => Some(first.get().clone()),
            dashmap::Entry::Vacant(slot) => {
                slot.insert(accepted);
                if let Some(filter) = &self.claim_filter {
                    filter.insert(tenant, &idem.1, now.millis());
                }
                None
            }
        };
        if let Some(first) = raced {
            first.check(&idem.1, &claim.digest)?;
            return self.rejoin(tenant, first, mode, origin, cmd, &waiter).await;
        }
        let _accepted = Forget(&self.claims, &idem);
        let retry = cmd.clone();
        let sent = self
            .queue_turn(
                &key,
                fresh,
                token,
                &busy,
                &waiter,
                (cmd, mode, Some(claim.clone())),
            )
            .await;
        queued.send_replace(Some(sent.is_ok()));
        let outcome = match sent {
            Ok(rx) => await_reply(Some(rx)).await,
            Err(e) => Err(e),
        };
        // Another process (or a send this one forgot) claimed the key first: its outcome
        // is this send's too, once it is in the store (one read tells).
        if let Err(Error::Unavailable { .. }) = &outcome {
            drop(_accepted);
            match self.accepted(&idem, &claim.digest).await {
                Ok(Some(first)) => {
                    return self
                        .rejoin(tenant, first, mode, origin, retry, &waiter)
                        .await;
                }
                Err(e @ Error::InvalidParams(_)) => return Err(e),
                Ok(None) | Err(_) => {}
            }
        }
        outcome.map(Started::Here)
    }

    /// Queues a turn in its thread; its outcome arrives on the returned channel.
    async fn queue_turn<T>(
        &self,
        key: &ThreadKey,
        fresh: bool,
        token: Option<i64>,
        busy: &lifecycle::shutdown::Busy,
        waiter: &impl Fn(oneshot::Sender<Result<T>>) -> Waiter,
        (cmd, mode, claim): (SendMessage, Mode, Option<TurnClaim>),
    ) -> Result<oneshot::Receiver<Result<T>>> {
        let mut rx = None;
        self.registry
            .call_new(key, fresh, token, || {
                // A retry (the first actor was evicted) needs a fresh channel.
                let (tx, wait) = oneshot::channel();
                rx = Some(wait);
                SendTurn {
                    cmd: cmd.clone(),
                    mode,
                    waiter: waiter(tx),
                    busy: busy.clone(),
                    claim: claim.clone(),
                    span: if crate::telemetry::trace::on() {
                        tracing::Span::current()
                    } else {
                        tracing::Span::none()
                    },
                }
            })
            .await?;
        rx.ok_or_else(|| Error::internal("no reply channel"))
    }

    /// The first send of `idem` if it is still remembered: in flight in this process, or
    /// claimed in the store within the window. A different message under the key is
    /// refused.
    async fn accepted(&self, idem: &(TenantId, String), digest: &str) -> Result<Option<Accepted>> {
        if let Some(first) = self.claims.get(idem).map(|a| a.clone()) {
            first.check(&idem.1, digest)?;
            return Ok(Some(first));
        }
        let now = crate::domain::Timestamp::now().millis();
        if let Some(filter) = &self.claim_filter
            && !filter.may_be_claimed(&idem.0, &idem.1, now)
        {
            return Ok(None);
        }
        metrics::counter!(crate::telemetry::IDEMPOTENCY_KEY_READS).increment(1);
        let stored = match self.store.claim_inline(&idem.0, &idem.1) {
            Some(read) => read?,
            None => self.store.claim(&idem.0, &idem.1).await?,
        };
        let Some(claim) = stored else {
            return Ok(None);
        };
        let window_start = now.saturating_sub(self.settings.idempotency_window_ms);
        if claim.created_at.millis() < window_start {
            return Ok(None);
        }
        let first = Accepted {
            context_id: claim.context_id,
            task_id: claim.task_id,
            digest: claim.digest,
            reply: claim.reply,
            queued: None,
        };
        first.check(&idem.1, digest)?;
        Ok(Some(first))
    }

    /// Gives a retry the outcome of the first send: its reply, or its task's outcome
    /// through the task's thread (in a cluster, on the node that serves it: `cmd` goes
    /// there).
    async fn rejoin<T>(
        &self,
        tenant: &TenantId,
        first: Accepted,
        mode: Mode,
        origin: Origin,
        cmd: SendMessage,
        waiter: &impl Fn(oneshot::Sender<Result<T>>) -> Waiter,
    ) -> Result<Started<T>> {
        if let Some(reply) = &first.reply {
            metrics::counter!(crate::telemetry::IDEMPOTENT_REPLAYS).increment(1);
            let (tx, rx) = oneshot::channel();
            thread::control::resolve_with_message(waiter(tx), reply, tenant);
            return await_reply(Some(rx)).await.map(Started::Here);
        }
        // A first send still on its way to its thread: the retry follows it there.
        if let Some(mut queued) = first.queued.clone() {
            let started = queued.wait_for(Option::is_some).await.ok().and_then(|q| *q);
            if started != Some(true) {
                return Err(Error::Unavailable {
                    detail: "the first request with this idempotency key did not start".into(),
                    retry_after_secs: 1,
                });
            }
        }
        let key = ThreadKey {
            tenant: tenant.clone(),
            context_id: first.context_id,
        };
        let token = match self.locate(&key, false).await? {
            Located::Here(token) => token,
            Located::Elsewhere(owner) => return elsewhere(origin, owner, cmd),
        };
        metrics::counter!(crate::telemetry::IDEMPOTENT_REPLAYS).increment(1);
        let mut rx = None;
        self.registry
            .call_new(&key, false, token, || {
                let (tx, wait) = oneshot::channel();
                rx = Some(wait);
                Rejoin {
                    task_id: first.task_id.clone(),
                    mode,
                    waiter: waiter(tx),
                }
            })
            .await?;
        await_reply(rx).await.map(Started::Here)
    }

    /// A task with at most `history_length` history messages (from memory when resident).
    pub async fn get_task(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        history_length: Option<u32>,
    ) -> Result<Task> {
        if let Some(context_id) = self.resident_context(tenant, task_id) {
            let key = ThreadKey {
                tenant: tenant.clone(),
                context_id,
            };
            let resident = self
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
            .store
            .load_task(tenant, task_id)
            .await?
            .ok_or_else(|| Error::TaskNotFound(task_id.clone()))?;
        Ok(stored.task.view(history_length, true))
    }

    /// A task once its generation exceeds `current` (or once it is terminal, or after
    /// `wait`, as it is then): `GetTask`'s long-poll.
    pub async fn get_task_after(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        history_length: Option<u32>,
        current: i64,
        wait: Duration,
    ) -> Result<Task> {
        use futures_util::StreamExt;
        let task = self.get_task(tenant, task_id, history_length).await?;
        if task.generation > current || task.status.state.is_terminal() {
            return Ok(task);
        }
        // Generation g + 1 is the task's event g: resume after event g - 1.
        let sub = self.subscribe(tenant, task_id, Some(current - 1)).await?;
        let mut events = std::pin::pin!(self.events(sub));
        let _ = tokio::time::timeout(wait, events.next()).await;
        self.get_task(tenant, task_id, history_length).await
    }

    /// Tasks of the tenant, newest first.
    pub async fn list_tasks(&self, tenant: &TenantId, query: &ListTasksQuery) -> Result<TaskPage> {
        self.store
            .list_tasks(tenant, query)
            .await?
            .ok_or_else(|| Error::invalid_params("pageToken: not a token this server issued"))
    }

    /// Cancels a task that is not terminal.
    pub async fn cancel_task(&self, tenant: &TenantId, task_id: &TaskId) -> Result<Task> {
        self.cancel_as(tenant, task_id, Origin::Client).await
    }

    /// Serves a cancel another node forwarded to this one, the thread's owner.
    pub async fn serve_cancel(&self, tenant: &TenantId, task_id: &TaskId) -> Result<Task> {
        self.cancel_as(tenant, task_id, Origin::Peer).await
    }

    async fn cancel_as(&self, tenant: &TenantId, task_id: &TaskId, origin: Origin) -> Result<Task> {
        let call = || forward::CancelCall {
            tenant: tenant.clone(),
            task_id: task_id.clone(),
        };
        let cancel = || CancelTask {
            task_id: task_id.clone(),
        };
        self.on_task_thread(tenant, task_id, origin, "cancel", call, cancel)
            .await
    }

    /// Sends a message built by `make` to the actor of the task's thread — or, when
    /// another node serves the thread (cluster mode), the call built by `forwarded` to
    /// that node as `call`.
    async fn on_task_thread<M, T, B, F>(
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

    /// Registers a push config for a task (replacing the task's config of the same id).
    pub async fn create_push_config(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        spec: PushSpec,
    ) -> Result<PushConfig> {
        self.create_push_as(tenant, task_id, spec, Origin::Client)
            .await
    }

    /// Serves a push config another node forwarded to this one, the thread's owner.
    pub async fn serve_create_push(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        spec: PushSpec,
    ) -> Result<PushConfig> {
        self.create_push_as(tenant, task_id, spec, Origin::Peer)
            .await
    }

    async fn create_push_as(
        &self,
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
        self.on_task_thread(tenant, task_id, origin, "push/create", call, add)
            .await
    }

    /// The push configs of a task, in the order they were registered.
    pub async fn push_configs(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
    ) -> Result<Vec<PushConfig>> {
        // The task must exist for this tenant; its configs are read from the store,
        // where every acknowledged change already is.
        self.task_thread(tenant, task_id).await?;
        Ok(self
            .store
            .push_configs(tenant, std::slice::from_ref(task_id))
            .await?)
    }

    /// Removes a push config of a task; one that does not exist is already removed.
    pub async fn delete_push_config(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        config_id: &str,
    ) -> Result<()> {
        self.delete_push_as(tenant, task_id, config_id, Origin::Client)
            .await
    }

    /// Serves a push config removal another node forwarded to this one.
    pub async fn serve_delete_push(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        config_id: &str,
    ) -> Result<()> {
        self.delete_push_as(tenant, task_id, config_id, Origin::Peer)
            .await
    }

    async fn delete_push_as(
        &self,
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
        self.on_task_thread(tenant, task_id, origin, "push/delete", call, remove)
            .await
    }

    /// What thread actors and the push delivery share.
    pub fn push_hub(&self) -> &Arc<push::PushHub> {
        &self.push
    }

    /// Commits writes that belong to no thread (the push delivery's outbox updates)
    /// through the persistence actor.
    pub async fn commit(&self, ops: Vec<crate::store::WriteOp>) -> Result<()> {
        self.persistence.commit(ops).await
    }

    /// Subscribes to a task; with `last_event_id`, resumes after that event. In a
    /// cluster, a task of another node is followed through its log here.
    pub async fn subscribe(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        last_event_id: Option<i64>,
    ) -> Result<Subscription> {
        if self.is_draining() {
            return Err(thread::maintenance::shutting_down());
        }
        let key = self.task_thread(tenant, task_id).await?;
        let token = match self.locate(&key, false).await? {
            Located::Here(token) => token,
            Located::Elsewhere(_) => {
                return self
                    .subscribe_elsewhere(tenant, task_id, last_event_id)
                    .await;
            }
        };
        self.registry
            .call_new(&key, false, token, || Subscribe {
                task_id: task_id.clone(),
                last_event_id,
            })
            .await
    }

    /// A subscription to a task of another node: its durable state and log, woken by the
    /// notifications of that node's commits.
    async fn subscribe_elsewhere(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        last_event_id: Option<i64>,
    ) -> Result<Subscription> {
        let cluster = self
            .cluster
            .as_ref()
            .ok_or_else(|| Error::internal("a remote subscription without a cluster"))?;
        // Watching before reading: nothing logged after the read goes unnoticed.
        let watch = cluster.hub().watch(tenant, task_id);
        let stored = self
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
        &self,
        sub: Subscription,
    ) -> impl Stream<Item = Result<SeqEvent>> + Send + 'static {
        stream::events(self.store.clone(), sub, self.replay_batch)
    }

    /// Stops at once: background work, the actor arbiters, then the persistence
    /// arbiter (writes still queued are not committed; none of them was acknowledged).
    /// A graceful shutdown uses [`Runtime::begin_drain`] and [`Runtime::close`] instead.
    pub fn shutdown(&self) {
        self.stop.send_replace(true);
        for arbiter in lock(&self.arbiters).drain(..) {
            arbiter.stop();
        }
        if let Some(arbiter) = lock(&self.persistence_arbiter).take() {
            arbiter.stop();
        }
    }

    fn resident_context(&self, tenant: &TenantId, task_id: &TaskId) -> Option<ContextId> {
        self.shared
            .tasks
            .get(&(tenant.clone(), task_id.clone()))
            .map(|c| c.clone())
    }

    /// The thread of an existing task (`TaskNotFound` for unknown and foreign ids).
    async fn task_thread(&self, tenant: &TenantId, task_id: &TaskId) -> Result<ThreadKey> {
        let context_id = match self.resident_context(tenant, task_id) {
            Some(c) => c,
            None => {
                self.store
                    .load_task(tenant, task_id)
                    .await?
                    .ok_or_else(|| Error::TaskNotFound(task_id.clone()))?
                    .task
                    .context_id
            }
        };
        Ok(ThreadKey {
            tenant: tenant.clone(),
            context_id,
        })
    }

    /// Decides which thread a message goes to: its task's thread, its `contextId`, or a
    /// new thread (then `fresh` is true). A `contextId` that disagrees with the task's is
    /// invalid.
    async fn route(
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
}

/// What a retry needs of the first send of its key.
#[derive(Debug, Clone)]
struct Accepted {
    context_id: ContextId,
    task_id: TaskId,
    digest: String,
    reply: Option<crate::domain::Message>,
    /// Of a send of this process: whether its turn was queued in its thread (`None`
    /// until it is known).
    queued: Option<watch::Receiver<Option<bool>>>,
}

impl Accepted {
    /// A retry must send what the first send sent.
    fn check(&self, key: &str, digest: &str) -> Result<()> {
        if self.digest == digest {
            return Ok(());
        }
        Err(Error::invalid_params(format!(
            "messageId {key:?} was already used for a different message within \
             idempotency.window_secs; a retry must send the same message, and a new \
             message needs a new messageId"
        )))
    }
}

/// Forgets an in-flight key when its send has answered (or was dropped): by then the
/// store holds its claim, or the turn was refused and left nothing behind.
struct Forget<'a>(
    &'a DashMap<(TenantId, String), Accepted>,
    &'a (TenantId, String),
);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

/// The guarded value even if a holder panicked (nothing here is left half-done by one).
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<T> Started<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Started<U> {
        match self {
            Started::Here(value) => Started::Here(f(value)),
            Started::Elsewhere(owner, cmd) => Started::Elsewhere(owner, cmd),
        }
    }
}

/// A client's send goes to the thread's owner; a forwarded one found this node is not
/// the owner (any more): the forwarding node looks again on the client's retry.
fn elsewhere<T>(
    origin: Origin,
    owner: crate::store::cluster::Owner,
    cmd: SendMessage,
) -> Result<Started<T>> {
    match origin {
        Origin::Client => Ok(Started::Elsewhere(owner, Box::new(cmd))),
        Origin::Peer => Err(not_the_owner(&owner)),
    }
}

fn not_the_owner(owner: &crate::store::cluster::Owner) -> Error {
    Error::Unavailable {
        detail: format!(
            "a forwarded request reached a node that does not serve its thread (node {} does)",
            owner.node_id
        ),
        retry_after_secs: 1,
    }
}

async fn await_reply<T>(rx: Option<oneshot::Receiver<Result<T>>>) -> Result<T> {
    let rx = rx.ok_or_else(|| Error::internal("no reply channel"))?;
    rx.await
        .map_err(|_| Error::internal("the thread actor dropped a request"))?
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `idempotency.window_secs` in milliseconds.
fn window_ms(secs: u64) -> i64 {
    i64::try_from(secs)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000)
}
