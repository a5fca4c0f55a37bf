//! The runtime's side of cluster mode: when this node loses its lease every thread actor
//! leaves memory (their commits carry the old token and would be refused), and the
//! leader periodically takes over the threads dead nodes left with a task working, which
//! fails those tasks as interrupted — as a restart does on a single node.

use std::sync::Weak;

use actix::Addr;
use tokio::sync::watch;

use crate::runtime::Runtime;
use crate::runtime::thread::maintenance::{Recover, Release};
use crate::runtime::thread::{ThreadActor, ThreadKey};

/// Threads of dead nodes taken over per sweep.
const SWEEP_BATCH: i64 = 100;

impl Runtime {
    /// Takes over the threads a node left with a task working, and loads them (which
    /// fails those tasks as interrupted): those of every dead node not looked through
    /// since it died, and with `own` those of this node's id from before it started.
    /// Returns how many were loaded and how many could not be.
    pub(in crate::runtime) async fn sweep_orphans(&self, own: bool) -> (usize, usize) {
        let Some(cluster) = &self.cluster else {
            return (0, 0);
        };
        let (mut loaded, mut failed) = (0, 0);
        if own {
            let (l, f) = self.load_left_working(cluster.node_id()).await;
            loaded += l;
            failed += f;
        }
        let dead = match cluster.dead().unswept().await {
            Ok(dead) => dead,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for dead nodes");
                return (loaded, failed + 1);
            }
        };
        for node in dead {
            let (l, f) = self.load_left_working(&node.node_id).await;
            loaded += l;
            failed += f;
            // Looked through to the end: not again until it dies again. (A page full, or
            // a thread not taken over, is looked at again on the next sweep.)
            if f == 0
                && l < SWEEP_BATCH as usize
                && let Err(e) = cluster.dead().swept(&node).await
            {
                tracing::warn!(node = %node.node_id, error = %e, "cannot record a dead node as swept");
            }
        }
        if loaded > 0 {
            tracing::info!(loaded, "took over threads that dead nodes left working");
        }
        (loaded, failed)
    }

    /// Loads (placing, so taking over) the threads `node_id` owns with a task working.
    async fn load_left_working(&self, node_id: &str) -> (usize, usize) {
        let Some(cluster) = &self.cluster else {
            return (0, 0);
        };
        let threads = match cluster.dead().left_working(node_id, SWEEP_BATCH).await {
            Ok(threads) => threads,
            Err(e) => {
                tracing::warn!(node = node_id, error = %e, "cannot list the threads a node left working");
                return (0, 1);
            }
        };
        let (mut loaded, mut failed) = (0, 0);
        for (tenant, context_id) in threads {
            let key = ThreadKey { tenant, context_id };
            match self.registry.call(&key, || Recover).await {
                Ok(()) => loaded += 1,
                Err(e) => {
                    failed += 1;
                    tracing::warn!(context_id = %key.context_id, error = %e, "thread of a dead node not taken over; the next request or sweep tries again");
                }
            }
        }
        (loaded, failed)
    }

    /// Every resident actor leaves memory.
    fn release_all(&self) {
        let actors: Vec<Addr<ThreadActor>> = self
            .shared
            .actors
            .iter()
            .map(|entry| entry.value().1.clone())
            .collect();
        tracing::warn!(
            actors = actors.len(),
            "lease lost: every thread leaves memory"
        );
        for addr in actors {
            addr.do_send(Release);
        }
    }
}

/// Releases every actor when the lease is lost, and runs the leader's sweep once a
/// lease, until `stop`.
pub(in crate::runtime) async fn run(runtime: Weak<Runtime>, mut stop: watch::Receiver<bool>) {
    let Some((mut losses, every)) = runtime
        .upgrade()
        .and_then(|r| r.cluster.as_ref().map(|c| (c.losses(), c.sweep_interval())))
    else {
        return;
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            changed = losses.changed() => {
                if changed.is_err() {
                    return;
                }
                let Some(runtime) = runtime.upgrade() else { return };
                runtime.release_all();
            }
            _ = tick.tick() => {
                let Some(runtime) = runtime.upgrade() else { return };
                let leads = runtime.cluster.as_ref().is_some_and(|c| c.is_leader());
                if leads && !runtime.lifecycle().is_draining() {
                    runtime.sweep_orphans(false).await;
                }
            }
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}
