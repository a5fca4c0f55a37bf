//! Rate limits of the gate: a tenant's tier budget (requests per minute, `governor`'s
//! GCRA keyed by tenant) and its per-skill budgets for direct tool calls. A refusal is
//! counted in `agent_a2a_rate_limited_total{tenant_id, skill_name}` and carries the
//! `Retry-After` a client should wait.

use std::collections::HashMap;
use std::num::NonZeroU32;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use super::{GateError, NO_SKILL, Principal};
use crate::config::RateLimitSettings;
use crate::domain::TenantId;
use crate::error::Error;
use crate::telemetry;

/// The limiters: per tier (keyed by tenant) and per skill (keyed by tenant).
pub(super) struct Limits {
    default: DefaultKeyedRateLimiter<TenantId>,
    tiers: HashMap<String, DefaultKeyedRateLimiter<TenantId>>,
    skills: HashMap<String, DefaultKeyedRateLimiter<TenantId>>,
    clock: DefaultClock,
}

impl Limits {
    pub(super) fn new(settings: &RateLimitSettings) -> Result<Limits, GateError> {
        let limiter = |key: &str, per_minute: u32| {
            NonZeroU32::new(per_minute)
                .map(|n| DefaultKeyedRateLimiter::keyed(Quota::per_minute(n)))
                .ok_or_else(|| GateError(format!("{key}: per_minute must be greater than 0")))
        };
        Ok(Limits {
            default: limiter("rate_limit.default_per_minute", settings.default_per_minute)?,
            tiers: settings
                .tiers
                .iter()
                .map(|(tier, l)| Ok((tier.clone(), limiter("rate_limit.tiers", l.per_minute)?)))
                .collect::<Result<_, GateError>>()?,
            skills: settings
                .skills
                .iter()
                .map(|(skill, l)| Ok((skill.clone(), limiter("rate_limit.skills", l.per_minute)?)))
                .collect::<Result<_, GateError>>()?,
            clock: DefaultClock::default(),
        })
    }

    pub(super) fn tenant(&self, principal: &Principal) -> Result<(), Error> {
        let limiter = self.tiers.get(&principal.tier).unwrap_or(&self.default);
        self.check(limiter, principal, NO_SKILL)
    }

    pub(super) fn skill(&self, principal: &Principal, skill: &str) -> Result<(), Error> {
        match self.skills.get(skill) {
            Some(limiter) => self.check(limiter, principal, skill),
            None => Ok(()),
        }
    }

    fn check(
        &self,
        limiter: &DefaultKeyedRateLimiter<TenantId>,
        principal: &Principal,
        skill: &str,
    ) -> Result<(), Error> {
        limiter.check_key(&principal.tenant).map_err(|not_until| {
            metrics::counter!(
                telemetry::RATE_LIMITED,
                "tenant_id" => principal.tenant.as_str().to_owned(),
                "skill_name" => skill.to_owned()
            )
            .increment(1);
            let wait = not_until.wait_time_from(self.clock.now());
            Error::RateLimited {
                retry_after_secs: retry_after_secs(wait),
                scope: if skill.is_empty() {
                    format!("tenant {}", principal.tenant)
                } else {
                    format!("tenant {} on skill {skill}", principal.tenant)
                },
            }
        })
    }

    pub(super) fn retain_recent(&self) {
        self.default.retain_recent();
        for limiter in self.tiers.values().chain(self.skills.values()) {
            limiter.retain_recent();
        }
    }
}

/// `Retry-After` of a refusal: the wait rounded up to whole seconds, and never 0 — a
/// refused client told "0" retries at once and is refused again.
pub(super) fn retry_after_secs(wait: std::time::Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}
