//! Per-interval latency histograms. A request is timestamped when it is queued,
//! not when it is sent, so a stalled sender shows up as latency (no coordinated omission).

// Bucket indices are below 7424 and quantile ranks below the count: the casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

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

/// Sub-buckets per power of two (2^7: quantiles within 0.8%).
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets covering every u64.
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

fn bucket(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let shift = e - SUB_BITS;
    ((e - SUB_BITS + 1) as usize) * SUB as usize + ((v >> shift) - SUB) as usize
}

/// The highest value that falls in bucket `i`.
fn bucket_high(i: usize) -> u64 {
    let (blk, off) = ((i as u64) / SUB, (i as u64) % SUB);
    if blk == 0 {
        return off;
    }
    let shift = blk - 1;
    ((SUB + off) << shift) + ((1u64 << shift) - 1)
}

/// Records request latencies and hands out one summary per interval.
///
/// A log-linear histogram (128 sub-buckets per power of two, as HdrHistogram with two
/// significant digits) whose summary touches only the buckets used in the interval, so a report
/// costs the guest well under a microsecond; count, mean, standard deviation, min and max are
/// exact.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    counts: Vec<u32>,
    touched: Vec<u32>,
    n: u64,
    sum: f64,
    sum_sq: f64,
    min: u64,
    max: u64,
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
    /// An empty recorder (1 ns to 60 s).
    pub fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            touched: Vec::new(),
            n: 0,
            sum: 0.0,
            sum_sq: 0.0,
            min: u64::MAX,
            max: 0,
            clamped: 0,
        }
    }

    /// Records a request queued at `queued_ns` and completed at `done_ns` (same clock).
    pub fn record(&mut self, queued_ns: u64, done_ns: u64) {
        let mut v = done_ns.saturating_sub(queued_ns).max(1);
        if v > MAX_TRACKED_NS {
            self.clamped += 1;
            v = MAX_TRACKED_NS;
        }
        let b = bucket(v);
        if self.counts[b] == 0 {
            self.touched.push(b as u32);
        }
        self.counts[b] = self.counts[b].saturating_add(1);
        self.n += 1;
        let f = v as f64;
        self.sum += f;
        self.sum_sq += f * f;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Requests recorded since the last summary.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True when nothing was recorded since the last summary.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Latencies beyond 60 s seen so far (counted as 60 s).
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// The summary of what was recorded since the last call, and a fresh interval.
    pub fn take_interval(&mut self) -> LatencySummary {
        if self.n == 0 {
            return LatencySummary::default();
        }
        self.touched.sort_unstable();
        let n = self.n;
        let rank = |q: f64| ((q * n as f64).ceil() as u64).clamp(1, n);
        let targets = [rank(0.5), rank(0.99), rank(0.999)];
        let mut found = [self.max; 3];
        let (mut seen, mut t) = (0u64, 0usize);
        for &b in &self.touched {
            seen += u64::from(self.counts[b as usize]);
            while t < 3 && seen >= targets[t] {
                found[t] = bucket_high(b as usize).clamp(self.min, self.max);
                t += 1;
            }
            self.counts[b as usize] = 0;
        }
        let mean = self.sum / n as f64;
        let var = (self.sum_sq / n as f64 - mean * mean).max(0.0);
        let s = LatencySummary {
            count: n,
            mean_ns: mean,
            stddev_ns: var.sqrt(),
            min_ns: self.min,
            max_ns: self.max,
            p50_ns: found[0],
            p99_ns: found[1],
            p999_ns: found[2],
        };
        self.touched.clear();
        self.n = 0;
        self.sum = 0.0;
        self.sum_sq = 0.0;
        self.min = u64::MAX;
        self.max = 0;
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
        assert!((s.p50_ns as f64 - 500_000.0).abs() < 5_000.0);
        assert!((s.p99_ns as f64 - 990_000.0).abs() < 9_900.0);
        assert!((s.p999_ns as f64 - 999_000.0).abs() < 9_990.0);
        assert_eq!(r.take_interval().count, 0);
    }

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut prev = 0;
        for i in 1..BUCKETS {
            let h = bucket_high(i);
            assert!(h > prev || i == 1, "bucket {i}");
            assert_eq!(bucket(h), i);
            assert_eq!(bucket(prev + 1), i, "first value of bucket {i}");
            prev = h;
            if h == u64::MAX {
                break;
            }
        }
        for v in [1u64, 127, 128, 255, 256, 1000, 123_456_789, MAX_TRACKED_NS] {
            let h = bucket_high(bucket(v));
            assert!(h >= v && (h - v) as f64 <= v as f64 / 128.0, "{v} -> {h}");
        }
    }

    #[test]
    fn quantiles_of_a_few_samples_are_exact_buckets() {
        let mut r = LatencyRecorder::new();
        for v in [100u64, 50, 70] {
            r.record(0, v);
        }
        let s = r.take_interval();
        assert_eq!(
            (s.count, s.min_ns, s.p50_ns, s.p99_ns, s.max_ns),
            (3, 50, 70, 100, 100)
        );
        assert!((s.mean_ns - 220.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_stall_counts_from_the_time_the_request_was_queued() {
        let mut r = LatencyRecorder::new();
        // Queued at 0, the sender was stuck until 5 ms, the request took 10 us once sent.
        r.record(0, 5_010_000);
        assert!(r.take_interval().max_ns >= 5_000_000);
    }
}
