//! A host's allocation from the fleet's coordinator as the core takes it: [`FleetGrant`]
//! (per-VM ceilings, how long they hold, the schedules of periodic jobs), made
//! [`FleetCeilings`] on the driver's clock by [`FleetGrant::at`]. With feature `fleet`,
//! [`FleetGrant::of`] converts the coordinator's record (`resex_fleet::Allocation`, Unix ms)
//! onto a driver's clock: resexd's loop and the lab's fabric both call it, so the same
//! allocation gives the same ceilings and schedules in both.

use crate::adaptive::Schedule;
use crate::fleet::FleetCeilings;
use std::time::Duration;

/// The fleet's ceilings for this host as a driver takes them: (VM name, bits per second), and
/// how long they hold from when the driver applies them ([`FleetCeilings`] carry the deadline
/// on the driver's clock).
#[derive(Debug, Clone, PartialEq)]
pub struct FleetGrant {
    /// (VM name, ceiling in bits per second).
    pub vms: Vec<(String, u64)>,
    /// How long they hold unless renewed.
    pub valid: Duration,
    /// VMs whose ceiling follows a schedule (on the driver's clock).
    pub adaptive: Vec<(String, Schedule)>,
}

impl FleetGrant {
    /// The ceilings as the core takes them when the driver applies them at `now_ns`.
    #[must_use]
    pub fn at(self, now_ns: u64) -> FleetCeilings {
        FleetCeilings {
            vms: self.vms,
            adaptive: self.adaptive,
            until_ns: now_ns
                .saturating_add(u64::try_from(self.valid.as_nanos()).unwrap_or(u64::MAX)),
        }
    }
}

#[cfg(feature = "fleet")]
mod of {
    use super::FleetGrant;
    use crate::adaptive::{JobTiming, Schedule};
    use resex_fleet::alloc::{JobArc, VmSchedule};
    use resex_fleet::Allocation;
    use std::time::Duration;

    impl FleetGrant {
        /// The grant in a host's allocation from the coordinator; its schedules' Unix times
        /// moved onto the driver's clock, whose zero is `unix_at_zero_ns`.
        #[must_use]
        pub fn of(a: &Allocation, unix_at_zero_ns: u64) -> Self {
            Self {
                vms: a.ceilings_bps(),
                valid: Duration::from_millis(a.valid_ms),
                adaptive: a
                    .adaptive
                    .iter()
                    .map(|s| (s.vm.clone(), schedule(s, unix_at_zero_ns)))
                    .collect(),
            }
        }
    }

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

    /// `s` on the driver's clock, whose zero is Unix `zero_ns`.
    pub(super) fn schedule(s: &VmSchedule, zero_ns: u64) -> Schedule {
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
            grid: s.grid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_holds_for_its_validity_from_when_it_is_applied() {
        let g = FleetGrant {
            vms: vec![("j".into(), 5_000_000)],
            valid: Duration::from_millis(1500),
            adaptive: Vec::new(),
        };
        let c = g.at(2_000_000_000);
        assert_eq!(c.until_ns, 3_500_000_000);
        assert_eq!(c.vms, [("j".to_owned(), 5_000_000)]);
        let forever = FleetGrant {
            vms: Vec::new(),
            valid: Duration::MAX,
            adaptive: Vec::new(),
        };
        assert_eq!(forever.at(7).until_ns, u64::MAX);
    }

    #[cfg(feature = "fleet")]
    #[test]
    fn unix_times_land_on_the_drivers_clock_whole_periods_apart() {
        use resex_fleet::alloc::{JobArc, VmSchedule};
        let arc = |start| JobArc {
            period_ms: 200.0,
            last_start_unix_ms: start,
            arc_ms: 50.0,
            bytes: 1e6,
        };
        let zero = 1_790_000_000_000_000_000; // ns
        let s = of::schedule(
            &VmSchedule {
                vm: "j".into(),
                link: "up".into(),
                pool_mbps: 1000.0,
                gain: 10.0,
                me: arc(1_790_000_000_030.0),
                others: vec![arc(1_789_999_999_930.0)],
                grid: false,
            },
            zero,
        );
        assert_eq!(s.pool_bps, 1_000_000_000);
        assert_eq!(s.me_bytes, 1_000_000);
        assert_eq!(s.me.start_ns, 30_000_000);
        assert_eq!(s.me.arc_ns, 50_000_000);
        // 70 ms before the zero: 130 ms into the driver's first period.
        assert_eq!(s.others[0].start_ns, 130_000_000);
        assert_eq!(s.others[0].progress(140_000_000), Some(0.2));
    }
}
