//! DRUM across hosts: the fleet's allocation over shared fabric links, in the shape of
//! Algorithm 2 (each host computes its applications' rates from the broadcast prices, the
//! coordinator sums per-link loads and moves the prices).
//!
//! The problem. Applications (VMs) sit on hosts; a host's traffic crosses the fabric links of
//! its path (its ToR uplink, a spine link: the fleet's topology key). Each application j has a
//! weight `w_j` and a demand `d_j` (Mb/s); each link l a capacity `c_l`:
//!
//! ```text
//! maximise  sum_j w_j x_j^(1-alpha) / (1-alpha)      (alpha = 1: w_j log x_j)
//! s.t.      sum_{j crosses l} x_j <= c_l   for every link l,    0 <= x_j <= d_j
//! ```
//!
//! the alpha-fair utility of DRUM's x-step (`crate::utility`), weighted as the host policy
//! weights its VMs. Its dual decomposes by host: with a price `u_l` per link and `P` the sum of
//! the prices on a host's path, every application's best rate is the closed form
//! `x_j = min(d_j, (w_j / P)^(1/alpha))` ([`host_step`]): the per-host step. The coordinator sums
//! the hosts' per-link loads and updates each price ([`Prices::update`]): the broadcast u.
//!
//! **The price update.** Dual gradient ascent with a fixed step converges slowly and its step
//! depends on the units. On one link the load scales as `u^(-1/alpha)`, so the price that fills
//! the link is `u (load / c)^alpha`: the update is this multiplicative step, damped (exponent
//! `alpha / 2`) where links interact. A congested link starts from the price that would fill it
//! if nobody were demand-limited; a link whose load stays under capacity with every
//! application on it at its demand, or whose price is under `tolerance` of the cheapest path of
//! its demand-limited hosts (what limits them is another link), is free (u = 0). Prices persist between rounds (a warm
//! start: the fleet's demands move slowly).
//!
//! **Feasibility.** A round stops after a bounded number of iterations; whatever the prices,
//! every rate is then divided by the worst overload ratio on its path, so what is handed out
//! never exceeds a link ([`Solution::max_overload`] is 1 at most).

use crate::error::{DrumError, NetworkError};
use serde::{Deserialize, Serialize};

/// One application (VM) on a host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NetApp {
    /// The weight of its utility (> 0).
    pub weight: f64,
    /// Its demand, the most it is given (>= 0, Mb/s).
    pub demand: f64,
}

/// A host: the links its traffic crosses and its applications.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NetHost {
    /// Indices into [`NetProblem::capacity`].
    pub links: Vec<usize>,
    /// Its applications.
    pub apps: Vec<NetApp>,
}

/// The fleet's problem for one round.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NetProblem {
    /// Each link's capacity (> 0, Mb/s).
    pub capacity: Vec<f64>,
    /// The hosts.
    pub hosts: Vec<NetHost>,
    /// The fairness exponent (0.1 <= alpha <= 10; 1 is proportional fairness).
    pub alpha: f64,
}

impl NetProblem {
    /// Refuses what the solver cannot take.
    pub fn validate(&self) -> Result<(), DrumError> {
        if !(self.alpha >= 0.1 && self.alpha <= 10.0) {
            return Err(NetworkError::Alpha { alpha: self.alpha }.into());
        }
        if let Some(c) = self.capacity.iter().find(|c| !(c.is_finite() && **c > 0.0)) {
            return Err(NetworkError::Capacity { capacity: *c }.into());
        }
        for (i, h) in self.hosts.iter().enumerate() {
            let mut seen = h.links.clone();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != h.links.len() {
                return Err(NetworkError::RepeatedLink { host: i }.into());
            }
            if let Some(l) = h.links.iter().find(|l| **l >= self.capacity.len()) {
                return Err(NetworkError::UnknownLink {
                    host: i,
                    link: *l,
                    links: self.capacity.len(),
                }
                .into());
            }
            for a in &h.apps {
                if !(a.weight.is_finite() && a.weight > 0.0) {
                    return Err(NetworkError::Weight {
                        host: i,
                        weight: a.weight,
                    }
                    .into());
                }
                if !(a.demand.is_finite() && a.demand >= 0.0) {
                    return Err(NetworkError::Demand {
                        host: i,
                        demand: a.demand,
                    }
                    .into());
                }
            }
        }
        Ok(())
    }
}

/// The broadcast: one price per link (serde: the coordinator keeps it between rounds).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Prices {
    /// `u_l`, one per link.
    pub u: Vec<f64>,
    /// Iterations run so far, over every round.
    pub iterations: u64,
}

/// What the hosts report in one iteration, summed: per-link loads.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkReport {
    /// Load per link.
    pub load: Vec<f64>,
    /// `sum w_j^(1/alpha)` of the applications crossing each link (starts a price).
    pub weight: Vec<f64>,
    /// Whether some application crossing the link gets less than its demand.
    pub limited: Vec<bool>,
    /// The smallest path price of the demand-limited hosts crossing the link (infinite when
    /// none is limited).
    pub path: Vec<f64>,
}

impl LinkReport {
    fn reset(&mut self, links: usize) {
        self.load.clear();
        self.load.resize(links, 0.0);
        self.weight.clear();
        self.weight.resize(links, 0.0);
        self.limited.clear();
        self.limited.resize(links, false);
        self.path.clear();
        self.path.resize(links, f64::INFINITY);
    }
}

/// The per-host step: each application's rate under the prices `u`, written into `x`, and the
/// host's loads added into `report`.
pub fn host_step(h: &NetHost, u: &[f64], alpha: f64, x: &mut Vec<f64>, report: &mut LinkReport) {
    let path: f64 = h.links.iter().map(|&l| u[l]).sum();
    let inv = 1.0 / alpha;
    x.clear();
    let (mut total, mut wsum, mut limited) = (0.0, 0.0, false);
    for a in &h.apps {
        let v = if path > 0.0 {
            a.demand.min((a.weight / path).powf(inv))
        } else {
            a.demand
        };
        limited |= v < a.demand;
        total += v;
        wsum += a.weight.powf(inv);
        x.push(v);
    }
    for &l in &h.links {
        report.load[l] += total;
        report.weight[l] += wsum;
        report.limited[l] |= limited;
        if limited {
            report.path[l] = report.path[l].min(path);
        }
    }
}

/// How a round stops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NetStopping {
    /// The most iterations in a round.
    pub iterations: u32,
    /// A congested link is full within this fraction; no link is over it by more.
    pub tolerance: f64,
}

impl Default for NetStopping {
    fn default() -> Self {
        Self {
            iterations: 200,
            tolerance: 1e-3,
        }
    }
}

impl Prices {
    /// Sized for `links` links (a new link starts free; a vanished one is dropped).
    pub fn resize(&mut self, links: usize) {
        self.u.resize(links, 0.0);
    }

    /// The coordinator's step from the summed report: true when no price needs to move.
    pub fn update(&mut self, p: &NetProblem, r: &LinkReport, tol: f64) -> bool {
        let mut done = true;
        for (l, u) in self.u.iter_mut().enumerate() {
            let (c, load) = (p.capacity[l], r.load[l]);
            if *u == 0.0 {
                if load > c * (1.0 + tol) {
                    // The price that fills the link if nobody on it were demand-limited.
                    *u = (r.weight[l] / c).powf(p.alpha);
                    if !(u.is_finite() && *u > 0.0) {
                        *u = 0.0;
                    }
                    done = false;
                }
                continue;
            }
            if load < c * (1.0 - tol) && (!r.limited[l] || *u <= tol * r.path[l]) {
                // Everyone on it has what they asked for, or what limits every limited host on
                // it is elsewhere on its path (this price is a vanishing part of the cheapest
                // such path): the link is free.
                *u = 0.0;
                done = false;
            } else if (load - c).abs() > c * tol {
                // An empty link under a price: no more than a tolerance's step down at a time.
                *u *= (load.max(c * tol) / c).powf(p.alpha * 0.5);
                if !u.is_finite() {
                    *u = 0.0;
                }
                done = false;
            }
        }
        self.iterations += 1;
        done
    }
}

/// A round's result.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Solution {
    /// Rates, host by host, application by application (Mb/s).
    pub x: Vec<Vec<f64>>,
    /// Each link's load after the feasibility scaling.
    pub load: Vec<f64>,
    /// Iterations this round.
    pub iterations: u32,
    /// Whether the prices settled before the iteration bound.
    pub converged: bool,
    /// The worst `load / capacity` after scaling (1 at most).
    pub max_overload: f64,
}

/// One round: iterate host steps and price updates from `prices` (warm start), then scale
/// every rate to fit every link.
pub fn solve(
    p: &NetProblem,
    prices: &mut Prices,
    stop: NetStopping,
) -> Result<Solution, DrumError> {
    p.validate()?;
    prices.resize(p.capacity.len());
    let links = p.capacity.len();
    let mut report = LinkReport::default();
    let mut x: Vec<Vec<f64>> = vec![Vec::new(); p.hosts.len()];
    let mut iterations = 0;
    let mut converged = false;
    while iterations < stop.iterations.max(1) {
        report.reset(links);
        for (h, xh) in p.hosts.iter().zip(&mut x) {
            host_step(h, &prices.u, p.alpha, xh, &mut report);
        }
        iterations += 1;
        if prices.update(p, &report, stop.tolerance) {
            converged = true;
            break;
        }
    }
    // x is from the last host step (the prices may have moved once more since: harmless, the
    // scaling below makes whatever x is feasible).
    let mut ratio = vec![1.0f64; links];
    for (l, r) in ratio.iter_mut().enumerate() {
        *r = (report.load[l] / p.capacity[l]).max(1.0);
    }
    let mut load = vec![0.0; links];
    for (h, xh) in p.hosts.iter().zip(&mut x) {
        let worst = h.links.iter().map(|&l| ratio[l]).fold(1.0, f64::max);
        let mut total = 0.0;
        for v in xh.iter_mut() {
            *v /= worst;
            total += *v;
        }
        for &l in &h.links {
            load[l] += total;
        }
    }
    let max_overload = load
        .iter()
        .zip(&p.capacity)
        .map(|(l, c)| l / c)
        .fold(0.0, f64::max);
    Ok(Solution {
        x,
        load,
        iterations,
        converged,
        max_overload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(weight: f64, demand: f64) -> NetApp {
        NetApp { weight, demand }
    }

    fn host(links: &[usize], apps: &[NetApp]) -> NetHost {
        NetHost {
            links: links.to_vec(),
            apps: apps.to_vec(),
        }
    }

    fn run(p: &NetProblem) -> Solution {
        solve(p, &mut Prices::default(), NetStopping::default()).unwrap()
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-12)
    }

    #[test]
    fn one_link_two_alike_vms_on_two_hosts_split_it() {
        let p = NetProblem {
            capacity: vec![1000.0],
            hosts: vec![
                host(&[0], &[app(1.0, 5000.0)]),
                host(&[0], &[app(1.0, 5000.0)]),
            ],
            alpha: 0.5,
        };
        let s = run(&p);
        assert!(s.converged);
        assert!(close(s.x[0][0], 500.0, 2e-3), "{s:?}");
        assert!(close(s.x[1][0], 500.0, 2e-3), "{s:?}");
        assert!(s.max_overload <= 1.0 + 1e-12);
    }

    #[test]
    fn weights_go_as_their_power_one_over_alpha() {
        // alpha = 1/2: x ~ w^2, so 10 against 1 is 100 : 1.
        let p = NetProblem {
            capacity: vec![1010.0],
            hosts: vec![host(&[0], &[app(10.0, 1e6)]), host(&[0], &[app(1.0, 1e6)])],
            alpha: 0.5,
        };
        let s = run(&p);
        assert!(close(s.x[0][0], 1000.0, 2e-3), "{s:?}");
        assert!(close(s.x[1][0], 10.0, 5e-3), "{s:?}");
    }

    #[test]
    fn a_vm_below_its_fair_share_keeps_its_demand_the_rest_goes_to_the_other() {
        let p = NetProblem {
            capacity: vec![1000.0],
            hosts: vec![
                host(&[0], &[app(1.0, 100.0), app(1.0, 1e6)]),
                host(&[0], &[app(1.0, 1e6)]),
            ],
            alpha: 0.5,
        };
        let s = run(&p);
        assert!(close(s.x[0][0], 100.0, 1e-9), "{s:?}");
        assert!(close(s.x[0][1], 450.0, 3e-3), "{s:?}");
        assert!(close(s.x[1][0], 450.0, 3e-3), "{s:?}");
    }

    #[test]
    fn an_uncongested_link_is_free() {
        let p = NetProblem {
            capacity: vec![1000.0],
            hosts: vec![host(&[0], &[app(1.0, 300.0), app(5.0, 200.0)])],
            alpha: 0.5,
        };
        let mut prices = Prices::default();
        let s = solve(&p, &mut prices, NetStopping::default()).unwrap();
        assert_eq!(s.x[0], [300.0, 200.0]);
        assert_eq!(prices.u, [0.0]);
        assert_eq!(s.iterations, 1);
    }

    #[test]
    fn the_parking_lot_is_proportionally_fair() {
        // Proportional fairness (alpha = 1) on two unit links: the flow that crosses both gets
        // 1/3, each of the others 2/3.
        let p = NetProblem {
            capacity: vec![1.0, 1.0],
            hosts: vec![
                host(&[0, 1], &[app(1.0, 10.0)]),
                host(&[0], &[app(1.0, 10.0)]),
                host(&[1], &[app(1.0, 10.0)]),
            ],
            alpha: 1.0,
        };
        let s = solve(
            &p,
            &mut Prices::default(),
            NetStopping {
                iterations: 1000,
                tolerance: 1e-4,
            },
        )
        .unwrap();
        assert!(s.converged, "{s:?}");
        assert!(close(s.x[0][0], 1.0 / 3.0, 2e-3), "{s:?}");
        assert!(close(s.x[1][0], 2.0 / 3.0, 2e-3), "{s:?}");
        assert!(close(s.x[2][0], 2.0 / 3.0, 2e-3), "{s:?}");
    }

    #[test]
    fn a_warm_start_settles_in_fewer_iterations() {
        let mut hosts = Vec::new();
        for i in 0..20u32 {
            hosts.push(host(
                &[(i % 4) as usize, 4],
                &[app(1.0 + f64::from(i % 3), 800.0), app(1.0, 50.0)],
            ));
        }
        let p = NetProblem {
            capacity: vec![1000.0, 1000.0, 1000.0, 1000.0, 2500.0],
            hosts,
            alpha: 0.5,
        };
        let mut prices = Prices::default();
        let cold = solve(&p, &mut prices, NetStopping::default()).unwrap();
        let warm = solve(&p, &mut prices, NetStopping::default()).unwrap();
        assert!(cold.converged && warm.converged, "{cold:?} {warm:?}");
        assert!(warm.iterations < cold.iterations, "{cold:?} {warm:?}");
        assert!(cold.max_overload <= 1.0 + 1e-12 && warm.max_overload <= 1.0 + 1e-12);
    }

    #[test]
    fn whatever_the_iteration_bound_no_link_is_overloaded() {
        let mut rng = xorshift(7);
        for _ in 0..200 {
            let links = 1 + (rng() % 5) as usize;
            let capacity: Vec<f64> = (0..links).map(|_| 1.0 + (rng() % 1000) as f64).collect();
            let hosts: Vec<NetHost> = (0..1 + rng() % 8)
                .map(|_| {
                    let mut ls: Vec<usize> =
                        (0..links).filter(|_| rng().is_multiple_of(2)).collect();
                    ls.dedup();
                    NetHost {
                        links: ls,
                        apps: (0..rng() % 4)
                            .map(|_| app(0.1 + (rng() % 100) as f64, (rng() % 2000) as f64))
                            .collect(),
                    }
                })
                .collect();
            let p = NetProblem {
                capacity,
                hosts,
                alpha: [0.5, 1.0, 2.0][(rng() % 3) as usize],
            };
            let s = solve(
                &p,
                &mut Prices::default(),
                NetStopping {
                    iterations: 1 + (rng() % 5) as u32,
                    tolerance: 1e-3,
                },
            )
            .unwrap();
            assert!(s.max_overload <= 1.0 + 1e-9, "{p:?} {s:?}");
            for (h, xh) in p.hosts.iter().zip(&s.x) {
                for (a, v) in h.apps.iter().zip(xh) {
                    assert!(*v >= 0.0 && *v <= a.demand + 1e-9, "{p:?} {s:?}");
                }
            }
        }
    }

    #[test]
    fn a_host_behind_a_dear_link_does_not_free_a_link_another_needs() {
        // Link 0 (1000) is shared by host a (also behind link 1, 1 Mb/s) and host b: a is
        // limited by link 1, b alone fills link 0.
        let p = NetProblem {
            capacity: vec![1000.0, 1.0],
            hosts: vec![
                host(&[0, 1], &[app(1.0, 1e6)]),
                host(&[0], &[app(1.0, 1e6)]),
            ],
            alpha: 0.5,
        };
        let s = run(&p);
        assert!(s.converged, "{s:?}");
        assert!(close(s.x[0][0], 1.0, 3e-3), "{s:?}");
        assert!(close(s.x[1][0], 999.0, 3e-3), "{s:?}");
    }

    #[test]
    fn bad_problems_are_refused() {
        let ok = NetProblem {
            capacity: vec![1.0],
            hosts: vec![host(&[0], &[app(1.0, 1.0)])],
            alpha: 0.5,
        };
        ok.validate().unwrap();
        for bad in [
            NetProblem {
                alpha: 0.05,
                ..ok.clone()
            },
            NetProblem {
                capacity: vec![0.0],
                ..ok.clone()
            },
            NetProblem {
                hosts: vec![host(&[1], &[])],
                ..ok.clone()
            },
            NetProblem {
                hosts: vec![host(&[0], &[app(f64::NAN, 1.0)])],
                ..ok.clone()
            },
            NetProblem {
                hosts: vec![host(&[0], &[app(1.0, -1.0)])],
                ..ok.clone()
            },
        ] {
            assert!(solve(&bad, &mut Prices::default(), NetStopping::default()).is_err());
        }
        let crossing = NetProblem {
            hosts: vec![host(&[1], &[])],
            ..ok.clone()
        };
        let e = crossing.validate().unwrap_err();
        assert_eq!(
            e,
            DrumError::Network(NetworkError::UnknownLink {
                host: 0,
                link: 1,
                links: 1
            })
        );
        assert_eq!(
            e.to_string(),
            "invalid parameter: host 0 crosses link 1; there are 1"
        );
    }

    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }
}
