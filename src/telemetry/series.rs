//! Metric handles kept per thread for the series recorded most often ([`with_series`],
//! [`counter`], [`gauge`], [`histogram`]), so a hot path does not register its series with
//! the recorder at every sample; and [`OpenGauge`], a gauge of what is open.

use std::cell::RefCell;
use std::collections::HashMap;

use super::recorder::recorder_installed;

/// A series by its metric's name and at most one label (name and value).
type SeriesKey = (&'static str, Option<(&'static str, &'static str)>);

/// A per-thread cache of metric handles. Its keys are the code's own (names, bounded
/// labels), never a client's, so a fast unkeyed hash serves: SipHash of the name was
/// most of a lookup.
pub type SeriesCache<K, H> = HashMap<K, H, foldhash::fast::FixedState>;

thread_local! {
    static COUNTERS: RefCell<SeriesCache<SeriesKey, metrics::Counter>> = RefCell::default();
    static GAUGES: RefCell<SeriesCache<SeriesKey, metrics::Gauge>> = RefCell::default();
    static HISTOGRAMS: RefCell<SeriesCache<SeriesKey, metrics::Histogram>> = RefCell::default();
}

/// Runs `record` on the handle(s) of a series this thread records often, looked up once
/// per thread in `cache` by `key`: each `counter!`/`gauge!`/`histogram!` registers its
/// series with the recorder again (the Prometheus exporter and the dashboard's tap
/// behind a fan-out), which builds its labels and allocates every time. The keys must be
/// bounded (methods, statuses, states). Before the process's recorder is installed a
/// kept handle would record nowhere for good, so none is kept.
pub fn with_series<K: Eq + std::hash::Hash, H, R>(
    cache: &'static std::thread::LocalKey<RefCell<SeriesCache<K, H>>>,
    key: K,
    register: impl FnOnce(&K) -> H,
    record: impl FnOnce(&H) -> R,
) -> R {
    if !recorder_installed() {
        return record(&register(&key));
    }
    cache.with_borrow_mut(|handles| record(handles.entry(key).or_insert_with_key(register)))
}

/// [`with_series`] for one handle, cloned out of the cache.
fn cached<H: Clone + 'static>(
    cache: &'static std::thread::LocalKey<RefCell<SeriesCache<SeriesKey, H>>>,
    key: SeriesKey,
    register: impl FnOnce() -> H,
) -> H {
    with_series(cache, key, |_| register(), H::clone)
}

/// [`cached`] counter `name`, with one fixed label or none.
pub fn counter(
    name: &'static str,
    label: Option<(&'static str, &'static str)>,
) -> metrics::Counter {
    cached(&COUNTERS, (name, label), || match label {
        Some((key, value)) => metrics::counter!(name, key => value),
        None => metrics::counter!(name),
    })
}

/// [`cached`] gauge `name`, without labels.
pub fn gauge(name: &'static str) -> metrics::Gauge {
    cached(&GAUGES, (name, None), || metrics::gauge!(name))
}

/// [`cached`] histogram `name`, without labels.
pub fn histogram(name: &'static str) -> metrics::Histogram {
    cached(&HISTOGRAMS, (name, None), || metrics::histogram!(name))
}

/// Counts something open in a gauge while it lives (a stream, a subscription): +1 now,
/// -1 when dropped, whatever way it ends.
pub struct OpenGauge(&'static str);

impl OpenGauge {
    pub fn new(gauge: &'static str) -> Self {
        metrics::gauge!(gauge).increment(1.0);
        OpenGauge(gauge)
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        metrics::gauge!(self.0).decrement(1.0);
    }
}
