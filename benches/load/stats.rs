//! What a run measures: latency histograms (HDR, microsecond resolution, 3 significant
//! digits), successes by outcome, errors by kind and scenario-specific counters.
//!
//! Every worker fills its own [`Stats`] without locks; they are merged once the run is
//! over. A latency is only recorded for operations that succeeded; failures are counted
//! by kind instead, so the report shows both without mixing them.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::protocol::ErrorKind;

/// The longest latency tracked (one hour); longer ones are recorded as one hour.
const MAX_LATENCY_US: u64 = 3_600_000_000;
/// More distinct error kinds than this are counted together as "other".
const MAX_ERROR_KINDS: usize = 64;

/// Measurements of (part of) a run.
#[derive(Default)]
pub struct Stats {
    succeeded: u64,
    failed: u64,
    /// In the order they were first recorded: the scenario's main latency comes first.
    latencies: Vec<(String, Histogram<u64>)>,
    outcomes: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    counters: BTreeMap<String, u64>,
}

impl Stats {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one latency in the histogram called `name`.
    pub fn latency(&mut self, name: &str, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.histogram(name).saturating_record(micros.max(1));
    }

    fn histogram(&mut self, name: &str) -> &mut Histogram<u64> {
        let index = match self.latencies.iter().position(|(n, _)| n == name) {
            Some(index) => index,
            None => {
                let histogram = Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                    .expect("constant, valid histogram bounds");
                self.latencies.push((name.to_owned(), histogram));
                self.latencies.len() - 1
            }
        };
        &mut self.latencies[index].1
    }

    /// Adds a whole histogram to the one called `name`.
    pub fn latency_histogram(&mut self, name: &str, histogram: Histogram<u64>) {
        // Both share the bounds of `histogram()`, so adding cannot fail.
        let _ = self.histogram(name).add(&histogram);
    }

    /// One operation that succeeded with `outcome` (e.g. "task completed").
    pub fn success(&mut self, outcome: &str) {
        self.succeeded += 1;
        *self.outcomes.entry(outcome.to_owned()).or_default() += 1;
    }

    /// One operation that failed.
    pub fn error(&mut self, kind: &ErrorKind) {
        self.failures(kind, 1);
    }

    /// `n` operations that failed the same way.
    pub fn failures(&mut self, kind: &ErrorKind, n: u64) {
        if n == 0 {
            return;
        }
        self.failed += n;
        let key = kind.to_string();
        let key = if self.errors.contains_key(&key) || self.errors.len() < MAX_ERROR_KINDS {
            key
        } else {
            "other".to_owned()
        };
        *self.errors.entry(key).or_default() += n;
    }

    /// Adds `n` to the counter `name`.
    pub fn count(&mut self, name: &str, n: u64) {
        *self.counters.entry(name.to_owned()).or_default() += n;
    }

    pub fn merge(&mut self, other: Stats) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        for (name, histogram) in other.latencies {
            self.histogram(&name)
                .add(&histogram)
                .expect("histograms of the same bounds always add");
        }
        for (key, n) in other.outcomes {
            *self.outcomes.entry(key).or_default() += n;
        }
        for (key, n) in other.errors {
            let entry = if self.errors.contains_key(&key) || self.errors.len() < MAX_ERROR_KINDS {
                key
            } else {
                "other".to_owned()
            };
            *self.errors.entry(entry).or_default() += n;
        }
        for (key, n) in other.counters {
            *self.counters.entry(key).or_default() += n;
        }
    }

    pub fn succeeded(&self) -> u64 {
        self.succeeded
    }

    pub fn failed(&self) -> u64 {
        self.failed
    }

    pub fn latencies(&self) -> &[(String, Histogram<u64>)] {
        &self.latencies
    }

    pub fn outcomes(&self) -> &BTreeMap<String, u64> {
        &self.outcomes
    }

    pub fn errors(&self) -> &BTreeMap<String, u64> {
        &self.errors
    }

    pub fn counters(&self) -> &BTreeMap<String, u64> {
        &self.counters
    }
}
