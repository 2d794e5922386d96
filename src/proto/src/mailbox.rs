//! The latency-report mailbox: status-byte blocks in guest memory.
//!
//! A mailbox is `blocks` blocks of `block_size` bytes, back to back, in pages the guest
//! registers. Byte 0 of a block is its status: [`FREE`] (0), [`DATA`] (1, a report waits) or
//! [`UNAVAILABLE`] (2, the guest holds the block). The guest writes a report into a free block,
//! then (release) sets the status to 1; the host reads the status, (acquire) copies the block
//! out, validates it, and sets the status back to 0. No network, no system call.
//!
//! Report layout (little-endian, [`REPORT_BYTES`] bytes; a block may be larger):
//!
//! | offset | field |
//! |---|---|
//! | 0 | status (u8) |
//! | 1 | format (u8) = [`REPORT_FORMAT`] |
//! | 2..8 | reserved, zero |
//! | 8 | seq (u64): the guest's report counter |
//! | 16 | interval_ns (u64): the time the report covers |
//! | 24 | count (u64): requests measured |
//! | 32, 40 | mean_ns, stddev_ns (u64) |
//! | 48, 56 | min_ns, max_ns (u64) |
//! | 64, 72, 80 | p50_ns, p99_ns, p999_ns (u64) |

/// Block is free.
pub const FREE: u8 = 0;
/// Block holds a report.
pub const DATA: u8 = 1;
/// Block is held by the guest.
pub const UNAVAILABLE: u8 = 2;

/// Format byte of this layout.
pub const REPORT_FORMAT: u8 = 1;
/// Bytes of a report, status byte included: the smallest usable block.
pub const REPORT_BYTES: usize = 88;
/// The longest latency or interval a report may carry: 60 s.
pub const MAX_NS: u64 = 60_000_000_000;
/// The most requests one report may cover.
pub const MAX_COUNT: u64 = 1_000_000_000;

/// One interval's latency as the guest measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// The guest's report counter.
    pub seq: u64,
    /// Time covered, ns.
    pub interval_ns: u64,
    /// Requests measured.
    pub count: u64,
    /// Mean, ns.
    pub mean_ns: u64,
    /// Standard deviation, ns.
    pub stddev_ns: u64,
    /// Minimum, ns.
    pub min_ns: u64,
    /// Maximum, ns.
    pub max_ns: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
}

/// Why a block was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Unknown format byte.
    #[error("report format {0} is not {REPORT_FORMAT}")]
    Format(u8),
    /// Count zero or absurd.
    #[error("report count {0} is outside 1..={MAX_COUNT}")]
    Count(u64),
    /// A latency or the interval beyond [`MAX_NS`].
    #[error("report field {field} = {value} ns exceeds {MAX_NS} ns")]
    TooLong {
        /// Field name.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// Quantiles out of order, or a mean outside [min, max].
    #[error("report is inconsistent: {0}")]
    Inconsistent(&'static str),
}

fn u64_at(b: &[u8; REPORT_BYTES], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

impl Report {
    /// The report as block bytes, status byte set to [`DATA`] (the writer stores byte 0 last).
    pub fn encode(&self) -> [u8; REPORT_BYTES] {
        let mut b = [0u8; REPORT_BYTES];
        b[0] = DATA;
        b[1] = REPORT_FORMAT;
        let fields = [
            self.seq,
            self.interval_ns,
            self.count,
            self.mean_ns,
            self.stddev_ns,
            self.min_ns,
            self.max_ns,
            self.p50_ns,
            self.p99_ns,
            self.p999_ns,
        ];
        for (i, v) in fields.iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Parses and validates block bytes (the status byte is not looked at).
    pub fn decode(b: &[u8; REPORT_BYTES]) -> Result<Report, ReportError> {
        if b[1] != REPORT_FORMAT {
            return Err(ReportError::Format(b[1]));
        }
        let r = Report {
            seq: u64_at(b, 8),
            interval_ns: u64_at(b, 16),
            count: u64_at(b, 24),
            mean_ns: u64_at(b, 32),
            stddev_ns: u64_at(b, 40),
            min_ns: u64_at(b, 48),
            max_ns: u64_at(b, 56),
            p50_ns: u64_at(b, 64),
            p99_ns: u64_at(b, 72),
            p999_ns: u64_at(b, 80),
        };
        r.validate()?;
        Ok(r)
    }

    /// Checks ranges and order.
    pub fn validate(&self) -> Result<(), ReportError> {
        if self.count == 0 || self.count > MAX_COUNT {
            return Err(ReportError::Count(self.count));
        }
        for (field, value) in [
            ("interval_ns", self.interval_ns),
            ("mean_ns", self.mean_ns),
            ("stddev_ns", self.stddev_ns),
            ("max_ns", self.max_ns),
        ] {
            if value > MAX_NS {
                return Err(ReportError::TooLong { field, value });
            }
        }
        if !(self.min_ns <= self.p50_ns
            && self.p50_ns <= self.p99_ns
            && self.p99_ns <= self.p999_ns
            && self.p999_ns <= self.max_ns)
        {
            return Err(ReportError::Inconsistent(
                "quantiles must satisfy min <= p50 <= p99 <= p999 <= max",
            ));
        }
        if self.mean_ns < self.min_ns || self.mean_ns > self.max_ns {
            return Err(ReportError::Inconsistent("mean outside [min, max]"));
        }
        if self.stddev_ns > self.max_ns - self.min_ns {
            return Err(ReportError::Inconsistent("stddev wider than max - min"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Report {
        Report {
            seq: 7,
            interval_ns: 1_000_000,
            count: 40,
            mean_ns: 120_000,
            stddev_ns: 9_000,
            min_ns: 100_000,
            max_ns: 190_000,
            p50_ns: 118_000,
            p99_ns: 170_000,
            p999_ns: 190_000,
        }
    }

    #[test]
    fn round_trips_and_sets_the_status_byte() {
        let b = good().encode();
        assert_eq!(b[0], DATA);
        assert_eq!(Report::decode(&b).unwrap(), good());
    }

    #[test]
    fn refuses_garbage_and_absurd_values() {
        let mut b = good().encode();
        b[1] = 9;
        assert_eq!(Report::decode(&b), Err(ReportError::Format(9)));
        let mut r = good();
        r.count = 0;
        assert!(matches!(r.validate(), Err(ReportError::Count(0))));
        let mut r = good();
        r.max_ns = u64::MAX;
        assert!(matches!(r.validate(), Err(ReportError::TooLong { .. })));
        let mut r = good();
        r.p99_ns = 1;
        assert!(matches!(r.validate(), Err(ReportError::Inconsistent(_))));
        let mut r = good();
        r.mean_ns = 500_000;
        assert!(r.validate().is_err());
        let mut r = good();
        r.stddev_ns = 100_000;
        assert!(r.validate().is_err());
        // Random bytes are (almost always) refused, never a panic.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            let mut b = [0u8; REPORT_BYTES];
            for x in b.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *x = seed as u8;
            }
            b[1] = REPORT_FORMAT;
            let _ = Report::decode(&b);
        }
    }
}
