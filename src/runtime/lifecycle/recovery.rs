//! Start-up recovery (contract B.2, B.5): active threads come back from the store.
//!
//! The `threads.recover_eagerly` threads that can still be continued and expire last
//! (the most recently continued) are loaded into memory in the background once the
//! server listens, `threads.recover_concurrency` at a time, and never beyond `threads.max_resident_actors`
//! (checked before each thread). Loading a thread brings back its history window, state
//! and open tasks, and sweeps it (`maintenance.rs`). Every other thread is recovered
//! lazily: its actor loads it on the first request that names it, as always.
//!
//! Serving does not wait for it: requests for a thread being recovered meet the same
//! actor (the registry starts one per thread). `/health/ready` does wait, so an
//! orchestrator routes traffic to a warm instance; the wait is bounded by the number of
//! threads recovered.

use std::sync::Weak;

use futures_util::StreamExt;
use tokio::sync::watch;

use crate::domain::Timestamp;
use crate::runtime::Runtime;
use crate::runtime::thread::ThreadKey;
use crate::runtime::thread::maintenance::Recover;

/// Where start-up recovery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Not started (the server is not listening yet).
    Pending,
    Running,
    /// Finished: `recovered` threads loaded; `failed` could not be (each is logged, and
    /// loads again on its next request). `failed` counts a failed store read as one.
    Done {
        recovered: usize,
        failed: usize,
    },
}

impl super::Lifecycle<'_> {
    /// Where start-up recovery stands.
    pub fn recovery(self) -> Recovery {
        *self.0.recovery.borrow()
    }

    /// Waits until start-up recovery has finished; returns its outcome.
    pub async fn recovered(self) -> Recovery {
        let mut watch = self.0.recovery.subscribe();
        let done = watch
            .wait_for(|r| matches!(r, Recovery::Done { .. }))
            .await
            .map(|r| *r);
        done.unwrap_or(Recovery::Done {
            recovered: 0,
            failed: 0,
        })
    }

    async fn recover_threads(self) -> Recovery {
        if self.0.cluster.is_some() {
            // In a cluster the recent threads are mostly the other nodes'; what needs a
            // load is what dead nodes (and this id before the start) left working.
            let (recovered, failed) = self.0.sweep_orphans(true).await;
            return Recovery::Done { recovered, failed };
        }
        let settings = &self.0.settings.threads;
        let room = settings
            .max_resident_actors
            .saturating_sub(self.0.registry.resident());
        let limit = settings.recover_eagerly.min(room);
        if limit == 0 {
            return Recovery::Done {
                recovered: 0,
                failed: 0,
            };
        }
        let keys = match self.0.store.recent_threads(Timestamp::now(), limit).await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(error = %e, "start-up recovery could not list threads; they load on demand");
                return Recovery::Done {
                    recovered: 0,
                    failed: 1,
                };
            }
        };
        let max_resident = settings.max_resident_actors;
        let outcomes: Vec<Option<bool>> = futures_util::stream::iter(keys)
            .map(|(tenant, context_id)| async move {
                let stopping = self.0.shared.is_draining() || *self.0.stop.borrow();
                if stopping || self.0.registry.resident() >= max_resident {
                    return None;
                }
                let key = ThreadKey { tenant, context_id };
                match self.0.registry.call(&key, || Recover).await {
                    Ok(()) => Some(true),
                    // Stopped meanwhile: not a failure of the thread.
                    Err(_) if self.0.shared.is_draining() || *self.0.stop.borrow() => None,
                    Err(e) => {
                        tracing::warn!(context_id = %key.context_id, error = %e, "thread not recovered; it loads on its next request");
                        Some(false)
                    }
                }
            })
            .buffer_unordered(settings.recover_concurrency)
            .collect()
            .await;
        let recovered = outcomes.iter().filter(|o| **o == Some(true)).count();
        let failed = outcomes.iter().filter(|o| **o == Some(false)).count();
        Recovery::Done { recovered, failed }
    }
}

/// Runs start-up recovery once and publishes its outcome (also when the runtime is
/// stopping: then nothing more is loaded).
pub(in crate::runtime) async fn run(runtime: Weak<Runtime>, stop: watch::Receiver<bool>) {
    let Some(runtime) = runtime.upgrade() else {
        return;
    };
    runtime.recovery.send_replace(Recovery::Running);
    let started = std::time::Instant::now();
    let outcome = if *stop.borrow() {
        Recovery::Done {
            recovered: 0,
            failed: 0,
        }
    } else {
        runtime.lifecycle().recover_threads().await
    };
    if let Recovery::Done { recovered, failed } = outcome {
        tracing::info!(
            recovered,
            failed,
            ms = started.elapsed().as_millis() as u64,
            "start-up recovery done"
        );
    }
    runtime.recovery.send_replace(outcome);
}
