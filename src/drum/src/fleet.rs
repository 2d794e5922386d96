//! n hosts and the coordinator in one process: the paper's simulation of Algorithms 1 and 2
//! (and of the baseline).
//!
//! Hosts are split into at most [`GROUPS`] contiguous groups. Each group runs its hosts one
//! after the other and merges their reports into one ([`HostReport::merge`]), so the coordinator
//! receives one report per group and memory holds `GROUPS` residual vectors, not n. Groups run
//! in parallel with rayon when there are at least two per thread; otherwise each host runs its
//! chunks of applications in parallel ([`Parallel::Apps`]). The groups and chunks are fixed by
//! n and m alone, so the result does not depend on the number of threads.
//!
//! Memory: `x` and `z` of every host, `2 n m` doubles (800 MB at n = 1e4, m = 5e3), plus
//! `O(GROUPS m)`. The baseline keeps no x or z at all: its x(u) and z(u) are closed forms of u.

use crate::dual::{DualScratch, DualState};
use crate::{
    Coordinator, DrumError, HostReport, HostScratch, HostState, Model, Parallel, Penalty, Solver,
    StepRule, Stopping, Summary,
};
use rayon::prelude::*;

/// The most groups the hosts are split into.
pub const GROUPS: usize = 64;

struct Group<S, C> {
    hosts: Vec<S>,
    scratch: C,
    report: HostReport,
}

fn groups<S, C>(
    n: usize,
    apps: usize,
    host: impl Fn() -> S,
    scratch: impl Fn() -> C,
) -> Vec<Group<S, C>> {
    let g = n.min(GROUPS);
    (0..g)
        .map(|i| {
            let size = n / g + usize::from(i < n % g);
            Group {
                hosts: (0..size).map(|_| host()).collect(),
                scratch: scratch(),
                report: HostReport::empty(apps, 1),
            }
        })
        .collect()
}

fn parallel_groups(groups: usize) -> bool {
    groups >= 2 * rayon::current_num_threads()
}

/// ADMM on n hosts: Algorithm 1 on each, Algorithm 2 between iterations.
pub struct AdmmFleet {
    solver: Solver,
    coordinator: Coordinator,
    groups: Vec<Group<HostState, HostScratch>>,
}

impl AdmmFleet {
    /// n hosts at the paper's start (x = z = u = 0), with the paper's fixed penalty.
    pub fn new(model: Model, hosts: usize, stopping: Stopping) -> Result<Self, DrumError> {
        Self::with_penalty(model, hosts, stopping, Penalty::Fixed)
    }

    /// n hosts at the paper's start, rho starting at the model's and moving by `penalty`.
    pub fn with_penalty(
        model: Model,
        hosts: usize,
        stopping: Stopping,
        penalty: Penalty,
    ) -> Result<Self, DrumError> {
        let p = model.params;
        let rule = match penalty {
            Penalty::Fixed => StepRule::Constant(p.rho),
            Penalty::Adaptive(balancing) => StepRule::Balanced {
                rho: p.rho,
                balancing,
            },
        };
        let coordinator = Coordinator::new(
            p.apps,
            u64::try_from(hosts).unwrap_or(u64::MAX),
            rule,
            stopping,
        )?;
        Ok(Self {
            solver: Solver::new(model),
            coordinator,
            groups: groups(
                hosts,
                p.apps,
                || HostState::new(p.apps),
                || HostScratch::new(p.apps, p.k),
            ),
        })
    }

    /// One iteration of every host (at the broadcast's penalty, when it carries one), then the
    /// coordinator.
    pub fn iterate(&mut self) -> Result<Summary, DrumError> {
        let b = self.coordinator.broadcast();
        if let Some(rho) = b.rho {
            self.solver.set_rho(rho)?;
        }
        let solver = &self.solver;
        let run = |g: &mut Group<HostState, HostScratch>, par: Parallel| {
            g.report.reset(b.iteration + 1);
            for h in &mut g.hosts {
                solver.host_step(h, b, &mut g.scratch, par, &mut g.report)?;
            }
            Ok::<(), DrumError>(())
        };
        if parallel_groups(self.groups.len()) {
            self.groups
                .par_iter_mut()
                .try_for_each(|g| run(g, Parallel::Serial))?;
        } else {
            for g in &mut self.groups {
                run(g, Parallel::Apps)?;
            }
        }
        for g in &self.groups {
            self.coordinator.absorb(&g.report)?;
        }
        self.coordinator.finish()
    }

    /// The hosts' states, in order.
    pub fn hosts(&self) -> impl Iterator<Item = &HostState> {
        self.groups.iter().flat_map(|g| g.hosts.iter())
    }

    /// The current u.
    #[must_use]
    pub fn u(&self) -> &[f64] {
        &self.coordinator.broadcast().u
    }

    /// The penalty of the next iteration.
    #[must_use]
    pub fn rho(&self) -> f64 {
        self.coordinator
            .broadcast()
            .rho
            .unwrap_or(self.solver.model().params.rho)
    }
}

/// The dual-decomposition baseline on n hosts.
pub struct DualFleet {
    solver: Solver,
    coordinator: Coordinator,
    groups: Vec<Group<DualState, DualScratch>>,
}

impl DualFleet {
    /// n hosts, u = 0, steps `rho0 / sqrt(k)`.
    pub fn new(model: Model, hosts: usize, rho0: f64) -> Result<Self, DrumError> {
        let p = model.params;
        let coordinator = Coordinator::new(
            p.apps,
            u64::try_from(hosts).unwrap_or(u64::MAX),
            StepRule::Diminishing(rho0),
            Stopping::default(),
        )?;
        Ok(Self {
            solver: Solver::new(model),
            coordinator,
            groups: groups(hosts, p.apps, DualState::default, || DualScratch::new(p.k)),
        })
    }

    /// One iteration of every host, then the coordinator.
    pub fn iterate(&mut self) -> Result<Summary, DrumError> {
        let b = self.coordinator.broadcast();
        let solver = &self.solver;
        let run = |g: &mut Group<DualState, DualScratch>| {
            g.report.reset(b.iteration + 1);
            for h in &mut g.hosts {
                solver.dual_step(h, b, &mut g.scratch, &mut g.report)?;
            }
            Ok::<(), DrumError>(())
        };
        if parallel_groups(self.groups.len()) {
            self.groups.par_iter_mut().try_for_each(run)?;
        } else {
            self.groups.iter_mut().try_for_each(run)?;
        }
        for g in &self.groups {
            self.coordinator.absorb(&g.report)?;
        }
        self.coordinator.finish()
    }
}
