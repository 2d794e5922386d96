//! A periodic job at run time: compute, then every worker's flow carries its bytes; the
//! iteration ends when the last flow is done (the all-reduce is a barrier).

use crate::dcqcn::Dcqcn;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// Not started yet, or computing: communication starts at this time, ns.
    Compute(u64),
    /// Communicating: this many flows are still sending.
    Comm(usize),
    /// Done with its iterations.
    Done,
}

/// One worker's flow.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Its job.
    pub job: u32,
    /// Its VM (global index).
    pub vm: u32,
    /// The host it sends from (index into the spec's hosts).
    pub host: u32,
    /// The links it crosses (indices into the net's links).
    pub path: Vec<u32>,
    /// Its priority class.
    pub class: u8,
    /// Its queue slot on each link of the path ([`crate::net::Net::slots`]).
    pub slots: Vec<u32>,
    /// Does it cross a recorded link?
    pub recorded: bool,
    /// Bytes per iteration.
    pub bytes: f64,
    /// Left to send this iteration.
    pub left: f64,
    /// Its rate controller.
    pub cc: Dcqcn,
    /// Expected marked packets since its last CNP.
    pub marks: f64,
}

/// One job.
#[derive(Debug, Clone)]
pub struct Job {
    /// Name.
    pub name: String,
    /// Compute per iteration, ns.
    pub compute_ns: u64,
    /// Its flows (indices into the run's flows).
    pub flows: std::ops::Range<usize>,
    /// Where it is.
    pub phase: Phase,
    /// When the current iteration started, ns.
    pub iter_start: u64,
    /// Finished iterations' times, ns.
    pub iters: Vec<u64>,
    /// Iterations to run (0: unbounded).
    pub target: u64,
    /// Compute jitter (fraction).
    pub jitter: f64,
    /// Seeds the jitter.
    pub rng: u64,
}

/// xorshift64: the run's only randomness (seeded, so runs repeat).
pub use resex_common::rng::xorshift;

/// A uniform draw in [0, 1) from `state` (advanced).
pub fn uniform(state: &mut u64) -> f64 {
    *state = xorshift(*state);
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

impl Job {
    /// The compute phase starting at `now`: when it ends.
    pub fn compute_until(&mut self, now: u64) -> u64 {
        let stretch = if self.jitter > 0.0 {
            1.0 + self.jitter * uniform(&mut self.rng)
        } else {
            1.0
        };
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let c = (self.compute_ns as f64 * stretch).round() as u64;
        now.saturating_add(c)
    }

    /// The iteration ends at `done` (its last flow finished): it is recorded, and the next
    /// compute phase starts. Returns when that phase ends (`None`: the job is done).
    pub fn finish_iteration(&mut self, done: u64) -> Option<u64> {
        if self.iters.len() < crate::options::MAX_ITERS {
            self.iters.push(done.saturating_sub(self.iter_start));
        }
        self.iter_start = done;
        if self.target > 0 && self.iters.len() as u64 >= self.target {
            self.phase = Phase::Done;
            None
        } else {
            let t = self.compute_until(done);
            self.phase = Phase::Compute(t);
            Some(t)
        }
    }
}
