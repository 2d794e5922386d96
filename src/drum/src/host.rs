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
use crate::{Broadcast, DrumError, HostReport, Model};
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
    pub latency: f64,
    pub primal_sq: f64,
    pub z_sq: f64,
    pub stationarity_sq: f64,
    pub recovered_x: f64,
}

impl Sums {
    pub fn add(&mut self, o: &Sums) {
        self.sum += o.sum;
        self.slope += o.slope;
        self.latency += o.latency;
        self.primal_sq += o.primal_sq;
        self.z_sq += o.z_sq;
        self.stationarity_sq += o.stationarity_sq;
        self.recovered_x += o.recovered_x;
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ChunkScratch {
    pub top: TopK,
    pub rtop: TopK,
    pub residual: Vec<f64>,
    pub sums: Sums,
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

/// The model with what every host step precomputes from it (per application
/// `s_j^(-1/(1+alpha))`, see [`reach`]).
#[derive(Debug, Clone)]
pub struct Solver {
    pub(crate) model: Model,
    pub(crate) reach: Vec<f64>,
}

impl Solver {
    /// Prepares a model.
    #[must_use]
    pub fn new(model: Model) -> Self {
        let p = model.params;
        let reach = model
            .a
            .iter()
            .map(|&a| reach(p.alpha, p.rho * a * a))
            .collect();
        Self { model, reach }
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
        if sc.chunks.len() != m.div_ceil(CHUNK) {
            *sc = HostScratch::new(m, self.model.params.k);
        }
        let (utility, stationarity_sq) = self.x_step(st, &b.u, sc, par);
        self.z_step(st, &b.u, sc, par, report);
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
    use crate::{Params, PaperSetup};

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
    fn refuses_a_broadcast_of_another_iteration() {
        let p = Params::from_paper(30, &PaperSetup::default()).unwrap();
        let solver = Solver::new(Model::paper(p, 1).unwrap());
        let mut st = HostState::new(30);
        let mut sc = HostScratch::new(30, 20);
        let mut r = HostReport::empty(30, 1);
        let b = Broadcast {
            iteration: 1,
            u: vec![0.0; 30],
        };
        let e = solver.host_step(&mut st, &b, &mut sc, Parallel::Serial, &mut r);
        assert!(matches!(e, Err(DrumError::Iteration { what: "broadcast", .. })));
        let b = Broadcast {
            iteration: 0,
            u: vec![0.0; 29],
        };
        let e = solver.host_step(&mut st, &b, &mut sc, Parallel::Serial, &mut r);
        assert!(matches!(e, Err(DrumError::Length { what: "broadcast", .. })));
    }
}
