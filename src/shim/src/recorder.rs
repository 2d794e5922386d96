//! Per-interval latency histograms (HdrHistogram). A request is timestamped when it is queued,
//! not when it is sent, so a stalled sender shows up as latency (no coordinated omission).

use hdrhistogram::Histogram;

/// One interval's latency, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencySummary {
    /// Requests.
    pub count: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Standard deviation.
    pub stddev_ns: f64,
    /// Minimum.
    pub min_ns: u64,
    /// Maximum.
    pub max_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
}

/// Records request latencies and hands out one summary per interval.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    hist: Histogram<u64>,
    /// Latencies above the histogram's range (recorded as the maximum).
    clamped: u64,
}

/// Highest latency tracked exactly: 60 s.
pub const MAX_TRACKED_NS: u64 = 60_000_000_000;

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    /// A recorder with 3 significant digits from 1 ns to 60 s.
    pub fn new() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3)
                .expect("static histogram bounds are valid"),
            clamped: 0,
        }
    }

    /// Records a request queued at `queued_ns` and completed at `done_ns` (same clock).
    pub fn record(&mut self, queued_ns: u64, done_ns: u64) {
        let v = done_ns.saturating_sub(queued_ns).max(1);
        if v > MAX_TRACKED_NS {
            self.clamped += 1;
        }
        self.hist.saturating_record(v.min(MAX_TRACKED_NS));
    }

    /// Requests recorded since the last summary.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// True when nothing was recorded since the last summary.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Latencies beyond 60 s seen so far (counted as 60 s).
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// The summary of what was recorded since the last call, and a fresh interval.
    pub fn take_interval(&mut self) -> LatencySummary {
        let h = &self.hist;
        let s = if h.is_empty() {
            LatencySummary::default()
        } else {
            LatencySummary {
                count: h.len(),
                mean_ns: h.mean(),
                stddev_ns: h.stdev(),
                min_ns: h.min(),
                max_ns: h.max(),
                p50_ns: h.value_at_quantile(0.5),
                p99_ns: h.value_at_quantile(0.99),
                p999_ns: h.value_at_quantile(0.999),
            }
        };
        self.hist.reset();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_and_resets_per_interval() {
        let mut r = LatencyRecorder::new();
        for i in 1..=1000u64 {
            r.record(1_000, 1_000 + i * 1_000);
        }
        let s = r.take_interval();
        assert_eq!(s.count, 1000);
        assert!((s.mean_ns - 500_500.0).abs() < 500.0, "{}", s.mean_ns);
        assert!((s.p50_ns as f64 - 500_000.0).abs() < 1_000.0);
        assert!((s.p99_ns as f64 - 990_000.0).abs() < 1_000.0);
        assert!((s.p999_ns as f64 - 999_000.0).abs() < 1_000.0);
        assert_eq!(r.take_interval().count, 0);
    }

    #[test]
    fn a_stall_counts_from_the_time_the_request_was_queued() {
        let mut r = LatencyRecorder::new();
        // Queued at 0, the sender was stuck until 5 ms, the request took 10 us once sent.
        r.record(0, 5_010_000);
        assert!(r.take_interval().max_ns >= 5_000_000);
    }
}
