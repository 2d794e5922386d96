//! A phase's figures ([`Phase`]) and what the four phases show together ([`Story`]): the
//! interferer's extra latency on the reporting VM, and the share of it IOShares removed.

use crate::health::Health;
use serde::Serialize;

/// One phase's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// base, interfered, freemarket, ioshares.
    pub name: &'static str,
    /// The reporting VM's mean server latency over the phase, us (null when it reported
    /// nothing in the phase's measured part; the demo then says so on stderr).
    pub victim_mean_us: Option<f64>,
    /// Real time: the count-weighted mean of its reports' p99, us; lab: the p99 of its orders.
    pub victim_p99_us: Option<f64>,
    /// What the interfering VM sent, Mbit/s.
    pub interferer_mbps: f64,
    /// Its mean cap over the phase, percent of one CPU (100 x vCPUs when uncapped; null when it
    /// is not running).
    pub interferer_cap_mean: Option<f64>,
    /// The host was too busy for this phase's figures to mean anything (`health` says why).
    pub host_overloaded: bool,
    /// How the host held up during the phase (real-time runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
}

/// Interference is visible when it raises the reporting VM's mean by this factor or more.
pub const VISIBLE: f64 = 1.25;
/// IOShares must remove at least this fraction of the interference.
pub const REMOVED: f64 = 1.0 / 3.0;

/// What the phases show.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Story {
    /// The interferer's extra latency on the reporting VM (interfered - base), us.
    pub interference_us: Option<f64>,
    /// The fraction of it IOShares removed ((interfered - ioshares) / (interfered - base)).
    pub ioshares_removed: Option<f64>,
    /// Interference visible (interfered >= 1.25 x base) and IOShares removed a third or more.
    pub holds: bool,
}

impl Story {
    /// The story of four phases (base, interfered, freemarket, ioshares).
    pub fn of(phases: &[Phase]) -> Story {
        let mean = |n: &str| {
            phases
                .iter()
                .find(|p| p.name == n)
                .and_then(|p| p.victim_mean_us)
        };
        let (base, intf, ios) = (mean("base"), mean("interfered"), mean("ioshares"));
        let interference_us = base.zip(intf).map(|(b, i)| i - b);
        let ioshares_removed = base
            .zip(intf)
            .zip(ios)
            .filter(|((b, i), _)| i > b)
            .map(|((b, i), s)| (i - s) / (i - b));
        let visible = base.zip(intf).is_some_and(|(b, i)| i >= VISIBLE * b);
        Story {
            interference_us,
            ioshares_removed,
            holds: visible && ioshares_removed.is_some_and(|r| r >= REMOVED),
        }
    }

    /// One line saying it.
    pub fn line(&self) -> String {
        match (self.interference_us, self.ioshares_removed) {
            (Some(i), Some(r)) => format!(
                "story: the interferer adds {i:.0} us to the reporting VM's mean; ioshares \
                 removes {:.0}% of that{}",
                100.0 * r,
                if self.holds {
                    ""
                } else {
                    " (not the story: interference visible and a third removed)"
                }
            ),
            (Some(i), None) => format!(
                "story: not shown (the interferer adds {i:.0} us; no ioshares figure to compare)"
            ),
            _ => "story: not shown (a phase has no latency figure)".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phases(means: [Option<f64>; 4]) -> Vec<Phase> {
        ["base", "interfered", "freemarket", "ioshares"]
            .into_iter()
            .zip(means)
            .map(|(name, m)| Phase {
                name,
                victim_mean_us: m,
                victim_p99_us: None,
                interferer_mbps: 0.0,
                interferer_cap_mean: None,
                host_overloaded: false,
                health: None,
            })
            .collect()
    }

    #[test]
    fn the_story_holds_when_interference_shows_and_ioshares_removes_a_third() {
        let s = Story::of(&phases([
            Some(300.0),
            Some(900.0),
            Some(2000.0),
            Some(500.0),
        ]));
        assert_eq!(s.interference_us, Some(600.0));
        assert!((s.ioshares_removed.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert!(s.holds);
        assert!(s.line().contains("removes 67%"), "{}", s.line());
    }

    #[test]
    fn the_story_fails_without_interference_or_without_relief() {
        // Interference below 25%.
        assert!(!Story::of(&phases([Some(300.0), Some(360.0), None, Some(300.0)])).holds);
        // IOShares removes a quarter only.
        let s = Story::of(&phases([Some(300.0), Some(700.0), None, Some(600.0)]));
        assert!(!s.holds);
        assert!(s.line().contains("not the story"), "{}", s.line());
        // A missing figure.
        let s = Story::of(&phases([None, Some(700.0), None, Some(300.0)]));
        assert!(!s.holds);
        assert_eq!(s.interference_us, None);
        // Worse than no interference at all: nothing to remove.
        let s = Story::of(&phases([Some(300.0), Some(200.0), None, Some(100.0)]));
        assert_eq!(s.ioshares_removed, None);
        assert!(!s.holds);
    }
}
