//! [`Queueing`]: the host's own evidence of how long a VM's work takes, where the rings show
//! work posted and not yet completed (soft-RoCE send queues: the library advances the producer
//! index as it posts, the kernel the consumer index as each request completes).
//!
//! Each scan samples the work outstanding; over a period, Little's law gives the mean time from
//! posting to completion: `W = L / λ`, with `L` the mean outstanding over the period's samples
//! and `λ` the requests posted per second. Scans come at the host's ticks, which do not depend
//! on the guest's traffic, so the samples' mean estimates the period's mean without bias; what
//! it cannot see is shorter than the sampling (a request that came and went between two ticks
//! adds nothing to `L` but one to `λ`, and such requests pull the estimate down, correctly).
//! Nothing here trusts the guest: it can only misstate its own queue.

use std::ops::AddAssign;

/// Cumulative samples of the work outstanding (see the module's documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queueing {
    /// Scans that sampled the send queues.
    pub samples: u64,
    /// Work requests posted and not yet completed, summed over those samples.
    pub outstanding: u64,
    /// Send work requests posted.
    pub posted: u64,
}

impl Queueing {
    /// What was added since `earlier` (saturating: the counts only grow).
    pub fn since(&self, earlier: &Queueing) -> Queueing {
        Queueing {
            samples: self.samples.saturating_sub(earlier.samples),
            outstanding: self.outstanding.saturating_sub(earlier.outstanding),
            posted: self.posted.saturating_sub(earlier.posted),
        }
    }

    /// The mean time from posting to completion, ns, of a difference covering `dt_ns`:
    /// `None` when nothing was posted or sampled.
    pub fn latency_ns(&self, dt_ns: u64) -> Option<f64> {
        if self.posted == 0 || self.samples == 0 || dt_ns == 0 {
            return None;
        }
        let mean_outstanding = self.outstanding as f64 / self.samples as f64;
        Some(mean_outstanding * dt_ns as f64 / self.posted as f64)
    }
}

impl AddAssign for Queueing {
    fn add_assign(&mut self, o: Queueing) {
        // Saturating: the outstanding counts come from guest memory.
        self.samples = self.samples.saturating_add(o.samples);
        self.outstanding = self.outstanding.saturating_add(o.outstanding);
        self.posted = self.posted.saturating_add(o.posted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_always_in_flight_at_a_thousand_a_second_takes_a_millisecond() {
        let q = Queueing {
            samples: 1000,
            outstanding: 1000,
            posted: 1000,
        };
        assert_eq!(q.latency_ns(1_000_000_000), Some(1e6));
        // Four in flight at the same rate: each waits four times as long.
        let four = Queueing {
            outstanding: 4000,
            ..q
        };
        assert_eq!(four.latency_ns(1_000_000_000), Some(4e6));
    }

    #[test]
    fn nothing_posted_or_sampled_is_no_estimate_and_differences_saturate() {
        assert_eq!(Queueing::default().latency_ns(1), None);
        let a = Queueing {
            samples: 5,
            outstanding: 2,
            posted: 1,
        };
        assert_eq!(a.since(&a).latency_ns(1_000), None);
        assert_eq!(Queueing::default().since(&a), Queueing::default());
        let mut b = a;
        b += a;
        assert_eq!(b.since(&a), a);
    }
}
