//! Start-up's load of the claim filter (`runtime/claim_filter.rs`): every claim in the
//! idempotency window, oldest first, in pages, once the server listens. Until it has
//! finished, every send reads the store for an earlier claim of its key, as without the
//! filter; a failed load is retried.

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

/// Loads the claim filter, if the runtime has one, retrying until it is loaded or the
/// runtime stops.
pub(in crate::runtime) async fn load(runtime: Weak<Runtime>, mut stop: watch::Receiver<bool>) {
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
            Err(e) => tracing::warn!(
                error = %e,
                "idempotency claims could not be loaded; sends read the store for their key until they are (retrying)"
            ),
        }
        drop(rt);
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

impl Runtime {
    /// Reads the claims of the window into the claim filter: how many, or `None` if
    /// there is no filter or the runtime stopped first.
    pub(in crate::runtime) async fn load_claims(&self) -> Result<Option<usize>, StoreError> {
        let Some(filter) = &self.claim_filter else {
            return Ok(None);
        };
        let mut from = Timestamp::now()
            .millis()
            .saturating_sub(self.settings.idempotency_window_ms);
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
        loading.finish(Timestamp::now().millis());
        Ok(Some(count))
    }
}
