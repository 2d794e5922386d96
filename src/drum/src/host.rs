//! Algorithm 1, DRUM-decomposition: one host's iteration (x-step, then z-step), reported to the
//! coordinator.
//!
//! A host keeps its own x_i and z_i (m numbers each), the selection T of its k active
//! applications and the two capacity prices as warm starts ([`HostState`], serialisable so
//! that a fleet can checkpoint it); it receives u^k ([`Broadcast`]) and sends its residuals and
//! objective parts ([`HostReport`]). The applications are split into fixed chunks of
//! [`CHUNK`]; each pass over a host runs the chunks in parallel with rayon
//! ([`Parallel::Apps`]) or one after the other ([`Parallel::Serial`], when a simulation already
//! runs hosts in parallel). Every sum is taken per chunk and the chunks are added in order, so
//! both give the same bits. Nothing is allocated per iteration: [`HostScratch`] holds the
//! per-chunk buffers.

use crate::topk::TopK;
use crate::xstep::reach;
use crate::{Broadcast, DrumError, HostReport, Model, Selection};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Applications per chunk of a pass.
pub const CHUNK: usize = 1024;

/// How a host runs its chunks of applications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Parallel {
    /// Chunks in parallel on rayon's pool (a host alone on its machine).
    Apps,
    /// Chunks one after the other (hosts are already run in parallel).
    Serial,
}

/// One host's state between iterations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostState {
    /// Iterations done.
    pub iteration: u64,
    /// WQE rates x_i (0 before the first iteration).
    pub x: Vec<f64>,
    /// CQE polling rates z_i (the paper starts from z^0 = 0).
    pub z: Vec<f64>,
    /// The k applications that earned utility in the last x-step, by index.
    pub top: Vec<u32>,
    /// The k applications with the largest rates `z_ij / a_j` after the last z-step, by index.
    pub rate_top: Vec<u32>,
    /// The last x-step's price of `sum_j x_ij <= Q`.
    pub mu_x: f64,
    /// The last z-step's price of `sum_j z_ij <= C`.
    pub mu_z: f64,
}

impl HostState {
    /// The paper's start: x = z = 0.
    #[must_use]
    pub fn new(apps: usize) -> Self {
        Self {
            iteration: 0,
            x: vec![0.0; apps],
            z: vec![0.0; apps],
            top: Vec::new(),
            rate_top: Vec::new(),
            mu_x: 0.0,
            mu_z: 0.0,
        }
    }
}

/// Per-chunk sums of one pass.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sums {
    pub sum: f64,
    pub slope: f64,
    pub curv: f64,
    pub sum_x: f64,
    pub utility: f64,
    pub latency: f64,
    pub primal_sq: f64,
    pub z_sq: f64,
    pub stationarity_sq: f64,
    pub dual_sq: f64,
    pub recovered_x: f64,
}

impl Sums {
    pub fn add(&mut self, o: &Sums) {
        self.sum += o.sum;
        self.slope += o.slope;
        self.curv += o.curv;
        self.sum_x += o.sum_x;
        self.utility += o.utility;
        self.latency += o.latency;
        self.primal_sq += o.primal_sq;
        self.z_sq += o.z_sq;
        self.stationarity_sq += o.stationarity_sq;
        self.dual_sq += o.dual_sq;
        self.recovered_x += o.recovered_x;
    }
}

/// One chunk's buffers.
#[derive(Debug, Clone)]
pub(crate) struct ChunkScratch {
    pub(crate) top: TopK,
    pub(crate) rtop: TopK,
    pub(crate) residual: Vec<f64>,
    /// z^k of the chunk: kept by the fused pass in case the x capacity binds, and by every
    /// z-step for the dual residual `A (z^{k+1} - z^k)`.
    pub(crate) saved: Vec<f64>,
    pub(crate) sums: Sums,
}

/// A host's working buffers (reused every iteration; not part of the state).
#[derive(Debug, Clone)]
pub struct HostScratch {
    pub(crate) chunks: Vec<ChunkScratch>,
    pub(crate) top: TopK,
    pub(crate) rtop: TopK,
    pub(crate) ins: Vec<(u32, f64)>,
    pub(crate) select: Vec<u32>,
    pub(crate) prev: Vec<u32>,
}

impl HostScratch {
    /// Buffers for `apps` applications and top k.
    #[must_use]
    pub fn new(apps: usize, k: usize) -> Self {
        let chunks = (0..apps.div_ceil(CHUNK))
            .map(|c| ChunkScratch {
                top: TopK::new(k),
                rtop: TopK::new(k),
                residual: vec![0.0; CHUNK.min(apps - c * CHUNK)],
                saved: vec![0.0; CHUNK.min(apps - c * CHUNK)],
                sums: Sums::default(),
            })
            .collect();
        Self {
            chunks,
            top: TopK::new(k),
            rtop: TopK::new(k),
            ins: Vec::with_capacity(k),
            select: Vec::with_capacity(k),
            prev: Vec::with_capacity(k),
        }
    }

    /// The chunks' sums, added in order.
    pub(crate) fn total(&self) -> Sums {
        let mut s = Sums::default();
        for c in &self.chunks {
            s.add(&c.sums);
        }
        s
    }
}

/// Keeps z^k in the chunks' `saved` (the fused pass keeps it itself).
fn save_z(st: &HostState, sc: &mut HostScratch) {
    for (z, c) in st.z.chunks(CHUNK).zip(&mut sc.chunks) {
        c.saved.copy_from_slice(z);
    }
}

/// Runs `f(first_app, chunk_of_data, chunk_scratch)` over every chunk.
pub(crate) fn run_chunks<F>(par: Parallel, chunks: &mut [ChunkScratch], data: &mut [f64], f: F)
where
    F: Fn(usize, &mut [f64], &mut ChunkScratch) + Sync + Send,
{
    match par {
        Parallel::Apps => data
            .par_chunks_mut(CHUNK)
            .zip(chunks.par_iter_mut())
            .enumerate()
            .for_each(|(i, (d, c))| f(i * CHUNK, d, c)),
        Parallel::Serial => data
            .chunks_mut(CHUNK)
            .zip(chunks.iter_mut())
            .enumerate()
            .for_each(|(i, (d, c))| f(i * CHUNK, d, c)),
    }
}

/// The model with what every host step precomputes from it, and the applications' utility
/// weights.
///
/// **Weights** (not in the paper; a resex policy gives classes of VMs different weights): the
/// utility of application j in T is `w_j x^(1-alpha) / (1-alpha)`. Dividing its x-step by
/// w_j leaves the unweighted step with `s_j = rho a_j^2 / w_j` and the same `x^`, so each case
/// of [`crate::xstep`] applies unchanged to `s_j`; gains are multiplied back by w_j. The
/// selection by rates ranks `x w_j^(1/(1-alpha))`, whose alpha-fair value is the weighted
/// utility. The baseline and the reference solve the unweighted model only.
#[derive(Debug, Clone)]
pub struct Solver {
    pub(crate) model: Model,
    /// Per application `s_j^(-1/(1+alpha))` with `s_j = rho a_j^2 / w_j` (see [`reach`]).
    pub(crate) reach: Vec<f64>,
    pub(crate) inv_a: Vec<f64>,
    /// `w_j`.
    pub(crate) w: Vec<f64>,
    /// `s_j = rho a_j^2 / w_j`.
    pub(crate) s: Vec<f64>,
    /// `w_j^(1/(1-alpha))`: the factor of a rate in the selection's ranking.
    pub(crate) wexp: Vec<f64>,
    /// Whether the x-step and the z-step's first evaluation share a pass (see `fused`); off
    /// only in the test that checks both give the same iterates.
    pub(crate) fuse: bool,
}

impl Solver {
    /// Prepares a model (every weight 1).
    #[must_use]
    pub fn new(model: Model) -> Self {
        let m = model.params.apps;
        let mut s = Self {
            model,
            reach: vec![0.0; m],
            inv_a: vec![0.0; m],
            w: vec![1.0; m],
            s: vec![0.0; m],
            wexp: vec![1.0; m],
            fuse: true,
        };
        s.derive();
        s
    }

    /// New `a_j` and weights for the same number of applications, in place (no allocation):
    /// what a policy does each time it measures its VMs again. The hosts' states stay valid
    /// warm starts.
    pub fn update(&mut self, a: &[f64], w: &[f64]) -> Result<(), DrumError> {
        let m = self.model.params.apps;
        for (what, got) in [("A", a.len()), ("weights", w.len())] {
            if got != m {
                return Err(DrumError::Length { what, got, want: m });
            }
        }
        if let Some(j) = a.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(DrumError::NotPositive {
                vector: "a",
                index: j,
                value: a[j],
            });
        }
        if let Some(j) = w.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(DrumError::NotPositive {
                vector: "w",
                index: j,
                value: w[j],
            });
        }
        self.model.a.copy_from_slice(a);
        self.w.copy_from_slice(w);
        self.derive();
        Ok(())
    }

    /// A new penalty rho, in place (what a host does when the coordinator's broadcast carries
    /// one, [`Broadcast::rho`]); the hosts' states stay valid warm starts, and u keeps its value
    /// (it is the unscaled multiplier, see [`crate::penalty`]).
    pub fn set_rho(&mut self, rho: f64) -> Result<(), DrumError> {
        if !(rho.is_finite() && rho > 0.0) {
            return Err(DrumError::OutOfRange {
                param: "rho",
                value: rho,
                range: "a positive number",
            });
        }
        if rho != self.model.params.rho {
            self.model.params.rho = rho;
            self.derive();
        }
        Ok(())
    }

    /// True when some weight is not 1.
    #[must_use]
    pub fn is_weighted(&self) -> bool {
        self.w.iter().any(|&w| w != 1.0)
    }

    fn derive(&mut self) {
        let p = self.model.params;
        let e = 1.0 / (1.0 - p.alpha);
        for j in 0..p.apps {
            let (a, w) = (self.model.a[j], self.w[j]);
            self.s[j] = p.rho * a * a / w;
            self.reach[j] = reach(p.alpha, self.s[j]);
            self.inv_a[j] = 1.0 / a;
            self.wexp[j] = if w == 1.0 { 1.0 } else { w.powf(e) };
        }
    }

    /// The model.
    #[must_use]
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Algorithm 1 for one host: x^{k+1} from (z^k, u^k), then z^{k+1}; adds the host's results
    /// into `report` (which must be for iteration k + 1).
    pub fn host_step(
        &self,
        st: &mut HostState,
        b: &Broadcast,
        sc: &mut HostScratch,
        par: Parallel,
        report: &mut HostReport,
    ) -> Result<(), DrumError> {
        let m = self.model.params.apps;
        for (what, got) in [
            ("host state x", st.x.len()),
            ("host state z", st.z.len()),
            ("broadcast", b.u.len()),
            ("host report", report.residual.len()),
        ] {
            if got != m {
                return Err(DrumError::Length { what, got, want: m });
            }
        }
        if b.iteration != st.iteration {
            return Err(DrumError::Iteration {
                what: "broadcast",
                got: b.iteration,
                want: st.iteration,
            });
        }
        if report.iteration != st.iteration + 1 {
            return Err(DrumError::Iteration {
                what: "host report",
                got: report.iteration,
                want: st.iteration + 1,
            });
        }
        if let Some(rho) = b.rho.filter(|&r| r != self.model.params.rho) {
            return Err(DrumError::Penalty {
                got: rho,
                want: self.model.params.rho,
            });
        }
        if sc.chunks.len() != m.div_ceil(CHUNK) {
            *sc = HostScratch::new(m, self.model.params.k);
        }
        let p = self.model.params;
        let (utility, stationarity_sq, first) =
            // Fused only while the x capacity was slack: when it binds the pass is redone.
            if p.selection == Selection::Rates && st.iteration > 0 && self.fuse && st.mu_x == 0.0 {
                let f = self.fused_pass(st, &b.u, sc, par);
                if f.sum_x <= p.x_capacity * (1.0 + 1e-12) {
                    st.mu_x = 0.0;
                    st.top.clear();
                    st.top.extend_from_slice(&st.rate_top);
                    (f.utility, f.stationarity_sq, Some(f.eval))
                } else {
                    for (i, c) in sc.chunks.iter().enumerate() {
                        st.z[i * CHUNK..i * CHUNK + c.saved.len()].copy_from_slice(&c.saved);
                    }
                    let (u, _) = self.x_step(st, &b.u, sc, par, false);
                    (u, f.stationarity_sq, None)
                }
            } else {
                save_z(st, sc);
                let (u, s) = self.x_step(st, &b.u, sc, par, st.iteration > 0);
                (u, s, None)
            };
        self.z_step(st, &b.u, sc, par, report, first);
        report.hosts += 1;
        report.utility += utility;
        report.stationarity_sq += stationarity_sq;
        st.iteration += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PaperSetup, Params};

    /// Each iteration's state and dual residual.
    fn run(fuse: bool, par: Parallel, rho: f64, apps: usize) -> Vec<(HostState, f64)> {
        let setup = PaperSetup {
            rho,
            ..PaperSetup::default()
        };
        let p = Params::from_paper(apps, &setup).unwrap();
        let mut solver = Solver::new(Model::paper(p, 3).unwrap());
        solver.fuse = fuse;
        let mut st = HostState::new(apps);
        let mut sc = HostScratch::new(apps, p.k);
        let mut c = crate::Coordinator::new(
            apps,
            1,
            crate::StepRule::Constant(rho),
            crate::Stopping::default(),
        )
        .unwrap();
        let mut states = Vec::new();
        for k in 1..=12 {
            let mut r = HostReport::empty(apps, k);
            solver
                .host_step(&mut st, c.broadcast(), &mut sc, par, &mut r)
                .unwrap();
            c.absorb(&r).unwrap();
            c.finish().unwrap();
            states.push((st.clone(), r.dual_sq));
        }
        states
    }

    #[test]
    fn the_fused_pass_gives_the_iterates_of_separate_steps() {
        // m = 50: the x capacity binds in early iterations (the fused pass must undo itself).
        for (rho, apps) in [(1.0, 50), (1e-3, 50), (1.0, 3000)] {
            let (a, b) = (
                run(true, Parallel::Serial, rho, apps),
                run(false, Parallel::Serial, rho, apps),
            );
            for (i, ((sa, da), (sb, db))) in a.iter().zip(&b).enumerate() {
                let close = |u: &[f64], v: &[f64]| {
                    u.iter()
                        .zip(v)
                        .all(|(p, q)| (p - q).abs() <= 1e-9 * p.abs().max(1e-9))
                };
                assert!(close(&sa.x, &sb.x), "rho {rho} m {apps} iteration {i}: x");
                assert!(close(&sa.z, &sb.z), "rho {rho} m {apps} iteration {i}: z");
                assert_eq!(sa.top, sb.top);
                assert!(
                    close(&[*da], &[*db]),
                    "rho {rho} m {apps} iteration {i}: dual"
                );
            }
        }
    }

    #[test]
    fn chunks_in_parallel_give_the_same_bits_as_in_series() {
        assert_eq!(
            run(true, Parallel::Apps, 1.0, 3000),
            run(true, Parallel::Serial, 1.0, 3000)
        );
    }

    #[test]
    fn host_state_round_trips_through_json() {
        let mut s = HostState::new(3);
        s.x = vec![1.0, 0.0, 2.5];
        s.top = vec![0, 2];
        s.mu_z = 0.125;
        let back: HostState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn steps_only_at_the_broadcast_penalty() {
        let p = Params::from_paper(30, &PaperSetup::default()).unwrap();
        let mut solver = Solver::new(Model::paper(p, 1).unwrap());
        let mut st = HostState::new(30);
        let mut sc = HostScratch::new(30, 20);
        let mut r = HostReport::empty(30, 1);
        let b = Broadcast {
            iteration: 0,
            u: vec![0.0; 30],
            rho: Some(0.5),
        };
        let e = solver.host_step(&mut st, &b, &mut sc, Parallel::Serial, &mut r);
        assert!(matches!(
            e,
            Err(DrumError::Penalty {
                got: 0.5,
                want: 1e-3
            })
        ));
        assert!(solver.set_rho(0.0).is_err());
        solver.set_rho(0.5).unwrap();
        assert_eq!(
            solver.s,
            Solver::new(Model::new(Params { rho: 0.5, ..p }, solver.model.a.clone()).unwrap()).s
        );
        solver
            .host_step(&mut st, &b, &mut sc, Parallel::Serial, &mut r)
            .unwrap();
        // z^0 = 0: the dual residual is ||A z^1||^2.
        let want: f64 =
            st.z.iter()
                .zip(&solver.model.a)
                .map(|(z, a)| (a * z).powi(2))
                .sum();
        assert!(
            (r.dual_sq - want).abs() <= 1e-12 * want,
            "{} {want}",
            r.dual_sq
        );
    }

    #[test]
    fn refuses_a_broadcast_of_another_iteration() {
        let p = Params::from_paper(30, &PaperSetup::default()).unwrap();
        let solver = Solver::new(Model::paper(p, 1).unwrap());
        let mut st = HostState::new(30);
        let mut sc = HostScratch::new(30, 20);
        let mut r = HostReport::empty(30, 1);
        let b = Broadcast {
            iteration: 1,
            u: vec![0.0; 30],
            rho: None,
        };
        let e = solver.host_step(&mut st, &b, &mut sc, Parallel::Serial, &mut r);
        assert!(matches!(
            e,
            Err(DrumError::Iteration {
                what: "broadcast",
                ..
            })
        ));
        let b = Broadcast {
            iteration: 0,
            u: vec![0.0; 29],
            rho: None,
        };
        let e = solver.host_step(&mut st, &b, &mut sc, Parallel::Serial, &mut r);
        assert!(matches!(
            e,
            Err(DrumError::Length {
                what: "broadcast",
                ..
            })
        ));
    }
}
