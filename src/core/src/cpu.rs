//! CPU percent from a backend's CPU-time samples.
//!
//! A sample is a VM's total CPU time and the time it was read, both in ns on the driver's
//! clock. The percent is the CPU time between the last two samples over the time between
//! them (percent of one physical CPU; above 100 with several vCPUs), held until the next
//! sample: resexd samples every few intervals off its loop, the lab every interval.

/// One reading of a VM's CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuSample {
    /// Total CPU time the VM has used, ns.
    pub total_ns: u64,
    /// When it was read, ns on the driver's clock.
    pub at_ns: u64,
}

/// Turns samples into a percent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct CpuMeter {
    last: Option<CpuSample>,
    pct: f64,
}

impl CpuMeter {
    /// Takes a sample; one that is not later than the last is ignored (a counter that went
    /// backwards, a restarted domain, reads as 0 for that span).
    pub(crate) fn sample(&mut self, s: CpuSample) {
        match self.last {
            Some(l) if s.at_ns <= l.at_ns => {}
            Some(l) => {
                let used = s.total_ns.saturating_sub(l.total_ns) as f64;
                self.pct = used * 100.0 / (s.at_ns - l.at_ns) as f64;
                self.last = Some(s);
            }
            None => self.last = Some(s),
        }
    }

    /// The percent between the last two samples (0 before there are two).
    pub(crate) fn pct(&self) -> f64 {
        self.pct
    }

    /// The last sample.
    pub(crate) fn last(&self) -> Option<CpuSample> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_between_samples_held_until_the_next() {
        let mut m = CpuMeter::default();
        m.sample(CpuSample {
            total_ns: 5_000,
            at_ns: 0,
        });
        assert_eq!(m.pct(), 0.0);
        m.sample(CpuSample {
            total_ns: 505_000,
            at_ns: 1_000_000,
        });
        assert_eq!(m.pct(), 50.0);
        // Same time: ignored.
        m.sample(CpuSample {
            total_ns: 9_999_999,
            at_ns: 1_000_000,
        });
        assert_eq!(m.pct(), 50.0);
        // Backwards counter: 0 for that span, not a huge number.
        m.sample(CpuSample {
            total_ns: 0,
            at_ns: 2_000_000,
        });
        assert_eq!(m.pct(), 0.0);
        assert_eq!(m.last().unwrap().at_ns, 2_000_000);
    }
}
