//! Small random hosts and what each guest is owed on them: the generator of the entitlement
//! proptest (`src/lab/tests/entitlement.rs`) and of `resex lab owed`, and the one judgement
//! both make.
//!
//! A host has 2-6 guests on an 8 Gb/s link, each entitled to an equal split of it. A guest
//! answers orders with replies of 4 KiB to 4 MiB ([`SIZES`]), either as a closed loop (one
//! order after the other, as fast as it is served) or at an offered rate of a tenth to nine
//! tenths of its entitlement; it runs the agent or not, and one that runs it may lie (3x its
//! latency from 1 s). Each guest is judged against the same host with no policy
//! ([`verdicts`]): one that demands its entitlement by the *share* of it it got, one within
//! it by its mean latency over its mean with no policy.

use crate::compare::owed;
use crate::host::{LabConfig, LabError, LabHost};
use crate::result::LabResult;
use resex_pricing::PolicyConfig;
use resex_scenario::{Scenario, ScenarioError};
use serde::Serialize;

/// The reply sizes a guest draws from, bytes.
pub const SIZES: [u64; 6] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20];

/// The link every host has, bits/s.
const LINK_BPS: f64 = 8e9;

/// Virtual seconds per run.
const DURATION_S: f64 = 2.0;

/// Warm-up left out of every figure, seconds (the host learns rates over about 0.1 s).
pub const WARMUP_S: f64 = 0.5;

/// One random guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RandomGuest {
    /// Its reply size, bytes (one of [`SIZES`]).
    pub reply: u64,
    /// Its offered load in tenths of its entitlement (0: a closed loop).
    pub load_tenths: u32,
    /// Whether it runs the agent.
    pub agent: bool,
    /// Whether it reports 3x its latency (only with the agent).
    pub lies: bool,
}

impl RandomGuest {
    /// A guest as the proptest's strategy draws one: a size from [`SIZES`]; a closed loop
    /// half the time, else 1-9 tenths; the agent half the time; of those, half lie.
    #[must_use]
    pub fn draw(rng: &mut fastrand::Rng) -> Self {
        let agent = rng.bool();
        Self {
            reply: SIZES[rng.usize(..SIZES.len())],
            load_tenths: if rng.bool() { 0 } else { rng.u32(1..=9) },
            agent,
            lies: agent && rng.bool(),
        }
    }
}

/// A host of 2-6 random guests.
#[must_use]
pub fn draw_host(rng: &mut fastrand::Rng) -> Vec<RandomGuest> {
    let n = rng.usize(2..=6);
    (0..n).map(|_| RandomGuest::draw(rng)).collect()
}

/// The scenario of a host of `guests` (named g0, g1, ...).
///
/// # Errors
/// The scenario does not validate (a guest list outside what a scenario takes).
pub fn scenario(guests: &[RandomGuest]) -> Result<Scenario, ScenarioError> {
    #[allow(clippy::cast_precision_loss)]
    let n = guests.len() as f64;
    let mut t = format!("name = \"random\"\nduration_s = {DURATION_S:.1}\n");
    for (i, g) in guests.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let rate = if g.load_tenths == 0 {
            0.0
        } else {
            // Tenths of the equal split, in orders/s (at least 5/s).
            (f64::from(g.load_tenths) / 10.0 * LINK_BPS / n / (g.reply as f64 * 8.0 * 1.03))
                .max(5.0)
        };
        let lie = if g.lies {
            "report_scale = 3.0\nreport_scale_from_s = 1.0\n"
        } else {
            ""
        };
        let polling = if g.load_tenths == 0 {
            "spin"
        } else {
            "adaptive"
        };
        t += &format!(
            "[[guest]]\nname = \"g{i}\"\nreports = {}\nram = \"64MiB\"\n{lie}[guest.benchex]\n\
             buffer = {}\nrate = {rate:.1}\npolling = \"{polling}\"\n",
            g.agent, g.reply,
        );
    }
    Scenario::from_toml(&t)
}

/// Runs `s` under `policy` (None: no policy), the warm-up left out.
///
/// # Errors
/// The lab host refused the scenario or the policy.
pub fn run(s: &Scenario, policy: Option<(String, PolicyConfig)>) -> Result<LabResult, LabError> {
    let cfg = LabConfig {
        policy,
        warmup_s: WARMUP_S,
        series: true,
        ..LabConfig::default()
    };
    LabHost::new(s, cfg)?.run(|_, _| {})
}

/// One guest judged under a policy against no policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The guest.
    pub name: String,
    /// Its entitlement, Mb/s on the wire.
    pub entitled_mbps: f64,
    /// What it demands, Mb/s on the wire: its offered load, or, for a closed loop, what it
    /// sent with no policy (a 4 KiB ping-pong cannot fill its entitlement however it is
    /// served).
    pub demand_mbps: f64,
    /// What it sent under the policy, Mb/s on the wire.
    pub mbps: f64,
    /// Demanding its entitlement: what it sent over its entitlement.
    pub share: Option<f64>,
    /// Within it: its mean latency under the policy and with no policy, us (None: no order
    /// completed in one of them).
    pub mean_us: Option<(f64, f64)>,
}

impl Verdict {
    /// Within its entitlement: its mean latency over its mean with no policy.
    #[must_use]
    pub fn latency_x(&self) -> Option<f64> {
        self.mean_us.map(|(m, n)| m / n)
    }
}

/// Every guest of `s` judged under a policy (`r`) against no policy (`none`).
#[must_use]
pub fn verdicts(s: &Scenario, none: &LabResult, r: &LabResult) -> Vec<Verdict> {
    let none_rows = owed::rows(s, none, WARMUP_S);
    owed::rows(s, r, WARMUP_S)
        .into_iter()
        .enumerate()
        .map(|(k, o)| {
            let demand = s
                .guests
                .get(k)
                .and_then(|g| owed::demand(s, g))
                .or_else(|| none_rows.get(k).map(|n| n.mbps))
                .unwrap_or(0.0);
            let demands = demand >= o.entitled_mbps;
            let mean = |x: &LabResult| x.vms.get(k).and_then(|v| v.lat_mean_us);
            Verdict {
                share: demands.then(|| o.mbps / o.entitled_mbps),
                mean_us: if demands {
                    None
                } else {
                    mean(r).zip(mean(none))
                },
                name: o.name,
                entitled_mbps: o.entitled_mbps,
                demand_mbps: demand,
                mbps: o.mbps,
            }
        })
        .collect()
}

/// A host's worst figures under one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Worst {
    /// The highest latency over no policy of a guest within its entitlement, and the guest.
    pub latency_x: Option<(f64, String)>,
    /// The least share of its entitlement of a guest that demands it, and the guest.
    pub share: Option<(f64, String)>,
}

/// The worst of `vs`.
#[must_use]
pub fn worst(vs: &[Verdict]) -> Worst {
    let pick = |f: &dyn Fn(&Verdict) -> Option<f64>, most: bool| {
        vs.iter()
            .filter_map(|v| f(v).map(|x| (x, v.name.clone())))
            .reduce(|a, b| if (b.0 > a.0) == most { b } else { a })
    };
    Worst {
        latency_x: pick(&Verdict::latency_x, true),
        share: pick(&|v: &Verdict| v.share, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drawn_host_is_a_valid_scenario_of_its_guests() {
        let mut rng = fastrand::Rng::with_seed(29);
        for _ in 0..50 {
            let g = draw_host(&mut rng);
            assert!((2..=6).contains(&g.len()));
            assert!(g
                .iter()
                .all(|g| SIZES.contains(&g.reply) && g.load_tenths <= 9 && (g.agent || !g.lies)));
            let s = scenario(&g).unwrap();
            assert_eq!(s.guests.len(), g.len());
        }
        // The same seed, the same hosts.
        let a = draw_host(&mut fastrand::Rng::with_seed(7));
        assert_eq!(a, draw_host(&mut fastrand::Rng::with_seed(7)));
    }

    #[test]
    fn the_worst_is_the_slowest_guest_within_and_the_least_served_one_that_demands() {
        let v = |name: &str, share, mean_us| Verdict {
            name: name.into(),
            entitled_mbps: 1000.0,
            demand_mbps: 0.0,
            mbps: 0.0,
            share,
            mean_us,
        };
        let vs = [
            v("a", Some(0.95), None),
            v("b", None, Some((130.0, 100.0))),
            v("c", Some(0.85), None),
            v("d", None, Some((90.0, 100.0))),
            v("e", None, None),
        ];
        let w = worst(&vs);
        assert_eq!(w.latency_x, Some((1.3, "b".into())));
        assert_eq!(w.share, Some((0.85, "c".into())));
        assert_eq!(
            worst(&[]),
            Worst {
                latency_x: None,
                share: None
            }
        );
    }
}
