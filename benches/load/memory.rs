//! The memory of the server under test, from `/proc/<pid>/status` (Linux): its resident
//! set (`VmRSS`) sampled every 100 ms during the run, and its high-water mark (`VmHWM`,
//! the peak since the process started, kept by the kernel) at the end.

use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::sync::watch;

const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The memory figures of a run, in KiB.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    pub pid: u32,
    /// Whose memory it is ("server", or the in-process server and load generator).
    pub scope: &'static str,
    pub rss_before_kib: u64,
    /// The highest `VmRSS` sampled during the run.
    pub rss_peak_kib: u64,
    pub rss_after_kib: Option<u64>,
    /// `VmHWM` at the end: the peak over the process's whole life.
    pub hwm_kib: Option<u64>,
    pub samples: u64,
}

/// Samples a process's memory until [`Sampler::finish`].
pub struct Sampler {
    pid: u32,
    scope: &'static str,
    before: u64,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<(u64, u64)>,
}

impl Sampler {
    /// Fails when the process's status cannot be read (wrong pid, not Linux).
    pub fn start(pid: u32, scope: &'static str) -> anyhow::Result<Self> {
        let before = read_status(pid)
            .with_context(|| format!("cannot read the memory of process {pid}"))?
            .rss_kib;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut peak = before;
            let mut samples = 0u64;
            let mut interval = tokio::time::interval(SAMPLE_EVERY);
            loop {
                tokio::select! {
                    _ = interval.tick() => {}
                    _ = stopped.changed() => break,
                }
                // The process may have exited; the peak so far stands.
                let Ok(status) = read_status(pid) else { break };
                peak = peak.max(status.rss_kib);
                samples += 1;
            }
            (peak, samples)
        });
        Ok(Self {
            pid,
            scope,
            before,
            stop,
            task,
        })
    }

    pub async fn finish(self) -> MemoryReport {
        // Ignored error: the sampler ended already (the process is gone).
        let _ = self.stop.send(true);
        let (peak, samples) = self.task.await.unwrap_or((self.before, 0));
        let after = read_status(self.pid).ok();
        MemoryReport {
            pid: self.pid,
            scope: self.scope,
            rss_before_kib: self.before,
            rss_peak_kib: after.as_ref().map_or(peak, |s| peak.max(s.rss_kib)),
            rss_after_kib: after.as_ref().map(|s| s.rss_kib),
            hwm_kib: after.map(|s| s.hwm_kib),
            samples,
        }
    }
}

/// The resident set of process `pid` now, in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    Ok(read_status(pid)?.rss_kib)
}

struct Status {
    rss_kib: u64,
    hwm_kib: u64,
}

fn read_status(pid: u32) -> anyhow::Result<Status> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .with_context(|| format!("{path} has no {name}"))?;
        let kib = line.trim().trim_end_matches("kB").trim();
        kib.parse()
            .with_context(|| format!("{path}: {name} {kib:?} is not a number of kB"))
    };
    Ok(Status {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
    })
}
