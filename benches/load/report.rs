//! The report of a run: built once from the merged stats, printed as a table for people
//! or as JSON for scripts (the same fields either way).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::driver::START_DELAY;
use crate::memory::MemoryReport;
use crate::protocol::Dialect;
use crate::stats::Stats;

#[derive(Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub url: String,
    /// Whether the server ran inside the load generator's process.
    pub in_process: bool,
    /// `JSON-RPC` or `gRPC`.
    pub binding: &'static str,
    pub dialect: Dialect,
    pub connections: u32,
    /// Open-loop target rate per second; `None` for the closed loop.
    pub rate: Option<f64>,
    pub warmup_secs: f64,
    /// The configured measurement time, if the run was bounded by time.
    pub duration_secs: Option<f64>,
    /// The configured number of measured operations, if the run was bounded by one.
    pub requests: Option<u64>,
    pub timeout_secs: f64,
    /// The measured window: from the end of the warm-up to the last measured operation.
    pub elapsed_secs: f64,
    pub interrupted: bool,
    /// What the throughput counts ("requests", "events", …).
    pub unit: &'static str,
    pub succeeded: u64,
    pub failed: u64,
    /// Succeeded and failed operations per second of the window.
    pub throughput_per_sec: f64,
    pub succeeded_per_sec: f64,
    /// Latencies of successful operations; the scenario's main one first.
    pub latencies: Vec<Latency>,
    pub outcomes: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    pub counters: BTreeMap<String, u64>,
    pub memory: Option<MemoryReport>,
    /// Caveats about how to read the numbers.
    pub notes: Vec<String>,
}

/// One latency histogram, in milliseconds.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub name: String,
    pub count: u64,
    pub min_ms: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p99_9_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    fn new(name: &str, histogram: &Histogram<u64>) -> Self {
        let ms = |micros: u64| micros as f64 / 1000.0;
        Self {
            name: name.to_owned(),
            count: histogram.len(),
            min_ms: ms(histogram.min()),
            mean_ms: histogram.mean() / 1000.0,
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p90_ms: ms(histogram.value_at_quantile(0.90)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            p99_9_ms: ms(histogram.value_at_quantile(0.999)),
            max_ms: ms(histogram.max()),
        }
    }
}

/// Everything about a run that is not in its stats.
pub struct RunInfo {
    pub scenario: &'static str,
    pub main_latency: &'static str,
    pub unit: &'static str,
    pub url: String,
    pub in_process: bool,
    pub binding: &'static str,
    pub dialect: Dialect,
    pub connections: u32,
    pub rate: Option<f64>,
    pub warmup: std::time::Duration,
    pub duration: Option<std::time::Duration>,
    pub requests: Option<u64>,
    pub timeout: std::time::Duration,
    pub interrupted: bool,
}

impl Report {
    pub fn new(
        info: RunInfo,
        stats: &Stats,
        window: std::time::Duration,
        memory: Option<MemoryReport>,
    ) -> Self {
        let mut latencies: Vec<Latency> = stats
            .latencies()
            .iter()
            .map(|(name, histogram)| Latency::new(name, histogram))
            .collect();
        // The main latency first, the open loop's start delay last.
        latencies.sort_by_key(|l| match l.name.as_str() {
            name if name == info.main_latency => 0,
            START_DELAY => 2,
            _ => 1,
        });
        let mut notes = Vec::new();
        if info.interrupted && info.in_process {
            // actix-server handles SIGINT itself, with a forced shutdown.
            notes.push(
                "Ctrl-C also stopped the in-process server: operations under way at that \
                 moment may have failed because of it"
                    .to_owned(),
            );
        }
        let secs = window.as_secs_f64();
        let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        Self {
            scenario: info.scenario,
            url: info.url,
            in_process: info.in_process,
            binding: info.binding,
            dialect: info.dialect,
            connections: info.connections,
            rate: info.rate,
            warmup_secs: info.warmup.as_secs_f64(),
            duration_secs: info.duration.map(|d| d.as_secs_f64()),
            requests: info.requests,
            timeout_secs: info.timeout.as_secs_f64(),
            elapsed_secs: secs,
            interrupted: info.interrupted,
            unit: info.unit,
            succeeded: stats.succeeded(),
            failed: stats.failed(),
            throughput_per_sec: per_sec(stats.succeeded() + stats.failed()),
            succeeded_per_sec: per_sec(stats.succeeded()),
            latencies,
            outcomes: stats.outcomes().clone(),
            errors: stats.errors().clone(),
            counters: stats.counters().clone(),
            memory,
            notes,
        }
    }

    /// The failed share of all operations (0 when there were none).
    pub fn error_rate(&self) -> f64 {
        let total = self.succeeded + self.failed;
        if total == 0 {
            0.0
        } else {
            self.failed as f64 / total as f64
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }

    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let server = if self.in_process {
            " (server in this process)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "A2A load: {} over {} {} at {}{server}",
            self.scenario,
            self.binding,
            self.dialect.version(),
            self.url
        );
        let shape = match self.rate {
            Some(rate) => format!("open loop at {rate} /s"),
            None => "closed loop".to_owned(),
        };
        let _ = writeln!(
            out,
            "{} connections, {shape}, warm-up {:.1} s, measured {:.2} s{}",
            self.connections,
            self.warmup_secs,
            self.elapsed_secs,
            if self.interrupted {
                " (interrupted)"
            } else {
                ""
            }
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<12} {} ({} ok, {} failed, {:.2} % errors)",
            self.unit,
            self.succeeded + self.failed,
            self.succeeded,
            self.failed,
            self.error_rate() * 100.0
        );
        let _ = writeln!(
            out,
            "{:<12} {:.1} ok/s ({:.1} /s with the failed)",
            "throughput", self.succeeded_per_sec, self.throughput_per_sec
        );
        if !self.latencies.is_empty() {
            let width = self
                .latencies
                .iter()
                .map(|l| l.name.chars().count())
                .max()
                .unwrap_or(0)
                .max("latency (ms)".len());
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "{:<width$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                "latency (ms)", "count", "min", "p50", "p90", "p99", "p99.9", "max", "mean"
            );
            for l in &self.latencies {
                let _ = writeln!(
                    out,
                    "{:<width$} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                    l.name,
                    l.count,
                    l.min_ms,
                    l.p50_ms,
                    l.p90_ms,
                    l.p99_ms,
                    l.p99_9_ms,
                    l.max_ms,
                    l.mean_ms
                );
            }
        }
        for (title, counts) in [
            ("outcomes", &self.outcomes),
            ("errors", &self.errors),
            ("counters", &self.counters),
        ] {
            if counts.is_empty() {
                continue;
            }
            let width = counts.keys().map(|k| k.chars().count()).max().unwrap_or(0);
            let _ = writeln!(out);
            let _ = writeln!(out, "{title}");
            for (key, n) in counts {
                let _ = writeln!(out, "  {key:<width$} {n:>10}");
            }
        }
        if let Some(m) = &self.memory {
            let mib = |kib: u64| kib as f64 / 1024.0;
            let _ = writeln!(out);
            let _ = writeln!(out, "memory of {} (pid {})", m.scope, m.pid);
            let _ = write!(
                out,
                "  VmRSS {:.1} MiB before, {:.1} MiB peak ({} samples)",
                mib(m.rss_before_kib),
                mib(m.rss_peak_kib),
                m.samples
            );
            if let Some(after) = m.rss_after_kib {
                let _ = write!(out, ", {:.1} MiB after", mib(after));
            }
            let _ = writeln!(out);
            match m.hwm_kib {
                Some(hwm) => {
                    let _ = writeln!(
                        out,
                        "  VmHWM {:.1} MiB (peak over the process's life)",
                        mib(hwm)
                    );
                }
                None => {
                    let _ = writeln!(out, "  the process had exited by the end of the run");
                }
            }
        }
        for note in &self.notes {
            let _ = writeln!(out);
            let _ = writeln!(out, "note: {note}");
        }
        out
    }
}
