//! Learning a VM's quiet latency from its own reports: the mean of its first ten valid reports,
//! then the lowest mean and deviation seen since (a quiet period after a busy start lowers it).
//! The daemon and the lab both use it, so a policy sees the same baseline in either.

use crate::types::{Baseline, LatencyReport};

/// Reports averaged before a baseline exists.
pub const LEARN_REPORTS: u32 = 10;

/// One VM's baseline learner.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BaselineLearner {
    n: u32,
    sum_mean: f64,
    sum_stddev: f64,
    baseline: Option<Baseline>,
}

impl BaselineLearner {
    /// Takes one report (empty or non-finite ones are ignored).
    pub fn learn(&mut self, r: &LatencyReport) {
        if r.count == 0 || !(r.mean_ns.is_finite() && r.stddev_ns.is_finite()) {
            return;
        }
        match &mut self.baseline {
            None => {
                self.n += 1;
                self.sum_mean += r.mean_ns;
                self.sum_stddev += r.stddev_ns;
                if self.n >= LEARN_REPORTS {
                    let n = f64::from(self.n);
                    self.baseline = Some(Baseline {
                        mean_ns: self.sum_mean / n,
                        stddev_ns: self.sum_stddev / n,
                    });
                }
            }
            Some(b) => {
                b.mean_ns = b.mean_ns.min(r.mean_ns);
                b.stddev_ns = b.stddev_ns.min(r.stddev_ns);
            }
        }
    }

    /// The baseline, once learned.
    pub fn baseline(&self) -> Option<Baseline> {
        self.baseline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(mean_ns: f64, stddev_ns: f64) -> LatencyReport {
        LatencyReport {
            count: 5,
            mean_ns,
            stddev_ns,
            ..LatencyReport::default()
        }
    }

    #[test]
    fn ten_reports_then_the_lowest_seen_and_garbage_ignored() {
        let mut l = BaselineLearner::default();
        l.learn(&LatencyReport::default()); // empty
        l.learn(&report(f64::NAN, 1.0)); // not finite
        for k in 0..9 {
            l.learn(&report(100.0 + f64::from(k), 10.0));
        }
        assert_eq!(l.baseline(), None, "nine reports are not enough");
        l.learn(&report(109.0, 20.0));
        assert_eq!(
            l.baseline(),
            Some(Baseline {
                mean_ns: 104.5,
                stddev_ns: 11.0
            })
        );
        l.learn(&report(90.0, 30.0));
        assert_eq!(
            l.baseline(),
            Some(Baseline {
                mean_ns: 90.0,
                stddev_ns: 11.0
            })
        );
    }
}
