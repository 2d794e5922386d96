//! The coordinator's round (pure, feature `coordinator`): from the topology and every host's summary, DRUM's
//! allocation over the shared links ([`resex_drum::network`]), and one [`Allocation`] per host
//! (`PREFIX/alloc/HOST`): a ceiling for each of its VMs that crosses a congested link, valid
//! for a while. A host applies its allocation over its local policy and lifts it when it lapses
//! or when the fleet is lost.
//!
//! **Adaptive unfairness.** On a link whose periodic jobs are compatible (the circle's score,
//! rotated, at least `[compat] threshold`), each job's host also gets a schedule
//! (`crate::compat::schedules`): the job further into its communication gets the larger
//! share of what the link leaves them.
//!
//! **Weights.** A VM weighs by what the admin grants it (its entitlement on its host's link,
//! from its host's summary), so VMs contending on a shared link get rates in proportion to
//! their entitlements; whether it reports its latency (runs the agent) changes nothing. (An
//! entitlement is a share of the VM's host link: a shared uplink is usually smaller than the
//! sum of its hosts' links, so it is a weight there, not a floor.)
//!
//! **Demand.** The fleet sees rates, not queues: a VM's demand is its measured rate with room
//! to grow (`headroom`, at least `min_demand_mbps`); a VM held at 90% or more of its ceiling
//! asks for `probe` times that ceiling, so a ceiling that has become too tight opens again
//! within a few rounds.
//!
//! **Where the per-host step runs.** Algorithm 2 has each host compute its x from the
//! broadcast prices. Here the hosts publish their inputs (their VMs' rates and classes, in the
//! summary they write anyway) and the coordinator runs the per-host steps
//! ([`resex_drum::network::host_step`]) over them, in one process: one etcd round per
//! allocation instead of one per iteration (a round of 200 iterations through etcd would take
//! minutes). The prices persist between rounds (a warm start).

use crate::alloc::{Allocation, LinkCompat, RoundReport, VmAlloc, MAX_DEMAND_MBPS, MAX_ROUND_VMS};
use crate::error::FleetError;
use crate::record::{HostSummary, VmSummary};
use crate::topology::Topology;
use resex_drum::network::{self, NetApp, NetHost, NetProblem, NetStopping, Prices};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The coordinator's state between rounds (the warm start).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Planner {
    /// The link prices.
    pub prices: Prices,
    /// Rounds done.
    pub round: u64,
    /// The links the prices are for (a new topology starts them again).
    links: Vec<String>,
    /// Each link's last score and the jobs it was for (a link is scored every few rounds: its
    /// schedules hold in between while its jobs are the same).
    #[serde(skip)]
    scored: HashMap<String, (Vec<(String, String)>, f64)>,
    /// Each compatible link's grid of target arcs (kept while it holds).
    #[serde(skip)]
    grids: HashMap<String, crate::compat::Grid>,
}

fn demand(t: &Topology, tx_mbps: f64, ceiling: Option<f64>) -> f64 {
    let tx = if tx_mbps.is_finite() {
        tx_mbps.clamp(0.0, MAX_DEMAND_MBPS)
    } else {
        0.0
    };
    let d = match ceiling {
        Some(c) if c.is_finite() && c > 0.0 && tx >= 0.9 * c => c.min(MAX_DEMAND_MBPS) * t.probe,
        _ => (tx * t.headroom).max(t.min_demand_mbps),
    };
    d.min(MAX_DEMAND_MBPS)
}

/// The weight a VM assumed entitled to this much weighs when its host did not say (an older
/// resexd), Mb/s.
pub const UNKNOWN_ENTITLEMENT_MBPS: f64 = 1000.0;

/// What the admin grants `v`, Mb/s, if its host said and it is a rate (0 otherwise).
fn entitled(v: &VmSummary) -> f64 {
    v.entitled_mbps
        .filter(|e| e.is_finite() && *e > 0.0)
        .map_or(0.0, |e| e.min(MAX_DEMAND_MBPS))
}

/// A VM's weight in the split: its entitlement to the power alpha (DRUM's rates go as
/// `w^(1/alpha)`, so contending VMs get rates in proportion to their entitlements), never
/// whether it reports its latency: a tenant cannot buy a larger share by running the agent,
/// nor lose one by not running it.
fn weight(v: &VmSummary, alpha: f64) -> f64 {
    let e = match entitled(v) {
        e if e > 0.0 => e,
        _ => UNKNOWN_ENTITLEMENT_MBPS,
    };
    e.powf(alpha)
}

impl Planner {
    /// Each listed link's score: this round's, or the last one computed for the same jobs.
    fn remember(&mut self, links: &[LinkCompat]) -> HashMap<String, f64> {
        let mut out = HashMap::with_capacity(links.len());
        let mut kept = HashMap::with_capacity(links.len());
        for c in links {
            let jobs: Vec<(String, String)> = c
                .jobs
                .iter()
                .map(|j| (j.host.clone(), j.vm.clone()))
                .collect();
            let score = c.score.or_else(|| {
                self.scored
                    .get(&c.link)
                    .filter(|(j, _)| *j == jobs)
                    .map(|(_, s)| *s)
            });
            if let Some(s) = score {
                out.insert(c.link.clone(), s);
                kept.insert(c.link.clone(), (jobs, s));
            }
        }
        self.scored = kept;
        out
    }

    /// One round over the hosts' summaries: every host crossing a link gets an allocation
    /// (an empty one lifts what it had).
    pub fn round(
        &mut self,
        t: &Topology,
        summaries: &[HostSummary],
        coordinator: &str,
        at_unix_ms: u64,
    ) -> Result<(Vec<Allocation>, RoundReport), FleetError> {
        let names: Vec<String> = t.links.iter().map(|l| l.name.clone()).collect();
        if names != self.links {
            self.prices = Prices::default();
            self.links = names;
        }
        self.round += 1;
        let paths = t.paths();
        let mut p = NetProblem {
            capacity: t.links.iter().map(|l| l.capacity_mbps).collect(),
            hosts: Vec::new(),
            alpha: t.alpha,
        };
        let mut who = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut vms = 0usize;
        for s in summaries {
            let Some(path) = paths.get(s.host.as_str()) else {
                continue;
            };
            // One summary per host; bounded work per round.
            if !seen.insert(s.host.as_str()) || vms + s.vms.len() > MAX_ROUND_VMS {
                continue;
            }
            vms += s.vms.len();
            let apps = s
                .vms
                .iter()
                .map(|v| NetApp {
                    weight: weight(v, t.alpha),
                    demand: demand(t, v.tx_mbps, v.tx_max_mbps),
                })
                .collect();
            p.hosts.push(NetHost {
                links: path.clone(),
                apps,
            });
            who.push(s);
        }
        let sol = network::solve(&p, &mut self.prices, NetStopping::default())
            .map_err(FleetError::Allocation)?;
        let mut allocs = Vec::with_capacity(who.len());
        // Each round scores from where the last one stopped.
        let first = usize::try_from(self.round)
            .unwrap_or(0)
            .wrapping_mul(crate::compat::MAX_SCORED_LINKS);
        let (links, links_left_out) = crate::compat::score_links(t, &who, first);
        let scores = self.remember(&links);
        let mut schedules = if t.compat.adaptive {
            #[allow(clippy::cast_precision_loss)]
            let now = at_unix_ms as f64;
            crate::compat::schedules(t, &links, &scores, &who, &sol.x, &mut self.grids, now)
        } else {
            Default::default()
        };
        let mut rep = RoundReport {
            round: self.round,
            hosts: who.len(),
            iterations: sol.iterations,
            converged: sol.converged,
            max_overload: sol.max_overload,
            congested: self.prices.u.iter().filter(|u| **u > 0.0).count(),
            links,
            links_left_out,
            ..RoundReport::default()
        };
        for ((s, h), x) in who.iter().zip(&p.hosts).zip(&sol.x) {
            rep.vms += s.vms.len();
            let congested = h.links.iter().any(|&l| self.prices.u[l] > 0.0);
            let vms: Vec<VmAlloc> = if congested {
                s.vms
                    .iter()
                    .zip(x)
                    .map(|(v, x)| VmAlloc {
                        vm: v.name.clone(),
                        max_mbps: x.max(0.001),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            rep.allocations += vms.len();
            let adaptive = schedules.remove(s.host.as_str()).unwrap_or_default();
            rep.schedules += adaptive.len();
            allocs.push(Allocation {
                host: s.host.clone(),
                coordinator: coordinator.into(),
                round: self.round,
                at_unix_ms,
                valid_ms: t.valid_s * 1000,
                vms,
                adaptive,
            });
        }
        Ok((allocs, rep))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::VmSummary;

    fn vm(name: &str, tx: f64, reporting: bool, ceiling: Option<f64>) -> VmSummary {
        VmSummary {
            name: name.into(),
            tx_mbps: tx,
            cpu_pct: 0.0,
            cap_pct: None,
            tx_share_mbps: None,
            tx_max_mbps: ceiling,
            lat_p99_us: reporting.then_some(50.0),
            intf_pct: None,
            entitled_mbps: None,
            period: None,
        }
    }

    fn summary(host: &str, vms: Vec<VmSummary>) -> HostSummary {
        HostSummary {
            host: host.into(),
            at_unix_ms: 0,
            policy: String::new(),
            link_util: 0.0,
            vms,
        }
    }

    fn topo() -> Topology {
        Topology::from_toml(
            "[[link]]\nname = \"up\"\ncapacity_mbps = 1000\nhosts = [\"a\", \"b\"]\n",
        )
        .unwrap()
    }

    #[test]
    fn a_congested_uplink_is_shared_and_a_quiet_one_left_alone() {
        let t = topo();
        let mut pl = Planner::default();
        // Two bulk senders at 900 Mb/s each on one 1000 Mb/s uplink, a reporting VM at 20.
        let s = vec![
            summary(
                "a",
                vec![
                    vm("bulk-a", 900.0, false, None),
                    vm("rep", 20.0, true, None),
                ],
            ),
            summary("b", vec![vm("bulk-b", 900.0, false, None)]),
            summary("elsewhere", vec![vm("x", 5000.0, false, None)]),
        ];
        let (allocs, rep) = pl.round(&t, &s, "a", 1).unwrap();
        assert_eq!((rep.hosts, rep.vms, rep.congested), (2, 3, 1), "{rep:?}");
        assert!(rep.max_overload <= 1.0 + 1e-12);
        let a = &allocs[0];
        assert_eq!(a.valid_ms, 5000);
        let get = |al: &Allocation, n: &str| al.vms.iter().find(|v| v.vm == n).unwrap().max_mbps;
        // The small sender keeps its demand (24 Mb/s, under its fair share); the bulk VMs split
        // the rest.
        assert!((get(a, "rep") - 24.0).abs() < 0.1, "{allocs:?}");
        assert!((get(a, "bulk-a") - 488.0).abs() < 2.0, "{allocs:?}");
        assert!(
            (get(&allocs[1], "bulk-b") - 488.0).abs() < 2.0,
            "{allocs:?}"
        );
        // Quiet: the same hosts far under the link: empty allocations lift the ceilings.
        let quiet = vec![
            summary("a", vec![vm("bulk-a", 100.0, false, Some(488.0))]),
            summary("b", vec![vm("bulk-b", 100.0, false, Some(488.0))]),
        ];
        let (allocs, rep) = pl.round(&t, &quiet, "a", 2).unwrap();
        assert_eq!(rep.round, 2);
        assert_eq!(rep.congested, 0, "{rep:?}");
        assert!(allocs.iter().all(|a| a.vms.is_empty()), "{allocs:?}");
    }

    fn entitled(mut v: VmSummary, mbps: f64) -> VmSummary {
        v.entitled_mbps = Some(mbps);
        v
    }

    #[test]
    fn shares_follow_entitlements_and_running_the_agent_buys_nothing() {
        let t = topo();
        let ceilings = |s: &[HostSummary]| {
            let (allocs, _) = Planner::default().round(&t, s, "a", 1).unwrap();
            allocs
                .iter()
                .flat_map(|a| a.vms.iter().map(|v| (v.vm.clone(), v.max_mbps)))
                .collect::<std::collections::HashMap<_, _>>()
        };
        // Equal entitlements: the one that reports its latency gets what the other gets.
        let c = ceilings(&[
            summary("a", vec![entitled(vm("reports", 900.0, true, None), 500.0)]),
            summary("b", vec![entitled(vm("silent", 900.0, false, None), 500.0)]),
        ]);
        assert!((c["reports"] - c["silent"]).abs() < 1.0, "{c:?}");
        assert!((c["reports"] - 500.0).abs() < 5.0, "{c:?}");
        // 3:1 entitlements: 3:1 rates on the congested link.
        let c = ceilings(&[
            summary("a", vec![entitled(vm("big", 900.0, false, None), 750.0)]),
            summary("b", vec![entitled(vm("small", 900.0, true, None), 250.0)]),
        ]);
        assert!((c["big"] / c["small"] - 3.0).abs() < 0.1, "{c:?}");
        // Entitlements above the uplink (each a share of its host's own link) are weights
        // there: the ceilings still fit the link.
        let c = ceilings(&[
            summary("a", vec![entitled(vm("a", 900.0, false, None), 8000.0)]),
            summary("b", vec![entitled(vm("b", 900.0, false, None), 8000.0)]),
        ]);
        assert!(c["a"] + c["b"] <= 1000.0 + 1e-6, "{c:?}");
    }

    #[test]
    fn compatible_jobs_get_schedules_and_incompatible_ones_stay_fair() {
        let mut t = topo();
        t.compat.adaptive = true;
        let job = |name: &str, share: f64, start: f64| VmSummary {
            period: Some(crate::record::JobPeriod {
                period_ms: 200.0,
                last_start_unix_ms: 1.79e12 + start,
                bytes_per_period: share * 25e6,
                duty: 0.02,
                confidence: 0.9,
                latest_period_ms: None,
            }),
            ..vm(name, share * 1000.0, false, None)
        };
        let fleet = |share: f64| {
            vec![
                summary(
                    "a",
                    vec![job("ja", share, 0.0), vm("web", 50.0, true, None)],
                ),
                summary("b", vec![job("jb", share, 10.0)]),
            ]
        };
        // Now: half a second after the jobs' latest arcs.
        let now = 1_790_000_000_500;
        let (allocs, rep) = Planner::default()
            .round(&t, &fleet(0.25), "a", now)
            .unwrap();
        assert_eq!(rep.schedules, 2, "{rep:?}");
        let a = &allocs[0].adaptive;
        assert_eq!(a.len(), 1, "the web VM is not periodic: {a:?}");
        let s = &a[0];
        assert_eq!((s.vm.as_str(), s.link.as_str(), s.gain), ("ja", "up", 10.0));
        // The pool is the link less what DRUM gives the web VM (its demand, 60 Mb/s).
        assert!((s.pool_mbps - 940.0).abs() < 1.0, "{s:?}");
        // 6.25 MB at the pool's 940 Mb/s.
        assert!((s.me.arc_ms - 53.19).abs() < 0.01, "{s:?}");
        assert_eq!(s.others.len(), 1);
        // One period (200 ms): both at their targets on the link's grid, 3% longer, the
        // spare time split between them, in the order they run (ja 10 ms ahead of jb).
        let period = 200.0 * (1.0 + crate::compat::GRID_SLACK);
        let spare = (period - 2.0 * s.me.arc_ms) / 2.0;
        assert!((s.me.period_ms - period).abs() < 1e-9, "{s:?}");
        assert!((s.me.last_start_unix_ms - 1.79e12).abs() < 1e-3, "{s:?}");
        let want = 1.79e12 + s.me.arc_ms + spare;
        assert!(
            (s.others[0].last_start_unix_ms - want).abs() < 1e-3,
            "{s:?}"
        );
        assert_eq!(allocs[1].adaptive[0].vm, "jb");
        // 60% each: 0.83 rotated, under the 0.9 threshold: no schedule, DRUM's split alone.
        let (allocs, rep) = Planner::default().round(&t, &fleet(0.6), "a", 1).unwrap();
        assert_eq!(rep.schedules, 0, "{rep:?}");
        assert!(allocs.iter().all(|a| a.adaptive.is_empty()));
        // Switched off in the topology: none either.
        let mut off = topo();
        off.compat.adaptive = false;
        let (_, rep) = Planner::default()
            .round(&off, &fleet(0.25), "a", 1)
            .unwrap();
        assert_eq!(rep.schedules, 0);
    }

    #[test]
    fn a_scheduled_link_keeps_its_schedules_through_a_noisy_score() {
        let mut t = topo();
        t.compat.adaptive = true;
        // 11.75 MB a period (94 ms at 1 Gb/s), measured colliding at `period` with arcs half
        // of it (alone: 248 ms for 308).
        let job = |name: &str, period_ms: f64, bytes: f64| VmSummary {
            period: Some(crate::record::JobPeriod {
                period_ms,
                last_start_unix_ms: 1.79e12,
                bytes_per_period: bytes,
                duty: 0.5,
                confidence: 0.9,
                latest_period_ms: None,
            }),
            ..vm(name, 300.0, false, None)
        };
        let fleet = |pb: f64, bytes: f64| {
            vec![
                summary("a", vec![job("ja", 308.0, bytes)]),
                summary("b", vec![job("jb", pb, bytes)]),
            ]
        };
        let score = |rep: &RoundReport| rep.links[0].score.unwrap();
        let at = |k: u64| 1_790_000_000_000 + 1000 * k;
        let mut pl = Planner::default();
        let (_, rep) = pl.round(&t, &fleet(308.0, 11.75e6), "a", at(1)).unwrap();
        assert!(score(&rep) >= 0.9 && rep.schedules == 2, "{rep:?}");
        // One job read 9% short (as live on a busy machine): two periods (0.81), under the threshold
        // but within KEEP_MARGIN of it; the link keeps its schedules.
        let noisy = fleet(280.0, 11.75e6);
        let in_margin =
            |s: f64| s < t.compat.threshold && s >= t.compat.threshold - crate::compat::KEEP_MARGIN;
        let (allocs, rep) = pl.round(&t, &noisy, "a", at(2)).unwrap();
        assert!(in_margin(score(&rep)), "{rep:?}");
        assert_eq!(rep.schedules, 2, "held: {rep:?}");
        assert!(
            allocs.iter().all(|a| a.adaptive.iter().all(|s| s.grid)),
            "on the grid it kept: {allocs:?}"
        );
        // One job read at twice the grid's period (248 ms alone, plus 3%) with twice its
        // bytes (a pair that alternates which job is ahead repeats every two iterations):
        // read at its fundamental, the grid holds.
        let twice = vec![
            summary("a", vec![job("ja", 308.0, 11.75e6)]),
            summary("b", vec![job("jb", 2.0 * 248.0 * 1.03, 23.5e6)]),
        ];
        let (allocs, rep) = pl.clone().round(&t, &twice, "a", at(3)).unwrap();
        assert_eq!(rep.schedules, 2, "{rep:?}");
        assert!(
            allocs.iter().all(|a| a.adaptive.iter().all(|s| s.grid)),
            "{allocs:?}"
        );
        // Within the margin, but a job's bytes moved by more than SAME_BYTES: its grid no
        // longer holds, and the link is not drawn a new one under the threshold.
        let moved = vec![
            summary("a", vec![job("ja", 308.0, 11.75e6)]),
            summary("b", vec![job("jb", 280.0, 16e6)]),
        ];
        let mut again = pl.clone();
        let (_, rep) = again.round(&t, &moved, "a", at(3)).unwrap();
        assert!(in_margin(score(&rep)), "{rep:?}");
        assert_eq!(rep.schedules, 0, "{rep:?}");
        // The same reading on a link that held no schedules: fair.
        let (_, rep) = Planner::default().round(&t, &noisy, "a", at(2)).unwrap();
        assert_eq!(rep.schedules, 0, "{rep:?}");
        // Far under the threshold (the jobs now send 30 MB each, 240 ms of 308): fair again.
        let (_, rep) = pl.round(&t, &fleet(308.0, 30e6), "a", at(3)).unwrap();
        let s = score(&rep);
        assert!(s < t.compat.threshold - crate::compat::KEEP_MARGIN, "{s}");
        assert_eq!(rep.schedules, 0, "{rep:?}");
    }

    #[test]
    fn schedules_hold_on_links_not_scored_this_round_and_long_names_are_matched() {
        // 40 two-host links, each with two compatible jobs; only 32 are scored a round.
        let mut toml = String::new();
        let mut fleet = Vec::new();
        let long = "j".repeat(200);
        for i in 0..40 {
            toml.push_str(&format!(
                "[[link]]\nname = \"l{i}\"\ncapacity_mbps = 1000\nhosts = [\"a{i}\", \"b{i}\"]\n"
            ));
            for (h, name) in [(format!("a{i}"), long.as_str()), (format!("b{i}"), "jb")] {
                let v = VmSummary {
                    period: Some(crate::record::JobPeriod {
                        period_ms: 200.0,
                        last_start_unix_ms: 1.79e12,
                        bytes_per_period: 0.25 * 25e6,
                        duty: 0.02,
                        confidence: 0.9,
                        latest_period_ms: None,
                    }),
                    ..vm(name, 250.0, false, None)
                };
                fleet.push(summary(&h, vec![v]));
            }
        }
        let mut t = Topology::from_toml(&toml).unwrap();
        t.compat.adaptive = true;
        let mut pl = Planner::default();
        // The first round schedules the 32 links it scored; from the second on, every link
        // (scored this round, or last time for the same jobs).
        for round in 1..=4 {
            let at = 1_790_000_000_000 + 1000 * round;
            let (allocs, rep) = pl.round(&t, &fleet, "a0", at).unwrap();
            let want = if round == 1 { 64 } else { 80 };
            assert_eq!(rep.schedules, want, "round {round}");
            let s = &allocs[0].adaptive[0];
            assert_eq!((s.vm.len(), s.others.len()), (200, 1), "{s:?}");
            assert!(
                (s.pool_mbps - 1000.0).abs() < 1e-9,
                "the job is not other traffic"
            );
        }
    }

    #[test]
    fn a_vm_pressed_against_its_ceiling_asks_for_more() {
        let t = topo();
        assert_eq!(demand(&t, 95.0, Some(100.0)), 150.0);
        assert_eq!(demand(&t, 50.0, Some(100.0)), 60.0);
        assert_eq!(demand(&t, 1.0, None), 10.0);
        assert_eq!(demand(&t, f64::NAN, None), 10.0);
        assert_eq!(demand(&t, 1.7e308, None), MAX_DEMAND_MBPS);
        assert_eq!(demand(&t, 1e308, Some(1e308)), MAX_DEMAND_MBPS);
    }

    #[test]
    fn hostile_allocations_are_refused() {
        let ok = Allocation {
            host: "a".into(),
            coordinator: "b".into(),
            round: 1,
            at_unix_ms: 0,
            valid_ms: 1000,
            vms: vec![VmAlloc {
                vm: "v".into(),
                max_mbps: 10.0,
            }],
            adaptive: Vec::new(),
        };
        let v = serde_json::to_vec(&ok).unwrap();
        assert_eq!(Allocation::parse("k", &v).unwrap(), ok);
        assert_eq!(ok.ceilings_bps(), [("v".to_string(), 10_000_000)]);
        for bad in [
            Allocation {
                valid_ms: 0,
                ..ok.clone()
            },
            Allocation {
                vms: vec![VmAlloc {
                    vm: "v".into(),
                    max_mbps: -1.0,
                }],
                ..ok.clone()
            },
        ] {
            assert!(Allocation::parse("k", &serde_json::to_vec(&bad).unwrap()).is_err());
        }
        assert!(Allocation::parse("k", b"[]").is_err());
    }
}
