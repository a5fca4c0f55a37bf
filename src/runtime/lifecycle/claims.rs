//! The loads of the claim filter (`runtime/claim_filter.rs`): every claim in the
//! idempotency window, oldest first, in pages. Until a load has finished, every send
//! reads the store for an earlier claim of its key, as without the filter; a failed load
//! is retried.
//!
//! A process that serves its store alone loads once, when the server listens. In a
//! cluster the filter also hears the claims of the other nodes as they commit
//! (`cluster::notify`), so a load begins each time the node begins to hear them — on
//! every connection of its listener: the first loads the window; a later one, what was
//! claimed since the filter stopped hearing (less [`CATCH_UP_MARGIN`]).

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;

use crate::domain::Timestamp;
use crate::runtime::Runtime;
use crate::store::StoreError;

/// Claims read per query.
const PAGE: usize = 10_000;

/// How long a failed load waits before it tries again.
const RETRY: Duration = Duration::from_secs(5);

/// How far before the filter stopped hearing claims a catch-up load begins: a claim is
/// stamped with its node's clock when its turn begins, and committed (and notified) a
/// little later. A claim committed unheard that is older still is missed by the filter;
/// a retry of it then runs its turn, which the store refuses (the claim's unique key),
/// and gets the first send's outcome all the same.
const CATCH_UP_MARGIN_MS: i64 = 5 * 60 * 1000;

/// Loads the claim filter, if the runtime has one, retrying until it is loaded or the
/// runtime stops; in a cluster, again each time the node begins to hear claims.
pub(in crate::runtime) async fn load(runtime: Weak<Runtime>, stop: watch::Receiver<bool>) {
    let hearing = match runtime.upgrade() {
        Some(rt) if rt.claim_filter.is_some() => rt.cluster.as_ref().map(|c| c.hub().hearing()),
        _ => return,
    };
    match hearing {
        None => load_until_done(runtime, stop).await,
        Some(hearing) => follow(runtime, stop, hearing).await,
    }
}

/// In a cluster: a load after each start of hearing claims.
async fn follow(
    runtime: Weak<Runtime>,
    mut stop: watch::Receiver<bool>,
    mut hearing: watch::Receiver<u64>,
) {
    if *hearing.borrow() > 0 {
        // The node began to hear claims before this loop began to follow.
        hearing.mark_changed();
    }
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            changed = hearing.changed() => if changed.is_err() { return },
        }
        // Marked seen before the load: a new start while it runs loads again.
        hearing.borrow_and_update();
        let Some(rt) = runtime.upgrade() else { return };
        let started = std::time::Instant::now();
        let since = rt
            .claim_filter
            .as_ref()
            .and_then(|f| f.unsure_since())
            .map(|ms| ms.saturating_sub(CATCH_UP_MARGIN_MS));
        match rt.load_claims_since(since).await {
            Ok(Some((claims, true))) => tracing::info!(
                claims,
                ms = started.elapsed().as_millis() as u64,
                catch_up = since.is_some(),
                "idempotency claims loaded and the cluster's heard: new keys no longer read the store"
            ),
            Ok(Some((_, false))) => {}
            Ok(None) => return,
            Err(e) => {
                load_failed(&e);
                drop(rt);
                tokio::select! {
                    _ = stop.changed() => return,
                    () = tokio::time::sleep(RETRY) => {}
                }
                // Try again as if the node had begun hearing anew.
                hearing.mark_changed();
            }
        }
    }
}

/// A process serving its store alone: one load.
async fn load_until_done(runtime: Weak<Runtime>, mut stop: watch::Receiver<bool>) {
    loop {
        let Some(rt) = runtime.upgrade() else { return };
        let started = std::time::Instant::now();
        match rt.load_claims().await {
            Ok(Some(claims)) => {
                tracing::info!(
                    claims,
                    ms = started.elapsed().as_millis() as u64,
                    "idempotency claims loaded: new keys no longer read the store"
                );
                return;
            }
            Ok(None) => return,
            Err(e) => load_failed(&e),
        }
        drop(rt);
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

fn load_failed(e: &StoreError) {
    tracing::warn!(
        error = %e,
        "idempotency claims could not be loaded; sends read the store for their key until they are (retrying)"
    );
}

impl Runtime {
    /// Reads the claims of the window into the claim filter: how many, or `None` if
    /// there is no filter or the runtime stopped first.
    pub(in crate::runtime) async fn load_claims(&self) -> Result<Option<usize>, StoreError> {
        Ok(self.load_claims_since(None).await?.map(|(count, _)| count))
    }

    /// Reads the claims made since `since` (ms; the whole window if `None` or earlier)
    /// into the claim filter: how many, and whether misses are certain now (not if the
    /// filter stopped hearing claims meanwhile); `None` if there is no filter or the
    /// runtime stopped first.
    pub(in crate::runtime) async fn load_claims_since(
        &self,
        since: Option<i64>,
    ) -> Result<Option<(usize, bool)>, StoreError> {
        let Some(filter) = &self.claim_filter else {
            return Ok(None);
        };
        let window_start = Timestamp::now()
            .millis()
            .saturating_sub(self.settings.idempotency_window_ms);
        let mut from = since.map_or(window_start, |since| since.max(window_start));
        let mut loading = filter.loading();
        let mut count = 0;
        loop {
            if *self.stop.borrow() {
                return Ok(None);
            }
            let page = self
                .store
                .claim_keys(Timestamp(from), None, Some(PAGE))
                .await?;
            count += page.len();
            for (tenant, key, at) in &page {
                loading.add(tenant, key, at.millis());
            }
            let (Some(first), Some(last)) = (page.first(), page.last()) else {
                break;
            };
            if page.len() < PAGE {
                break;
            }
            let (first, last) = (first.2.millis(), last.2.millis());
            if first < last {
                // The next page starts again at the last page's last millisecond.
                from = last;
                continue;
            }
            // A whole page in one millisecond: the rest of that millisecond at once.
            let rest = self
                .store
                .claim_keys(Timestamp(last), Some(Timestamp(last + 1)), None)
                .await?;
            count += rest.len();
            for (tenant, key, at) in &rest {
                loading.add(tenant, key, at.millis());
            }
            from = last + 1;
        }
        let certain = loading.finish(Timestamp::now().millis());
        Ok(Some((count, certain)))
    }
}
