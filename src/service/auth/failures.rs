//! Failed authentications per client address, in a table of bounded size.
//!
//! Each failure spends from its address's budget (`auth.failures_per_minute`, a
//! `governor` GCRA limiter per address); an address whose failure was refused by the
//! budget is blocked until the budget would take one again, and refused (429) before its
//! credentials are looked at. IPv6 peers are tracked by their /64 network, which one
//! host usually holds whole: otherwise every address of it would be a fresh budget.
//!
//! **Bound.** At most `auth.failure_tracking_max_addresses` addresses are tracked (plus
//! the few that concurrent first failures may insert at once). When the table is full,
//! failures from addresses it does not hold spend from one shared overflow budget, and
//! when that is spent every untracked address is refused: an attacker with many
//! addresses can neither grow the table nor escape the throttle by switching addresses.
//! The price is paid by new addresses while the table is full, not by tracked ones.
//! Overflow use is counted (`agent_a2a_auth_failure_overflow_total`) and logged once
//! each time it starts. Entries leave the table once their budget has refilled.

use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota};

use super::{GateError, retry_after_secs};
use crate::error::Error;
use crate::telemetry;

/// After this long without a failure, a per-minute budget has refilled completely.
const REFILL: Duration = Duration::from_secs(60);

/// The failures of one address (or of the overflow).
struct Slot {
    budget: DefaultDirectRateLimiter,
    last_failure: Instant,
    blocked_until: Option<Instant>,
}

impl Slot {
    fn new(quota: Quota, now: Instant) -> Slot {
        Slot {
            budget: DefaultDirectRateLimiter::direct(quota),
            last_failure: now,
            blocked_until: None,
        }
    }

    /// The wait left when blocked at `now`.
    fn blocked_for(&self, now: Instant) -> Option<Duration> {
        self.blocked_until
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    /// Counts one failure, blocking the slot when its budget is spent.
    fn fail(&mut self, now: Instant, clock: &DefaultClock) {
        self.last_failure = now;
        if let Err(not_until) = self.budget.check() {
            self.blocked_until = Some(now + not_until.wait_time_from(clock.now()));
        }
    }

    /// Still holds state worth keeping: a block, or a budget not yet refilled.
    fn recent(&self, now: Instant) -> bool {
        self.blocked_for(now).is_some() || now.duration_since(self.last_failure) < REFILL
    }
}

/// Failed authentications per client address, bounded (see the module docs).
pub(super) struct Failures {
    quota: Quota,
    table: DashMap<IpAddr, Slot>,
    max_addresses: usize,
    overflow: Mutex<Slot>,
    /// Whether failures from untracked addresses went to the overflow lately: `check`
    /// consults the overflow only then, and a change is logged.
    overflowing: AtomicBool,
    clock: DefaultClock,
}

impl Failures {
    pub(super) fn new(per_minute: u32, max_addresses: usize) -> Result<Failures, GateError> {
        let per_minute = NonZeroU32::new(per_minute)
            .ok_or_else(|| GateError("auth.failures_per_minute: must be greater than 0".into()))?;
        if max_addresses == 0 {
            return Err(GateError(
                "auth.failure_tracking_max_addresses: must be greater than 0".into(),
            ));
        }
        let quota = Quota::per_minute(per_minute);
        Ok(Failures {
            quota,
            table: DashMap::new(),
            max_addresses,
            overflow: Mutex::new(Slot::new(quota, Instant::now())),
            overflowing: AtomicBool::new(false),
            clock: DefaultClock::default(),
        })
    }

    /// Refuses an address that is blocked (or, while the overflow is in use, an untracked
    /// address when the overflow is blocked).
    pub(super) fn check(&self, peer: IpAddr) -> Result<(), Error> {
        let key = tracking_key(peer);
        let now = Instant::now();
        let blocked = match self.table.get(&key) {
            Some(slot) => slot.blocked_for(now),
            None if self.overflowing.load(Ordering::Relaxed) => {
                self.lock_overflow().blocked_for(now)
            }
            None => None,
        };
        match blocked {
            None => Ok(()),
            Some(wait) => {
                metrics::counter!(telemetry::AUTH_FAILURES, "outcome" => "throttled").increment(1);
                Err(Error::RateLimited {
                    retry_after_secs: retry_after_secs(wait),
                    scope: "failed authentications from this address".into(),
                })
            }
        }
    }

    /// Counts one failure of `peer`, in its own slot or, when the table is full and does
    /// not hold it, in the overflow.
    pub(super) fn spend(&self, peer: IpAddr) {
        let key = tracking_key(peer);
        let now = Instant::now();
        if let Some(mut slot) = self.table.get_mut(&key) {
            slot.fail(now, &self.clock);
            return;
        }
        // A few concurrent first failures may each see room and insert: the table can
        // exceed its bound by at most the number of threads admitting requests.
        if self.table.len() < self.max_addresses {
            self.table
                .entry(key)
                .or_insert_with(|| Slot::new(self.quota, now))
                .fail(now, &self.clock);
            return;
        }
        if !self.overflowing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                max_addresses = self.max_addresses,
                "the table of failed authentications is full: failures from addresses it does \
                 not hold now share one budget (auth.failure_tracking_max_addresses)"
            );
        }
        metrics::counter!(telemetry::AUTH_FAILURE_OVERFLOW).increment(1);
        self.lock_overflow().fail(now, &self.clock);
    }

    /// Forgets addresses whose budget has refilled, and leaves overflow mode once the
    /// table has room again and the overflow is not blocked.
    pub(super) fn retain_recent(&self) {
        let now = Instant::now();
        self.table.retain(|_, slot| slot.recent(now));
        let overflow_recent = self.lock_overflow().recent(now);
        let relieved = self.table.len() < self.max_addresses && !overflow_recent;
        if relieved && self.overflowing.swap(false, Ordering::Relaxed) {
            tracing::info!("the table of failed authentications has room again");
        }
    }

    /// The overflow slot; a panic elsewhere while it was held leaves valid state.
    fn lock_overflow(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.overflow
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.table.len()
    }
}

/// The key an address is tracked under: IPv4 as is (also when IPv4-mapped), IPv6 by its
/// /64 network.
fn tracking_key(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let network = u128::from(v6) & !u128::from(u64::MAX);
                IpAddr::V6(Ipv6Addr::from(network))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn throttled(f: &Failures, peer: &str) -> bool {
        matches!(f.check(ip(peer)), Err(Error::RateLimited { .. }))
    }

    #[test]
    fn ipv6_peers_are_tracked_by_their_64_network() {
        assert_eq!(tracking_key(ip("10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(tracking_key(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(
            tracking_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        let f = Failures::new(2, 100).unwrap();
        for host in ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2::3"] {
            f.spend(ip(host));
        }
        assert!(
            throttled(&f, "2001:db8:1:2::99"),
            "the whole /64 is blocked"
        );
        assert!(!throttled(&f, "2001:db8:1:3::1"), "the next /64 is not");
        assert_eq!(f.tracked(), 1);
    }

    #[test]
    fn a_full_table_sends_untracked_addresses_to_one_shared_budget() {
        let f = Failures::new(2, 2).unwrap();
        f.spend(ip("10.0.0.1"));
        f.spend(ip("10.0.0.2"));
        assert_eq!(f.tracked(), 2);
        // Every further address shares the overflow: three failures from three new
        // addresses spend its budget of two and block it.
        for peer in ["10.0.1.1", "10.0.1.2", "10.0.1.3"] {
            assert!(!throttled(&f, peer));
            f.spend(ip(peer));
        }
        assert_eq!(f.tracked(), 2, "the table did not grow");
        assert!(throttled(&f, "10.0.1.1"));
        assert!(throttled(&f, "10.0.9.9"), "a fresh address does not escape");
        // Tracked addresses keep their own budgets: one failure each so far.
        assert!(!throttled(&f, "10.0.0.1"));
        f.spend(ip("10.0.0.1"));
        assert!(!throttled(&f, "10.0.0.1"));
        f.spend(ip("10.0.0.1"));
        assert!(throttled(&f, "10.0.0.1"));
        assert!(!throttled(&f, "10.0.0.2"));
        // Recent state is kept: nothing is forgotten within the minute.
        f.retain_recent();
        assert_eq!(f.tracked(), 2);
        assert!(throttled(&f, "10.0.9.9"));
    }

    #[test]
    fn a_slot_is_forgotten_once_its_budget_has_refilled() {
        let quota = Quota::per_minute(NonZeroU32::new(1).unwrap());
        let clock = DefaultClock::default();
        let start = Instant::now();
        let mut slot = Slot::new(quota, start);
        slot.fail(start, &clock);
        assert!(slot.recent(start + Duration::from_secs(59)));
        assert!(!slot.recent(start + REFILL));
        slot.fail(start, &clock);
        assert!(
            slot.blocked_for(start).is_some(),
            "the second failure blocks"
        );
    }
}
