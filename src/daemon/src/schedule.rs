//! The fleet's schedules (Unix time, ms) as the core takes them (its loop's clock, ns): what
//! `FleetGrant::of` hands the core for each VM on a compatible link.

use resex_core::adaptive::{JobTiming, Schedule};
use resex_fleet::alloc::{JobArc, VmSchedule};

/// ms to ns, saturating (the values were checked when the allocation was read).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn ns(ms: f64) -> u64 {
    (ms * 1e6).round().clamp(0.0, u64::MAX as f64) as u64
}

/// A job's timing on a clock whose zero is Unix `zero_ns`: its arc start moved by whole
/// periods onto that clock when it began before the zero. (The difference is taken in ms
/// first: Unix ns do not fit an f64's 53 bits.)
#[allow(clippy::cast_precision_loss)]
fn timing(a: &JobArc, zero_ns: u64) -> JobTiming {
    let period = ns(a.period_ms).max(1);
    let zero_ms = (zero_ns / 1_000_000) as f64 + (zero_ns % 1_000_000) as f64 / 1e6;
    let since_ms = a.last_start_unix_ms - zero_ms;
    let start_ns = if since_ms >= 0.0 {
        ns(since_ms)
    } else {
        (period - ns(-since_ms) % period) % period
    };
    JobTiming {
        period_ns: period,
        start_ns,
        arc_ns: ns(a.arc_ms).min(period),
    }
}

/// `s` on the loop's clock, whose zero is Unix `zero_ns`.
pub fn of(s: &VmSchedule, zero_ns: u64) -> Schedule {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let pool_bps = (s.pool_mbps * 1e6).round().clamp(1.0, u64::MAX as f64) as u64;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let me_bytes = s.me.bytes.round().clamp(0.0, u64::MAX as f64) as u64;
    Schedule {
        pool_bps,
        gain: s.gain,
        me: timing(&s.me, zero_ns),
        others: s.others.iter().map(|a| timing(a, zero_ns)).collect(),
        me_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_times_land_on_the_loops_clock_whole_periods_apart() {
        let arc = |start| JobArc {
            period_ms: 200.0,
            last_start_unix_ms: start,
            arc_ms: 50.0,
            bytes: 1e6,
        };
        let zero = 1_790_000_000_000_000_000; // ns
        let s = of(
            &VmSchedule {
                vm: "j".into(),
                link: "up".into(),
                pool_mbps: 1000.0,
                gain: 10.0,
                me: arc(1_790_000_000_030.0),
                others: vec![arc(1_789_999_999_930.0)],
            },
            zero,
        );
        assert_eq!(s.pool_bps, 1_000_000_000);
        assert_eq!(s.me_bytes, 1_000_000);
        assert_eq!(s.me.start_ns, 30_000_000);
        assert_eq!(s.me.arc_ns, 50_000_000);
        // 70 ms before the zero: 130 ms into the loop's first period.
        assert_eq!(s.others[0].start_ns, 130_000_000);
        assert_eq!(s.others[0].progress(140_000_000), Some(0.2));
    }
}
