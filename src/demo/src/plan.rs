//! The demo's plan ([`Demo`]): the paper's pair (with what the demo's admin grants the
//! interfering VM), the four phases and their policies, and how the run time splits between
//! them.

use crate::error::DemoError;
use resex_pricing::{Lever, PolicyConfig};
use resex_scenario::{GuestSpec, Scenario};

const SCENARIO: &str = include_str!("../../../tools/scenarios/paper-pair.toml");
const FREEMARKET: &str = include_str!("../../../policies/freemarket.toml");
const IOSHARES: &str = include_str!("../../../policies/ioshares.toml");

/// The reporting VM (64 KiB replies): the one whose latency the story is about.
pub const VICTIM: &str = "reporting";
/// The interfering VM (2 MiB replies).
pub const INTERFERER: &str = "interfering";
/// What the demo's admin sold the interfering VM on the 8 Gb/s port: above it, a policy may cap
/// it. Without a grant each VM is entitled to half the port, and an interferer that a busy
/// 2-core machine holds below 4 Gb/s would be within its entitlement and left alone (it was,
/// in CI: 2.3 Gb/s). The reporting VM gets what is left (7 Gb/s).
pub const INTERFERER_ENTITLEMENT_BPS: u64 = 1_000_000_000;
/// The shortest demo, seconds: one per phase.
pub const MIN_DURATION_S: f64 = 4.0;

/// The phases: name and policy (name, configuration).
pub type Plan = [(&'static str, Option<(&'static str, PolicyConfig)>); 4];

/// A demo to run: the scenario, the phases, and their timing.
#[derive(Debug, Clone)]
pub struct Demo {
    /// The paper's pair, with the interferer's grant.
    pub scenario: Scenario,
    /// The four phases.
    pub plan: Plan,
    /// Each phase's length, s.
    pub secs: f64,
    /// The start of each phase left out of its figures, s.
    pub settle: f64,
}

impl Demo {
    /// The demo over `duration_s` seconds in all, split evenly between the four phases.
    pub fn new(duration_s: f64) -> Result<Demo, DemoError> {
        if !(duration_s.is_finite() && duration_s >= MIN_DURATION_S) {
            return Err(DemoError::TooShort {
                duration: duration_s,
                min: MIN_DURATION_S,
            });
        }
        let scenario = scenario()?;
        let secs = duration_s / 4.0;
        Ok(Demo {
            scenario,
            plan: plan()?,
            secs,
            settle: (secs * 0.25).min(2.0),
        })
    }

    /// The scenario's guest `name`.
    pub fn guest(&self, name: &str) -> Result<GuestSpec, DemoError> {
        self.scenario
            .guests
            .iter()
            .find(|g| g.name == name)
            .cloned()
            .ok_or(DemoError::MissingGuest("guests"))
    }
}

/// IOShares as resex runs it: on both levers. With the CPU cap alone (the paper's lever) the
/// interferer, held at its 10% floor, still had 2 MiB writes posted: each holds softhca's port
/// for 2 ms, and on a fast host that head-of-line wait was most of what remained of the
/// interference (CI: the victim 430 us against 212 us alone and 492 us interfered, the 2 MiB VM
/// still at 1565 Mb/s). The rate lever interleaves the victim's packets with them and holds
/// the interferer to its ceiling.
fn ioshares() -> Result<PolicyConfig, DemoError> {
    let mut c = PolicyConfig::from_toml(IOSHARES)?;
    c.lever = Some(Lever::Both);
    Ok(c)
}

/// The paper's pair, with what the demo's admin grants the interfering VM.
pub fn scenario() -> Result<Scenario, DemoError> {
    let mut s = Scenario::from_toml(SCENARIO).map_err(|source| DemoError::Scenario {
        what: "the built-in scenario",
        source,
    })?;
    let g = s
        .guests
        .iter_mut()
        .find(|g| g.name == INTERFERER)
        .ok_or(DemoError::MissingGuest("interfering guest"))?;
    g.entitlement = Some(resex_scenario::BitRate(INTERFERER_ENTITLEMENT_BPS));
    Ok(s)
}

/// The four phases: `base` and `interfered` with no policy, then `freemarket` and `ioshares`.
pub fn plan() -> Result<Plan, DemoError> {
    Ok([
        ("base", None),
        ("interfered", None),
        (
            "freemarket",
            Some(("freemarket", PolicyConfig::from_toml(FREEMARKET)?)),
        ),
        ("ioshares", Some(("ioshares", ioshares()?))),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_is_four_phases_with_the_interferers_grant() {
        let d = Demo::new(8.0).unwrap();
        let names: Vec<&str> = d.plan.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["base", "interfered", "freemarket", "ioshares"]);
        assert!(d.plan[0].1.is_none() && d.plan[1].1.is_none());
        assert_eq!(d.plan[3].1.as_ref().unwrap().1.lever, Some(Lever::Both));
        assert_eq!((d.secs, d.settle), (2.0, 0.5));
        assert_eq!(Demo::new(40.0).unwrap().settle, 2.0);
        let g = d.guest(INTERFERER).unwrap();
        assert_eq!(
            g.entitlement,
            Some(resex_scenario::BitRate(INTERFERER_ENTITLEMENT_BPS))
        );
        assert!(d.guest(VICTIM).is_ok());
        assert!(matches!(d.guest("nobody"), Err(DemoError::MissingGuest(_))));
    }

    #[test]
    fn a_demo_shorter_than_a_second_per_phase_is_refused() {
        for s in [3.9, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(Demo::new(s), Err(DemoError::TooShort { .. })),
                "{s}"
            );
        }
    }
}
