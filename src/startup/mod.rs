//! Assembling the process: the store (migrated), the skills, the actor runtime, the gate,
//! and the bindings' servers over one [`Service`] — the same for `main`, the examples,
//! the tests and the load generator. [`serve`] runs it until SIGTERM or SIGINT and then
//! shuts down gracefully (`shutdown.rs`).

mod card;
pub mod open_files;
pub mod shutdown;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};

use crate::a2a::card::SkillCard;
use crate::config::{ConfigError, Settings};
use crate::grpc::GoAway;
use crate::http::AppState;
use crate::runtime::Runtime;
use crate::runtime::{AgentExecutor, ExecutorSource};
use crate::service::Service;
use crate::service::auth::{Gate, GateError};
use crate::skills::SkillRegistry;
use crate::store::{StoreConfig, StoreError};

/// Where the skills of a server come from.
pub enum SkillSource {
    /// Governance, knowledge and memory, as enabled in the settings.
    Configured,
    /// Exactly these (possibly none).
    Registry(SkillRegistry),
}

/// What a program built on the library serves.
pub struct Agent {
    pub executor: ExecutorSource,
    /// The skills whose tools the runtime serves (each behind a skill actor) and the card
    /// lists with their tools' schemas.
    pub skills: SkillSource,
    /// Card entries for what the executor does by itself, without tools.
    pub cards: Vec<SkillCard>,
}

impl Agent {
    /// An executor with no tools.
    pub fn new(executor: Arc<dyn AgentExecutor>) -> Self {
        Self {
            executor: ExecutorSource::Custom(executor),
            skills: SkillSource::Registry(SkillRegistry::default()),
            cards: Vec::new(),
        }
    }

    /// What the configuration describes: its skills, and its agent (a model-backed agent
    /// loop when `agent.provider` is set, direct tool routing otherwise).
    pub fn configured() -> Self {
        Self {
            executor: ExecutorSource::Configured,
            skills: SkillSource::Configured,
            cards: Vec::new(),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot start the skills: {0}")]
    Runtime(#[from] crate::runtime::StartError),
    #[error("cannot build the skills: {0}")]
    Bootstrap(#[from] crate::skills::bootstrap::BootstrapError),
    #[error("cannot build the skills: remote agents: {0}")]
    RemoteAgents(String),
    #[error("cannot build the skills: MCP servers: {0}")]
    McpServers(String),
    #[error(transparent)]
    Auth(#[from] GateError),
    #[error("invalid push settings: {0}")]
    Push(String),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::JoinError),
    #[error("cannot sign the agent card: {0}")]
    CardSigning(String),
}

/// A started process: its listeners are bound and its runtime runs; [`Running::run`]
/// must be driven (e.g. by `actix_web::rt::spawn`) for the servers to serve.
pub struct Running {
    /// The HTTP address actually bound (useful with port 0).
    pub addr: SocketAddr,
    /// The gRPC address actually bound, when the binding is on.
    pub grpc_addr: Option<SocketAddr>,
    pub runtime: Arc<Runtime>,
    /// Pauses and stops every server.
    pub handles: Handles,
    servers: Vec<Server>,
}

impl Running {
    /// Serves until every server stopped (through [`Handles`]) or one failed.
    pub async fn run(self) -> std::io::Result<()> {
        for result in futures_util::future::join_all(self.servers).await {
            result?;
        }
        Ok(())
    }
}

/// The servers' handles.
#[derive(Clone)]
pub struct Handles {
    servers: Vec<ServerHandle>,
    /// The gRPC connections' switch (HTTP/2 connections outlive their calls; they are
    /// asked to close before their workers stop).
    go_away: Option<GoAway>,
}

impl Handles {
    /// Stops accepting connections on every listener; workers keep running.
    pub async fn pause(&self) {
        futures_util::future::join_all(self.servers.iter().map(ServerHandle::pause)).await;
    }

    /// Stops every server: `graceful` lets the requests in flight finish (within
    /// `server.shutdown_timeout_secs`).
    pub async fn stop(&self, graceful: bool) {
        if let Some(go_away) = &self.go_away {
            go_away.go_away();
        }
        futures_util::future::join_all(self.servers.iter().map(|h| h.stop(graceful))).await;
    }
}

/// Checks what [`Settings::load`] cannot: `config` imports nothing of the crate, so the
/// settings whose rules belong to another module are checked here, by that module —
/// `[[governance.policies]]` by the governance skill (every rule builds), and the
/// tenants of API keys and of OIDC issuers by the gate (built and dropped; it opens
/// nothing). The command line runs it right after loading, so an error exits like any
/// configuration error (status 2, before `migrate` or `serve` touch anything); [`start`]
/// makes the same checks first (the policies, then the gate it keeps).
pub fn check(settings: &Settings) -> Result<(), ConfigError> {
    crate::skills::governance::configured_policies(&settings.governance)?;
    // The gate's clients (JWK Sets) use rustls with ring, chosen once per process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Gate::new(settings).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    Ok(())
}

/// Opens the store (applying migrations), starts the actor runtime and binds the
/// listeners. Must run inside an actix `System`.
pub async fn start(settings: Settings, agent: Agent) -> Result<Running, StartError> {
    crate::skills::governance::configured_policies(&settings.governance)?;
    // Outgoing HTTPS (embeddings, model providers) uses rustls with ring; it must be
    // chosen once per process before any client is built. A second call is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let metrics = crate::telemetry::metrics_handle();
    let gate = Arc::new(Gate::new(&settings)?);
    let card_signer = card::signer(&settings.agent.card_signing)?;
    // Both listeners first: the card names both addresses, and in a cluster the other
    // nodes reach this one at the bound address.
    let listener = bind(settings.server.bind_addr()?)?;
    let addr = listener.local_addr()?;
    let grpc_listener = settings.server.grpc_bind_addr()?.map(bind).transpose()?;
    let grpc_addr = grpc_listener
        .as_ref()
        .map(std::net::TcpListener::local_addr)
        .transpose()?;
    let mut store_config = StoreConfig::from_settings(&settings);
    // A server without cluster mode serves its database alone; cluster nodes share it.
    store_config.hold = Some(match settings.cluster.enabled {
        true => crate::store::node_lock::Hold::Shared,
        false => crate::store::node_lock::Hold::Alone,
    });
    let fence = settings.cluster.enabled.then(|| {
        let node_id = match settings.cluster.node_id.trim() {
            "" => crate::cluster::default_node_id(),
            id => id.to_owned(),
        };
        crate::store::fence::Fence::new(node_id)
    });
    if let Some(fence) = &fence {
        let lease = Duration::from_millis(settings.cluster.lease_ttl_ms);
        store_config.fence = Some((fence.clone(), lease));
    }
    let store = crate::store::open(&store_config).await?;
    tracing::info!(backend = store.backend(), "store opened");
    let cluster = match fence {
        Some(fence) => {
            let url = match settings.cluster.advertise_url.trim() {
                "" => format!("http://{addr}"),
                url => url.trim_end_matches('/').to_owned(),
            };
            let database_url = settings.store.database_url.clone();
            let silence = store.silence().cloned().unwrap_or_default();
            let answer_timeout = Duration::from_millis(settings.store.answer_timeout_ms);
            Some(
                crate::cluster::Cluster::join(
                    &settings.cluster,
                    &database_url,
                    url,
                    fence,
                    (silence, answer_timeout),
                )
                .await?,
            )
        }
        None => None,
    };
    let skills = match agent.skills {
        SkillSource::Registry(registry) => registry,
        SkillSource::Configured => {
            // The tool sources: the skills, then the remote agents and the MCP servers.
            let mut registry =
                crate::skills::bootstrap::configured(&settings, &store_config).await?;
            crate::client::remote_agents(&settings, &mut registry)
                .await
                .map_err(StartError::RemoteAgents)?;
            crate::client::mcp_servers(&settings, &mut registry)
                .await
                .map_err(StartError::McpServers)?;
            registry
        }
    };
    let extra_cards = agent.cards;
    let runtime = Arc::new(Runtime::start(
        &settings,
        store,
        agent.executor,
        &skills,
        cluster,
    )?);
    let workers = match settings.server.workers {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    };
    let (before, soft, hard) = open_files::raise_limit();
    let budget = open_files::Budget::new(&settings, soft, grpc_listener.is_some())?;
    tracing::info!(
        open_files_soft = soft,
        open_files_hard = hard,
        raised_from = before,
        http_connections = budget.http,
        grpc_connections = budget.grpc,
        streams = budget.streams,
        "open-files limit and connection budget"
    );

    // Rendered again when the skills' tools change (an MCP server's list): the card
    // lists every tool with its schema.
    let config = card::card_config(&settings, addr, grpc_addr, &gate);
    let signer = card_signer.clone();
    let registry = skills.clone();
    let max_card_bytes = settings.server.max_card_bytes;
    let render = move || {
        let mut cards = skill_cards(&registry);
        cards.extend(extra_cards.iter().cloned());
        let mut card = crate::a2a::card::build_agent_card(&config, &cards);
        let size = serde_json::to_vec(&card).map_or(usize::MAX, |c| c.len());
        if size > max_card_bytes {
            tracing::warn!(
                bytes = size,
                max_card_bytes,
                "the agent card is past server.max_card_bytes: it is served without its tools' schemas"
            );
            cards.iter_mut().for_each(|c| c.tools.clear());
            card = crate::a2a::card::build_agent_card(&config, &cards);
        }
        if let Some(signer) = &signer {
            signer.sign(&mut card).map_err(|e| e.to_string())?;
        }
        Ok(card)
    };
    let public_card =
        crate::service::card::PublicCard::new(Box::new(render)).map_err(StartError::CardSigning)?;
    let push_policy = match settings.push.enabled {
        true => Some(Arc::new(
            crate::outbound::UrlPolicy::new(&settings.push).map_err(StartError::Push)?,
        )),
        false => None,
    };
    let service = Arc::new(Service::new(
        &settings,
        runtime.clone(),
        gate.clone(),
        public_card,
        card_signer,
        push_policy.clone(),
        budget.streams,
    ));
    let grpc = match grpc_listener {
        Some(grpc_listener) => Some(crate::grpc::server(
            service.clone(),
            grpc_listener,
            crate::grpc::Limits {
                workers,
                max_message_bytes: settings.server.max_body_bytes,
                max_streams_per_connection: settings.server.grpc_max_streams_per_connection,
                max_connections_per_worker: open_files::Budget::per_worker(budget.grpc, workers),
                shutdown_timeout_secs: settings.server.shutdown_timeout_secs,
                trusted_proxies: gate.trusted_proxies().clone(),
                proxy_header_timeout: Duration::from_millis(
                    settings.server.proxy_header_timeout_ms,
                ),
            },
        )?),
        None => None,
    };
    let state = AppState::new(&settings, service, metrics);
    let http = crate::http::server(
        state,
        listener,
        crate::http::Limits {
            workers,
            max_connections_per_worker: open_files::Budget::per_worker(budget.http, workers),
            shutdown_timeout_secs: settings.server.shutdown_timeout_secs,
            dashboard: settings.metrics.dashboard,
            trusted_proxies: gate.trusted_proxies().clone(),
            proxy_header_timeout: Duration::from_millis(settings.server.proxy_header_timeout_ms),
        },
    )?;
    let mut servers = vec![http];
    let mut go_away = None;
    if let Some(grpc) = grpc {
        tracing::info!(addr = %grpc.addr, "gRPC binding listening (lf.a2a.v1.A2AService, grpc.health.v1.Health)");
        servers.push(grpc.server);
        go_away = Some(grpc.go_away);
    }
    let handles = Handles {
        servers: servers.iter().map(Server::handle).collect(),
        go_away,
    };

    runtime.start_maintenance();
    if let Some(policy) = push_policy {
        crate::push::start(
            &runtime,
            &settings.push,
            policy,
            runtime.lifecycle().stopped(),
        )
        .map_err(StartError::Push)?;
    }
    actix_web::rt::spawn(upkeep(Arc::downgrade(&runtime)));
    actix_web::rt::spawn(forget_idle_limits(Arc::downgrade(&gate)));
    if settings.metrics.census_interval_secs > 0 {
        let pace = CensusPace {
            every: Duration::from_secs(settings.metrics.census_interval_secs),
            max_busy_percent: u32::try_from(settings.metrics.census_max_busy_percent)
                .unwrap_or(100),
        };
        actix_web::rt::spawn(census(Arc::downgrade(&runtime), pace));
    }
    if settings.store.is_postgres() && settings.store.postgres_analyze_interval_secs > 0 {
        let every = Duration::from_secs(settings.store.postgres_analyze_interval_secs);
        actix_web::rt::spawn(planner_statistics(Arc::downgrade(&runtime), every));
    }
    Ok(Running {
        addr,
        grpc_addr,
        runtime,
        handles,
        servers,
    })
}

fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, StartError> {
    std::net::TcpListener::bind(addr).map_err(|source| StartError::Bind {
        addr: addr.to_string(),
        source,
    })
}

/// Drops the rate-limit state of tenants idle long enough to have a full budget again, so
/// the limiters hold only recent callers (proxy mode admits any tenant name).
async fn forget_idle_limits(gate: std::sync::Weak<Gate>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        match gate.upgrade() {
            Some(gate) => gate.retain_recent(),
            None => return,
        }
    }
}

/// The card entries of the registered skills, with their tools' input schemas.
pub fn skill_cards(skills: &crate::skills::SkillRegistry) -> Vec<crate::a2a::card::SkillCard> {
    use crate::a2a::card::{SkillCard, ToolCard};
    skills
        .skills()
        .iter()
        .map(|s| {
            let info = s.info().clone();
            SkillCard {
                id: info.id,
                name: info.name,
                description: info.description,
                tags: info.tags,
                examples: info.examples,
                tools: s
                    .tools()
                    .into_iter()
                    .map(|t| ToolCard {
                        name: t.name,
                        description: t.description,
                        input_schema: t.input_schema,
                        output_schema: t.output_schema,
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Runs the server until SIGTERM or SIGINT, then shuts down gracefully.
pub async fn serve(settings: Settings, agent: Agent) -> Result<(), StartError> {
    let timeout = Duration::from_secs(settings.server.shutdown_timeout_secs);
    let notice = match settings.cluster.enabled {
        true => Duration::from_millis(settings.cluster.drain_notice_ms),
        false => Duration::ZERO,
    };
    let running = start(settings, agent).await?;
    tracing::info!(addr = %running.addr, "agent-a2a listening; card at http://{}/.well-known/agent-card.json", running.addr);
    let handles = running.handles.clone();
    let runtime = running.runtime.clone();
    let mut server = actix_web::rt::spawn(running.run());
    let joined = tokio::select! {
        joined = &mut server => Some(joined),
        name = shutdown::signal() => {
            tracing::info!(signal = name, "shutting down gracefully");
            None
        }
    };
    let joined = match joined {
        Some(joined) => {
            // The server ended by itself (an I/O error): nothing left to drain for.
            runtime.lifecycle().shutdown();
            joined
        }
        None => {
            shutdown::graceful(&handles, &runtime, notice, timeout).await;
            server.await
        }
    };
    joined.map_err(std::io::Error::other)??;
    tracing::info!("stopped");
    Ok(())
}

/// Keeps the metrics exporter's histograms fresh while the runtime lives (the exporter
/// spawns no upkeep task of its own when installed as a plain recorder).
async fn upkeep(runtime: std::sync::Weak<Runtime>) {
    let metrics = crate::telemetry::metrics_handle();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    while runtime.strong_count() > 0 {
        tick.tick().await;
        metrics.run_upkeep();
    }
}

/// When the store census runs (`metrics.census_interval_secs`,
/// `metrics.census_max_busy_percent`).
#[derive(Debug, Clone, Copy)]
struct CensusPace {
    every: Duration,
    max_busy_percent: u32,
}

impl CensusPace {
    /// The wait after a census that took `took`: the interval, or longer where that would
    /// make censuses take more than their share of the time. A census reads every task
    /// row, so on a store of millions it takes seconds, and at a fixed interval its share
    /// of the machine would grow with the store.
    fn wait_after(&self, took: Duration) -> Duration {
        // Validated to 1..=100; the clamp keeps a zero from dividing.
        let busy = self.max_busy_percent.clamp(1, 100);
        let rest = took.saturating_mul(100 - busy) / busy;
        self.every.max(rest)
    }
}

/// Postgres: every `every`, analyzes the server's tables that have doubled since their
/// last analysis (`Store::refresh_statistics`), so that statements kept prepared are
/// planned again from their present size. A failure is logged and tried again at the
/// next turn.
async fn planner_statistics(runtime: std::sync::Weak<Runtime>, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(store) = runtime.upgrade().map(|r| r.store().clone()) else {
            return;
        };
        match store.refresh_statistics().await {
            Ok(analyzed) => {
                for table in analyzed {
                    tracing::debug!(table, "analyzed a table that had doubled in size");
                    metrics::counter!(crate::telemetry::POSTGRES_ANALYZED, "table" => table)
                        .increment(1);
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not refresh Postgres' statistics"),
        }
    }
}

/// Counts active threads and tasks by state in the store while the runtime lives, and
/// publishes them as gauges, paced by [`CensusPace`]. A failed count keeps the last
/// values (and says so in the log): a gauge that dropped to 0 would be a lie.
async fn census(runtime: std::sync::Weak<Runtime>, pace: CensusPace) {
    use crate::domain::{TaskState, Timestamp};
    use crate::telemetry::{CENSUS_MS, TASKS, THREADS_ACTIVE};
    // The first census at once, so the gauges are there from the start.
    let mut wait = Duration::ZERO;
    loop {
        tokio::time::sleep(wait).await;
        let Some(store) = runtime.upgrade().map(|r| r.store().clone()) else {
            return;
        };
        let started = std::time::Instant::now();
        let counted = store.census(Timestamp::now()).await;
        let took = started.elapsed();
        drop(store);
        metrics::histogram!(CENSUS_MS).record(took.as_secs_f64() * 1000.0);
        wait = pace.wait_after(took);
        if wait > pace.every {
            tracing::debug!(
                took_ms = took.as_millis() as u64,
                next_in_secs = wait.as_secs(),
                "store census took long; the next one waits longer"
            );
        }
        match counted {
            Ok(census) => {
                metrics::gauge!(THREADS_ACTIVE).set(census.active_threads as f64);
                // Every state gets a series, at 0 when no task is in it.
                for state in TaskState::ALL {
                    let count = census
                        .tasks_by_state
                        .iter()
                        .find(|(name, _)| name == state.as_str())
                        .map_or(0, |(_, n)| *n);
                    metrics::gauge!(TASKS, "state" => state.as_str()).set(count as f64);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "store census failed; thread and task gauges keep their last values")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_census_waits_its_interval_or_long_enough_to_stay_within_its_share() {
        let wait = |every: u64, max_busy_percent: u32, took: Duration| {
            CensusPace {
                every: Duration::from_secs(every),
                max_busy_percent,
            }
            .wait_after(took)
        };
        let secs = Duration::from_secs;
        // Quick censuses keep the interval.
        assert_eq!(wait(15, 1, Duration::from_millis(20)), secs(15));
        assert_eq!(wait(15, 1, Duration::ZERO), secs(15));
        // A census of 3 s at 1 %: 297 s before the next.
        assert_eq!(wait(15, 1, secs(3)), secs(297));
        assert_eq!(wait(1, 50, secs(4)), secs(4));
        assert_eq!(wait(1, 100, secs(4)), secs(1));
    }
}
