//! Prometheus metrics: `resexd --metrics 127.0.0.1:9464` serves `/metrics` in the text
//! exposition format (prometheus-client's OpenMetrics text, which Prometheus scrapes). Per-VM
//! series carry a `vm` label; counters end in `_total`, times are seconds. The control loop
//! feeds two histograms (tick lateness, scan duration); everything else is read from the
//! latest snapshot at scrape time, so a scrape never touches the loop.
//!
//! The schema lives in one place, `schema.rs`: `HostMetrics::register` and the group
//! constructors it calls declare every family's name, help text and label type, once and in
//! exposition order, and the `fill` functions map a [`Snapshot`] onto them. Each scrape
//! registers a fresh schema, fills it and encodes it ([`encode`]).

mod periods;
mod schema;
mod serve;
#[cfg(test)]
mod tests;

pub use serve::{serve, MetricsError, MetricsServer};

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use resex_api::Snapshot;
use schema::HostMetrics;

/// What the control loop observes itself.
#[derive(Debug, Clone)]
pub struct LoopMetrics {
    /// How late each tick started, seconds.
    pub tick_lateness: Histogram,
    /// How long each tick's scan of every VM took, seconds.
    pub scan: Histogram,
}

impl Default for LoopMetrics {
    fn default() -> Self {
        // 1 us to about 16 ms, doubling.
        let b = || Histogram::new(exponential_buckets(1e-6, 2.0, 15));
        Self {
            tick_lateness: b(),
            scan: b(),
        }
    }
}

/// The exposition text for a snapshot and the loop's histograms.
pub fn encode(s: &Snapshot, lm: &LoopMetrics) -> String {
    let mut r = Registry::default();
    HostMetrics::register(&mut r, lm).fill(s);
    text(&r)
}

/// The registry as OpenMetrics text (empty, logged, if encoding fails).
fn text(r: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, r) {
        tracing::error!("encoding metrics: {e}");
    }
    out
}
