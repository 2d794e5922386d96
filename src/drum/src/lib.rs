//! DRUM: the RDMA resource scheduling problem of Shen et al. ("Distributed and Optimal RDMA
//! Resource Scheduling in Shared Data Center Networks", `../shared/papers/
//! drum-admm-rdma-scheduling.txt`), solved by ADMM as the paper's Algorithms 1 and 2, beside
//! a dual-decomposition baseline and an independent certificate of the optimum.
//!
//! Pure code: no I/O, no clock, no unsafe; a seed gives the same bits on every run.
//!
//! - [`params`], [`model`]: problem (4), its parameters and the paper's set-up.
//! - [`utility`]: the top-k alpha-fair utility and the CQ latency utility.
//! - [`xstep`]: the x-step for one application, its three cases (Theorem 2);
//!   [`xhost`]: for one host (the top-k selection, the capacity price).
//! - [`zstep`]: the z-step for one application (Theorem 3); [`zhost`]: for one host.
//! - [`uupdate`]: the u-update; [`penalty`]: rho fixed or moved by residual balancing; [`host`]: Algorithm 1 (one host, parallel over applications);
//!   [`coordinator`]: Algorithm 2 (sum and broadcast); [`message`]: what they exchange.
//! - Feature `lab` (the lab's, never resexd's): `dual`, the dual-decomposition baseline;
//!   `reference`, the optimum, certified by a Lagrangian dual bound; `fleet`, n hosts in one
//!   process; `experiment`, the paper's simulations.
//! - [`network`]: DRUM across hosts: per-link prices over shared fabric links (the fleet
//!   coordinator's step).
//!
//! # Where the paper is unclear or wrong, and what we do
//!
//! Each module says it where it matters; in short:
//!
//! 1. Its log cost is concave, its constraint set non-convex, and with top-k utility the
//!    problem is unbounded for m > 100: we use the AM-GM inner approximation, a linear
//!    capacity `sum_j x_ij <= m e^(q/m)` ([`params`]).
//! 2. The top-k utility is not concave (Lemma 1 is false): the x-step picks T exactly for its
//!    subproblem, and the reference certifies the optimum with a dual bound ([`utility`]).
//! 3. Case 1 is linear, case 2 a cubic in sqrt(x) (the paper's quartic times y), with one
//!    positive root; case 3 iterates a safeguarded Newton map ([`xstep`]).
//! 4. The z-step's stationarity in the paper has wrong terms; ours is a quartic with one
//!    positive root ([`zstep`]).
//! 5. The u-update's sign is flipped in (7) and Algorithm 2, and the shared u must average over
//!    hosts, not sum ([`uupdate`]).
//! 6. Stopping: primal residual and objective change, both reported ([`coordinator`]).
//! 7. The baseline solves the same problem (4) with the same shared price; the paper's
//!    baseline solved problem (1), without the CQ (`dual`, feature `lab`).
//! 8. Not in the paper: utility weights per application, `w_j x^(1-alpha) / (1-alpha)`, for
//!    the resex policy's classes of VMs ([`host::Solver::update`]); the baseline and the
//!    reference solve the unweighted model only.
//! 9. The paper's rho = 1e-3 does not converge in our units: the simulations' default moves rho
//!    by residual balancing, broadcast with u ([`penalty`]); a fixed rho stays available.

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

pub mod coordinator;
#[cfg(feature = "lab")]
pub mod dual;
pub mod error;
#[cfg(feature = "lab")]
pub mod experiment;
#[cfg(feature = "lab")]
pub mod fleet;
mod fused;
pub mod host;
pub mod message;
pub mod model;
pub mod network;
mod num;
pub mod params;
pub mod penalty;
#[cfg(feature = "lab")]
pub mod reference;
mod topk;
pub mod utility;
pub mod uupdate;
pub mod xhost;
pub mod xstep;
pub mod zhost;
pub mod zstep;

pub use coordinator::{Coordinator, StepRule, Stopping, Summary};
pub use error::{DrumError, NetworkError};
pub use host::{HostScratch, HostState, Parallel, Solver};
pub use message::{Broadcast, HostReport};
pub use model::Model;
pub use params::{PaperSetup, Params, Selection};
pub use penalty::{Balancing, Penalty};
