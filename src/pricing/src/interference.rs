//! Interference as a guest's report shows it: the relative rise of its latency over its quiet
//! baseline (learned from its first reports). Shared by IOShares and the governor.

use crate::ledger::BaselineState;
use crate::types::{Baseline, LatencyReport};

/// How reports are turned into interference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measure {
    /// A VM without a configured baseline averages its first this many reports.
    pub baseline_reports: u32,
    /// A faster (or steadier) report lowers the baseline to it.
    pub follows_lower: bool,
    /// The stddev baseline is at least this fraction of the baseline mean.
    pub stddev_floor: f64,
    /// Interference is clamped to this.
    pub max_intf: f64,
    /// Count a rise of the stddev as interference too (IOShares); otherwise only the mean.
    pub use_stddev: bool,
}

/// A report that can be used: enough samples, finite, non-negative.
pub fn valid_report(r: &LatencyReport, min_samples: u64) -> bool {
    r.count >= min_samples
        && r.mean_ns.is_finite()
        && r.mean_ns >= 0.0
        && r.stddev_ns.is_finite()
        && r.stddev_ns >= 0.0
}

/// `max((mean - base_mean) / base_mean, (stddev - base_stddev) / base_stddev)` (only the first
/// term without `use_stddev`), clamped to `[0, max_intf]`, learning the baseline first: `None` while it is still being learned.
pub fn interference(m: &Measure, state: &mut BaselineState, r: &LatencyReport) -> Option<f64> {
    let Some(base) = state.baseline else {
        state.learned += 1;
        state.sum_mean += r.mean_ns;
        state.sum_stddev += r.stddev_ns;
        if state.learned >= m.baseline_reports {
            let n = f64::from(state.learned);
            state.baseline = Some(Baseline {
                mean_ns: state.sum_mean / n,
                stddev_ns: state.sum_stddev / n,
            });
        }
        return None;
    };
    let bm = base.mean_ns.max(1.0);
    let bs = base.stddev_ns.max(m.stddev_floor * bm).max(1.0);
    let rise_mean = (r.mean_ns - bm) / bm;
    let rise_std = (r.stddev_ns - bs) / bs;
    let rise = if m.use_stddev {
        rise_mean.max(rise_std)
    } else {
        rise_mean
    };
    let intf = rise.clamp(0.0, m.max_intf);
    if m.follows_lower {
        state.baseline = Some(Baseline {
            mean_ns: base.mean_ns.min(r.mean_ns),
            stddev_ns: base.stddev_ns.min(r.stddev_ns),
        });
    }
    Some(intf)
}
