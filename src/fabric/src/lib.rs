//! The lab's fabric (issue 20, item 1): several hosts joined by links, in virtual time.
//!
//! Each host has a NIC (a transmit and a receive link at the NIC's rate); switch links join
//! them, and routes say which links a flow from one host to another crosses. Every flow has a
//! DCQCN-like rate controller (rate cut on congestion notifications, fast recovery and additive
//! increase of `R_AI` every `T`), links mark from their queue as RED/ECN does, and links may
//! serve strict-priority classes. The traffic is periodic training jobs: compute, then each
//! worker sends its bytes (ring all-reduce or a plain send), and the next iteration starts
//! when every worker's flow is done. The model is a fluid one (rates, not packets), stepped
//! every `dt` while any flow is on the wire and jumping over compute phases; it is
//! deterministic for a seed.
//!
//! - [`spec`]: the fabric scenario (TOML): hosts, links, routes, jobs, congestion control.
//! - [`dcqcn`]: the per-flow rate controller, with the paper's adaptive `R_AI(1 + progress)`.
//! - [`net`]: links, queues, marking, strict priority; the fluid share of each flow.
//! - [`job`]: a periodic job's phases and its workers' flows.
//! - [`build`]: the links, flows and paths of a spec, checked.
//! - [`sim`]: the run: builds the fabric from a spec, moves time, records.
//! - [`paper`]: the paper's experiments: jobs on one 50 Gb/s bottleneck, fair, unfair,
//!   adaptive and strict priority; the Table 1 groups.
//! - [`record`]: what a run records as it goes (per-VM bytes, recorded links), the jobs'
//!   figures; shared with the run on whole lab hosts.
//! - [`result`]: iteration times, link utilisation, per-VM bytes per interval.
//! - [`generate`]: large fabrics built in code (the scale benchmark).
//! - [`error`]: why a fabric cannot be built or run.

#![forbid(unsafe_code)]

pub mod build;
pub mod dcqcn;
pub mod error;
pub mod generate;
pub mod job;
pub mod net;
pub mod options;
pub mod paper;
pub mod record;
pub mod result;
pub mod sim;
pub mod spec;

pub use dcqcn::{Dcqcn, DcqcnParams};
pub use error::FabricError;
pub use result::{FabricResult, JobResult, LinkSeries};
pub use sim::{run, RunOptions};
pub use spec::{CcMode, FabricLink, FabricSpec, HostSpec, JobSpec, RouteSpec};
