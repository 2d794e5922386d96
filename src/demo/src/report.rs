//! What a demo reports: [`DemoReport`], its phases, the story, and for a real-time run the
//! host's figures ([`HostReport`]); serialised, it is `resex demo --json`'s output.

use crate::phase::{Phase, Story};
use serde::Serialize;

/// The whole run's host figures.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// What softhca's port thread runs at.
    pub softhca_priority: String,
    /// What the daemon's control loop runs at.
    pub loop_priority: String,
    /// Seconds in which softhca was held up 20 ms or more, of `hca_watched_s`.
    pub hca_stalled_s: u64,
    /// Seconds softhca watched.
    pub hca_watched_s: u64,
    /// Its longest hold-up, ms.
    pub hca_longest_ms: f64,
    /// CPU its port thread used over the run, percent of one CPU (null: `/proc` could not say).
    pub hca_cpu_pct: Option<f64>,
    /// Its wake-ups per second over the run.
    pub hca_wakeups_per_s: f64,
    /// The daemon's ticks.
    pub ticks: u64,
    /// Their lateness over the run, us: p50, p99, max.
    pub tick_late_p50_us: f64,
    /// p99.
    pub tick_late_p99_us: f64,
    /// max.
    pub tick_late_max_us: f64,
}

impl HostReport {
    /// One line.
    pub fn line(&self) -> String {
        format!(
            "host: daemon {} ticks of 1 ms, late p50 {:.0} us, p99 {:.0} us, max {:.0} us ({}); \
             softhca ({}) used {} of a CPU ({:.0} wake-ups/s), held up 20 ms or more in {} of \
             {} s, longest {:.1} ms; caps restored",
            self.ticks,
            self.tick_late_p50_us,
            self.tick_late_p99_us,
            self.tick_late_max_us,
            self.loop_priority,
            self.softhca_priority,
            self.hca_cpu_pct.map_or("?".into(), |c| format!("{c:.1}%")),
            self.hca_wakeups_per_s,
            self.hca_stalled_s,
            self.hca_watched_s,
            self.hca_longest_ms,
        )
    }
}

/// A demo's results, as `--json` prints them.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// `real-time` or `virtual-time`.
    pub mode: &'static str,
    /// Some phase was overloaded: its figures are the host's.
    pub host_overloaded: bool,
    /// What the phases show.
    pub story: Story,
    /// The phases.
    pub phases: Vec<Phase>,
    /// The host's figures (real time only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostReport>,
    /// The seed of the guests' arrivals (virtual time only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl DemoReport {
    /// The report of a virtual-time run with `seed`.
    pub fn lab(phases: Vec<Phase>, seed: u64) -> DemoReport {
        Self::of("virtual-time", phases, None, Some(seed))
    }

    /// The report of a real-time run.
    pub fn live(phases: Vec<Phase>, host: HostReport) -> DemoReport {
        Self::of("real-time", phases, Some(host), None)
    }

    fn of(
        mode: &'static str,
        phases: Vec<Phase>,
        host: Option<HostReport>,
        seed: Option<u64>,
    ) -> DemoReport {
        DemoReport {
            mode,
            host_overloaded: phases.iter().any(|p| p.host_overloaded),
            story: Story::of(&phases),
            phases,
            host,
            seed,
        }
    }

    /// True for a virtual-time run.
    pub fn is_lab(&self) -> bool {
        self.seed.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(name: &'static str, mean: f64, overloaded: bool) -> Phase {
        Phase {
            name,
            victim_mean_us: Some(mean),
            victim_p99_us: None,
            interferer_mbps: 0.0,
            interferer_cap_mean: None,
            host_overloaded: overloaded,
            health: None,
        }
    }

    #[test]
    fn the_json_keeps_its_keys_in_order_and_leaves_out_what_the_mode_lacks() {
        let phases = vec![
            phase("base", 100.0, false),
            phase("interfered", 200.0, false),
            phase("freemarket", 180.0, false),
            phase("ioshares", 100.0, false),
        ];
        let r = DemoReport::lab(phases.clone(), 7);
        assert!(r.is_lab() && r.story.holds && !r.host_overloaded);
        let j = serde_json::to_string(&r).unwrap();
        assert!(
            j.starts_with(r#"{"mode":"virtual-time","host_overloaded":false,"story":{"#),
            "{j}"
        );
        assert!(j.ends_with(r#""seed":7}"#), "{j}");
        assert!(
            !j.contains(r#""host":"#) && !j.contains(r#""health""#),
            "{j}"
        );
        let mut live = phases;
        live[2].host_overloaded = true;
        let host = HostReport {
            softhca_priority: "SCHED_FIFO 10".into(),
            loop_priority: "SCHED_FIFO 20".into(),
            hca_stalled_s: 0,
            hca_watched_s: 8,
            hca_longest_ms: 1.5,
            hca_cpu_pct: None,
            hca_wakeups_per_s: 1000.0,
            ticks: 8000,
            tick_late_p50_us: 5.0,
            tick_late_p99_us: 50.0,
            tick_late_max_us: 500.0,
        };
        let r = DemoReport::live(live, host);
        assert!(!r.is_lab() && r.host_overloaded);
        let j = serde_json::to_string(&r).unwrap();
        assert!(
            j.starts_with(r#"{"mode":"real-time","host_overloaded":true,"#),
            "{j}"
        );
        assert!(
            j.contains(r#""host":{"softhca_priority""#) && !j.contains("seed"),
            "{j}"
        );
        assert!(r.host.unwrap().line().contains("8000 ticks"));
    }
}
