//! Which idempotency keys were surely never claimed: lets a send under a new key skip the
//! store read that would look for an earlier send of it.
//!
//! A process that serves its store alone (no cluster) writes every claim the store holds
//! that it did not find there at start-up. So a Bloom filter of the claims loaded at
//! start-up and of every claim made since answers "never claimed" with certainty, and
//! "maybe" for a retry (and for about one new key in a hundred): only those read the
//! store. Claims count within `idempotency.window_secs`, so the filter is kept in time
//! slices that are dropped once their newest claim has left the window.
//!
//! In a cluster, the other nodes claim keys too: each commit notifies the keys it claimed
//! (`store::cluster::CLAIMS_CHANNEL`), and the filter of every other node adds them
//! ([`ClaimListener`]). It is certain only while it hears them: when the listening
//! connection drops it becomes [unsure](ClaimFilter::unsure) — every send reads — until
//! a load of what was claimed meanwhile, begun after the node listens again, finishes
//! (`lifecycle/claims.rs`). A key claimed on another node is heard once that node's
//! commit is done, so a retry that reaches this node before (within the notification's
//! delivery, or a claim the catch-up load is too late for) finds no claim and runs its
//! turn; the store then refuses the turn's claim (its unique key), the turn leaves
//! nothing behind, and the retry gets the first send's outcome — as two racing sends do.
//!
//! It is bounded by `idempotency.filter_keys`. More claims within the window than that
//! makes the filter drop its oldest slice early; until the claims of that slice have
//! left the window, a miss may be a claim the filter forgot, so every send reads the
//! store again (as it does with the filter off, and before the load has finished).

use std::hash::{BuildHasher, Hasher};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

use fastbloom::AtomicBloomFilter;

use crate::cluster::notify::ClaimListener;
use crate::domain::{TenantId, Timestamp};

/// Slices the window is cut into: a slice is retired a window after its newest claim.
const SLICES_PER_WINDOW: i64 = 8;

/// Slices kept at most: under a steady stream of claims a slice is retired a window
/// after its span ends, so the window's slices and the one taking claims are live at
/// once — one more than the window is cut into. Fewer would drop a slice whose claims
/// are still in the window (and make every miss uncertain) once every window.
const MAX_SLICES: u64 = SLICES_PER_WINDOW as u64 + 1;

/// The false positive rate of a slice filled to its size: ~1.2 bytes per key.
const FALSE_POSITIVES: f64 = 0.01;

/// See the module documentation.
pub(super) struct ClaimFilter {
    window_ms: i64,
    /// Claims per slice.
    slice_keys: usize,
    /// How long a slice takes claims before the next one opens.
    slice_span_ms: i64,
    /// Slices kept at most (`idempotency.filter_keys` is `slice_keys` times this).
    max_slices: usize,
    seed: u128,
    live: RwLock<Slices>,
    /// The load of the stored claims has finished (and, in a cluster, the node has heard
    /// every claim since): a miss is certain.
    loaded: AtomicBool,
}

/// Slices, oldest first; the last one takes new claims.
struct Slices {
    list: Vec<Slice>,
    /// Until this time (ms) a miss may be a claim the filter had to forget.
    blind_until_ms: i64,
    /// Counts the times the filter stopped hearing of other nodes' claims
    /// ([`ClaimFilter::unsure`]): a load begun before the last of them does not make
    /// misses certain.
    epoch: u64,
    /// When it last stopped hearing them while certain (ms), if it did.
    unsure_since_ms: Option<i64>,
}

struct Slice {
    bloom: AtomicBloomFilter,
    keys: AtomicUsize,
    opened_ms: i64,
    newest_ms: AtomicI64,
}

/// Claims loaded from the store at start-up, oldest first, into slices of their own.
pub(super) struct Loading<'a> {
    filter: &'a ClaimFilter,
    slices: Slices,
    epoch: u64,
}

impl ClaimFilter {
    /// A filter for claims within `window_ms`, remembering at most `capacity` of them
    /// (at least one per slice).
    pub(super) fn new(window_ms: i64, capacity: u64) -> Self {
        let slices = MAX_SLICES as usize;
        let slice_keys = usize::try_from(capacity / MAX_SLICES)
            .unwrap_or(usize::MAX)
            .max(1);
        let state = std::collections::hash_map::RandomState::new();
        let (mut a, mut b) = (state.build_hasher(), state.build_hasher());
        a.write_u8(0);
        b.write_u8(1);
        Self {
            window_ms: window_ms.max(1),
            slice_keys,
            slice_span_ms: (window_ms / SLICES_PER_WINDOW).max(1),
            max_slices: slices,
            seed: (u128::from(a.finish()) << 64) | u128::from(b.finish()),
            live: RwLock::new(Slices {
                list: Vec::new(),
                blind_until_ms: 0,
                epoch: 0,
                unsure_since_ms: None,
            }),
            loaded: AtomicBool::new(false),
        }
    }

    /// Whether `key` may have been claimed by `tenant` within the window at `now_ms`:
    /// `false` is certain; `true` means the store must be asked.
    pub(super) fn may_be_claimed(&self, tenant: &TenantId, key: &str, now_ms: i64) -> bool {
        if !self.loaded.load(Ordering::Acquire) {
            return true;
        }
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        if now_ms < live.blind_until_ms {
            return true;
        }
        let Some(first) = live.list.first() else {
            return false;
        };
        let hash = first.bloom.source_hash(&(tenant.as_str(), key));
        let oldest = now_ms.saturating_sub(self.window_ms);
        live.list.iter().any(|slice| {
            slice.newest_ms.load(Ordering::Relaxed) >= oldest && slice.bloom.contains_hash(hash)
        })
    }

    /// Remembers that `tenant` claims `key` at `at_ms` (before the claim is written:
    /// the filter holds at least what the store holds).
    pub(super) fn insert(&self, tenant: &TenantId, key: &str, at_ms: i64) {
        self.insert_str(tenant.as_str(), key, at_ms);
    }

    fn insert_str(&self, tenant: &str, key: &str, at_ms: i64) {
        let item = (tenant, key);
        {
            let live = self.live.read().unwrap_or_else(|e| e.into_inner());
            if let Some(slice) = live.list.last().filter(|s| self.takes(s, at_ms)) {
                slice.add(&item, at_ms);
                return;
            }
        }
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        self.add(&mut live, &item, at_ms);
    }

    /// Starts loading the store's claims (see [`Loading`]).
    pub(super) fn loading(&self) -> Loading<'_> {
        let epoch = self.live.read().unwrap_or_else(|e| e.into_inner()).epoch;
        Loading {
            filter: self,
            slices: Slices {
                list: Vec::new(),
                blind_until_ms: 0,
                epoch,
                unsure_since_ms: None,
            },
            epoch,
        }
    }

    /// Misses are no longer certain: in a cluster, the node stopped hearing of the other
    /// nodes' claims (its listening connection dropped). Every send reads the store again
    /// until a load begun after this finishes.
    pub(super) fn unsure(&self, now_ms: i64) {
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        live.epoch += 1;
        if self.loaded.swap(false, Ordering::AcqRel) {
            live.unsure_since_ms = Some(now_ms);
        }
    }

    /// Since when (ms) claims may have gone unheard: `None` if the filter never was
    /// certain, so the whole window must be loaded.
    pub(super) fn unsure_since(&self) -> Option<i64> {
        self.live
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .unsure_since_ms
    }

    /// Whether misses are certain (loaded, and nothing forgotten within the window).
    pub(super) fn is_certain(&self, now_ms: i64) -> bool {
        self.loaded.load(Ordering::Acquire)
            && now_ms
                >= self
                    .live
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .blind_until_ms
    }

    fn takes(&self, slice: &Slice, at_ms: i64) -> bool {
        slice.keys.load(Ordering::Relaxed) < self.slice_keys
            && at_ms.saturating_sub(slice.opened_ms) < self.slice_span_ms
    }

    /// Adds a claim to `slices`, opening a slice (and retiring old ones) when needed.
    fn add(&self, slices: &mut Slices, item: &(&str, &str), at_ms: i64) {
        if !slices.list.last().is_some_and(|s| self.takes(s, at_ms)) {
            slices.list.push(Slice {
                bloom: AtomicBloomFilter::with_false_pos(FALSE_POSITIVES)
                    .seed(&self.seed)
                    .expected_items(self.slice_keys),
                keys: AtomicUsize::new(0),
                opened_ms: at_ms,
                newest_ms: AtomicI64::new(at_ms),
            });
            self.retire(slices, at_ms);
        }
        if let Some(slice) = slices.list.last() {
            slice.add(item, at_ms);
        }
    }

    /// Drops slices whose claims have all left the window at `now_ms`, then the oldest
    /// beyond `max_slices` (making misses uncertain while its claims are in the window).
    fn retire(&self, slices: &mut Slices, now_ms: i64) {
        let oldest = now_ms.saturating_sub(self.window_ms);
        slices
            .list
            .retain(|s| s.newest_ms.load(Ordering::Relaxed) >= oldest);
        let excess = slices.list.len().saturating_sub(self.max_slices);
        if excess == 0 {
            return;
        }
        for dropped in slices.list.drain(..excess) {
            let until = dropped
                .newest_ms
                .load(Ordering::Relaxed)
                .saturating_add(self.window_ms);
            if until > slices.blind_until_ms && until > now_ms {
                tracing::warn!(
                    limit = self.slice_keys.saturating_mul(self.max_slices),
                    "more idempotency keys were claimed within idempotency.window_secs \
                     than idempotency.filter_keys holds: every send reads the store for \
                     its key until the forgotten ones leave the window"
                );
            }
            slices.blind_until_ms = slices.blind_until_ms.max(until);
        }
    }
}

/// In a cluster, the filter hears the keys the other nodes claim.
impl ClaimListener for ClaimFilter {
    fn claimed(&self, tenant: &str, key: &str) {
        self.insert_str(tenant, key, Timestamp::now().millis());
    }

    fn deaf(&self) {
        self.unsure(Timestamp::now().millis());
    }
}

impl Slice {
    fn add(&self, item: &(&str, &str), at_ms: i64) {
        self.bloom.insert(item);
        self.keys.fetch_add(1, Ordering::Relaxed);
        self.newest_ms.fetch_max(at_ms, Ordering::Relaxed);
    }
}

impl Loading<'_> {
    /// Adds a stored claim; claims come oldest first.
    pub(super) fn add(&mut self, tenant: &TenantId, key: &str, at_ms: i64) {
        self.filter
            .add(&mut self.slices, &(tenant.as_str(), key), at_ms);
    }

    /// The stored claims are all in: they join the claims made meanwhile, and misses
    /// become certain (unless more claims are in the window than the filter holds) —
    /// unless the filter became [unsure](ClaimFilter::unsure) since the load began, which
    /// `false` tells: a claim may then have been missed, and a load must begin again.
    pub(super) fn finish(self, now_ms: i64) -> bool {
        let filter = self.filter;
        let mut live = filter.live.write().unwrap_or_else(|e| e.into_inner());
        let mut list = self.slices.list;
        list.append(&mut live.list);
        live.list = list;
        live.blind_until_ms = live.blind_until_ms.max(self.slices.blind_until_ms);
        filter.retire(&mut live, now_ms);
        let current = live.epoch == self.epoch;
        if current {
            filter.loaded.store(true, Ordering::Release);
        }
        current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant() -> TenantId {
        TenantId::parse("t").unwrap()
    }

    fn ready(window_ms: i64, capacity: u64) -> ClaimFilter {
        let filter = ClaimFilter::new(window_ms, capacity);
        filter.loading().finish(0);
        filter
    }

    #[test]
    fn before_the_store_is_loaded_every_key_may_be_claimed() {
        let filter = ClaimFilter::new(1_000, 1_000);
        assert!(filter.may_be_claimed(&tenant(), "new", 0));
        assert!(!filter.is_certain(0));
        filter.loading().finish(0);
        assert!(!filter.may_be_claimed(&tenant(), "new", 0));
        assert!(filter.is_certain(0));
    }

    #[test]
    fn a_claimed_key_may_be_claimed_and_new_keys_mostly_are_not() {
        let filter = ready(60_000, 100_000);
        let other = TenantId::parse("u").unwrap();
        for i in 0..1_000 {
            filter.insert(&tenant(), &format!("k-{i}"), 10);
        }
        for i in 0..1_000 {
            assert!(filter.may_be_claimed(&tenant(), &format!("k-{i}"), 20));
        }
        let maybe = (0..10_000)
            .filter(|i| filter.may_be_claimed(&other, &format!("k-{i}"), 20))
            .count();
        assert!(
            maybe < 500,
            "{maybe} of 10000 unclaimed keys read the store"
        );
    }

    #[test]
    fn claims_leave_with_the_window() {
        let filter = ready(800, 1_000);
        filter.insert(&tenant(), "old", 0);
        assert!(filter.may_be_claimed(&tenant(), "old", 800));
        // The next claims open slices of their own; the first is retired once its
        // newest claim is out of the window.
        for at in (100..=1_000).step_by(100) {
            filter.insert(&tenant(), &format!("k-{at}"), at);
        }
        assert!(!filter.may_be_claimed(&tenant(), "old", 1_000));
        assert!(filter.may_be_claimed(&tenant(), "k-1000", 1_000));
        assert!(filter.is_certain(1_000));
    }

    #[test]
    fn a_steady_stream_of_claims_never_makes_a_miss_uncertain() {
        // A claim every 10 ms for six windows: each slice leaves a window after its
        // span, never earlier.
        let filter = ready(800, 100_000);
        for at in (0..4_800).step_by(10) {
            filter.insert(&tenant(), &format!("k-{at}"), at);
            assert!(filter.is_certain(at), "uncertain at {at} ms");
            let oldest = ((at - 799).max(0) + 9) / 10 * 10;
            assert!(
                filter.may_be_claimed(&tenant(), &format!("k-{oldest}"), at),
                "a claim {} ms old was forgotten at {at} ms",
                at - oldest
            );
        }
    }

    #[test]
    fn more_claims_than_it_holds_make_every_miss_uncertain_until_they_leave_the_window() {
        // 9 slices of 2 keys.
        let filter = ready(80_000, 18);
        for i in 0..18 {
            filter.insert(&tenant(), &format!("k-{i}"), 1_000 + i);
        }
        assert!(filter.is_certain(2_000));
        filter.insert(&tenant(), "k-18", 2_000);
        filter.insert(&tenant(), "k-19", 2_000);
        assert!(filter.may_be_claimed(&tenant(), "k-19", 2_000));
        assert!(
            !filter.is_certain(2_000),
            "the first slice was dropped while its claims were in the window"
        );
        assert!(filter.may_be_claimed(&tenant(), "never", 2_000));
        // A window after the dropped slice's newest claim, misses are certain again.
        assert!(filter.is_certain(1_001 + 80_000));
        assert!(!filter.may_be_claimed(&tenant(), "never", 1_001 + 80_000));
    }

    #[test]
    fn a_filter_that_stopped_hearing_claims_is_certain_only_after_a_load_begun_since() {
        let filter = ready(60_000, 1_000);
        filter.insert(&tenant(), "heard", 1_000);
        assert!(filter.is_certain(1_000));
        let early = filter.loading();
        filter.unsure(1_500);
        assert!(filter.may_be_claimed(&tenant(), "never", 2_000));
        assert!(
            !early.finish(2_000),
            "a load begun before the loss may lack what was claimed meanwhile"
        );
        assert!(!filter.is_certain(2_000));
        assert!(filter.may_be_claimed(&tenant(), "never", 2_000));
        let mut again = filter.loading();
        again.add(&tenant(), "missed", 1_500);
        assert!(again.finish(2_000));
        for key in ["heard", "missed"] {
            assert!(filter.may_be_claimed(&tenant(), key, 2_000), "{key}");
        }
        assert!(!filter.may_be_claimed(&tenant(), "never", 2_000));
    }

    #[test]
    fn loaded_claims_and_claims_made_while_loading_are_both_remembered() {
        let filter = ClaimFilter::new(60_000, 1_000);
        let mut loading = filter.loading();
        filter.insert(&tenant(), "meanwhile", 5_000);
        loading.add(&tenant(), "stored-1", 1_000);
        loading.add(&tenant(), "stored-2", 4_000);
        loading.finish(5_000);
        for key in ["stored-1", "stored-2", "meanwhile"] {
            assert!(filter.may_be_claimed(&tenant(), key, 5_000), "{key}");
        }
        assert!(!filter.may_be_claimed(&tenant(), "never", 5_000));
    }
}
