//! The runtime's dependencies, checked for `/health`: the store (a real round trip),
//! every skill's engine (through its actor: the knowledge repository's HEAD, the memory
//! table), and every model provider's circuit breaker (asked of its actor: a health check
//! never calls a paid provider API).
//!
//! What counts as down: the store or any skill — the server cannot do its work without
//! them, so `/health` answers 503 and an orchestrator may restart or stop routing. A
//! provider whose circuit is open makes the server *degraded* (200): it still serves
//! (explicit tool calls need no model, the breaker retries by itself), and a restart would
//! not bring a remote provider back.
//!
//! Every check is bounded by `health.timeout_ms`; the checks run at once.

use std::time::Instant;

use crate::runtime::model_actor::{Breaker, Circuit};

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub up: bool,
    /// How long the check took, in milliseconds.
    pub latency_ms: f64,
    /// Why it is down, in words safe to show anyone (the detail is logged).
    pub problem: Option<&'static str>,
}

/// A provider's circuit breaker, or `None` when its actor did not answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderHealth {
    pub name: String,
    pub breaker: Option<Breaker>,
}

impl ProviderHealth {
    /// Calls go through (closed, or half-open: the next call is let through).
    pub fn serving(&self) -> bool {
        self.breaker
            .as_ref()
            .is_some_and(|b| !matches!(b.circuit, Circuit::Open { .. }))
    }
}

/// Overall: every required dependency is up (`Ok`), some provider is not (`Degraded`),
/// or something required is down (`Unavailable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overall {
    Ok,
    Degraded,
    Unavailable,
}

/// Every dependency's state.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthReport {
    pub store: Check,
    /// By skill id, in registration order.
    pub skills: Vec<(String, Check)>,
    /// By provider name, sorted.
    pub providers: Vec<ProviderHealth>,
}

impl HealthReport {
    pub fn overall(&self) -> Overall {
        if !self.store.up || self.skills.iter().any(|(_, c)| !c.up) {
            Overall::Unavailable
        } else if self.providers.iter().all(ProviderHealth::serving) {
            Overall::Ok
        } else {
            Overall::Degraded
        }
    }
}

impl super::Lifecycle<'_> {
    /// New sends need a database that answers and, in cluster mode, this node's lease:
    /// otherwise they are refused at once (503, retryable) instead of waiting for the
    /// store's bound, and a probe of the database goes out to end the silence.
    pub(in crate::runtime) fn serving_writes(self) -> crate::error::Result<()> {
        if self.store_silent() {
            self.probe_store();
            return Err(crate::error::Error::Unavailable {
                detail: "the database does not answer (a call to it went unanswered past its bound); retry shortly".into(),
                retry_after_secs: 1,
            });
        }
        if !self.0.lifecycle().holds_lease() {
            return Err(crate::cluster::not_holding_lease());
        }
        Ok(())
    }

    /// Postgres did not answer a call within its bound, and nothing since (`store::Silence`).
    pub fn store_silent(self) -> bool {
        self.0.store.silence().is_some_and(|s| s.is_silent())
    }

    /// While the database is silent: one ping on its way at a time (bounded by
    /// `health.timeout_ms`), whose answer ends the silence.
    pub fn probe_store(self) {
        let Some(silence) = self.0.store.silence() else {
            return;
        };
        if !silence.probe() {
            return;
        }
        let (store, silence) = (self.0.store.clone(), silence.clone());
        let timeout = self.0.settings.health_timeout;
        actix::spawn(async move {
            let _ = tokio::time::timeout(timeout, store.ping()).await;
            silence.probed();
        });
    }

    /// A real round trip to the store, bounded by `health.timeout_ms`.
    pub async fn check_store(self) -> Check {
        let timeout = self.0.settings.health_timeout;
        let started = Instant::now();
        let outcome = tokio::time::timeout(timeout, self.0.store.ping()).await;
        let latency_ms = elapsed_ms(started);
        match outcome {
            Ok(Ok(())) => up(latency_ms),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "health: store check failed");
                down(latency_ms, "store unreachable")
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = timeout.as_millis() as u64,
                    "health: store check timed out"
                );
                down(latency_ms, TIMED_OUT)
            }
        }
    }

    /// Checks every dependency (see the module documentation).
    pub async fn health(self) -> HealthReport {
        let timeout = self.0.settings.health_timeout;
        let store = self.check_store();
        let skills = async {
            self.0.tools
                .health(timeout)
                .await
                .into_iter()
                .map(|(id, result, took)| {
                    let latency_ms = took.as_secs_f64() * 1000.0;
                    let check = match result {
                        Ok(()) => up(latency_ms),
                        Err(e) if took >= timeout => {
                            tracing::warn!(skill = %id, error = %e, "health: skill check timed out");
                            down(latency_ms, TIMED_OUT)
                        }
                        Err(e) => {
                            tracing::warn!(skill = %id, error = %e, "health: skill check failed");
                            down(latency_ms, "skill engine unavailable")
                        }
                    };
                    (id, check)
                })
                .collect()
        };
        let providers = async {
            self.0
                .models
                .breakers(timeout)
                .await
                .into_iter()
                .map(|(name, breaker)| ProviderHealth { name, breaker })
                .collect()
        };
        let (store, skills, providers) = tokio::join!(store, skills, providers);
        HealthReport {
            store,
            skills,
            providers,
        }
    }
}

/// What a check that did not answer in time reports.
const TIMED_OUT: &str = "no answer within health.timeout_ms";

fn elapsed_ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

fn up(latency_ms: f64) -> Check {
    Check {
        up: true,
        latency_ms,
        problem: None,
    }
}

fn down(latency_ms: f64, problem: &'static str) -> Check {
    Check {
        up: false,
        latency_ms,
        problem: Some(problem),
    }
}
