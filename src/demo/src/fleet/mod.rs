//! `resex fleet demo` (feature `fleet`): a whole fleet on this machine. A local etcd (the
//! installed binary), N embedded hosts each with a resexd (in this process,
//! [`crate::embedded::EmbeddedDaemon`]) and one light guest whose BenchEx server sends 256 KiB
//! replies 100 times a second, all crossing one shared uplink of half their demand. The
//! elected coordinator allocates the uplink (per-VM ceilings on softhca's ports); midway the
//! coordinator's host dies (its fleet session crashes: no revoke, its lease runs out, as with
//! kill -9) and another takes over; near the end etcd is killed and every host must lift what
//! the fleet set.
//!
//! - [`demo`]: [`run`], [`FleetOptions`], [`Notes`]: the run, step by step.
//! - [`jobs`]: [`jobs::run_jobs`], periodic jobs on two shared uplinks, fair then adaptive
//!   (`--jobs`).
//! - [`report`]: [`FleetReport`], what it measured.
//! - `host`: one host of the fleet (embedded host, daemon, fleet member).
//! - `watch`: figures across the hosts (rates, ceilings), waiting for a condition.

pub mod demo;
mod host;
pub mod jobs;
pub mod report;
mod watch;

pub use demo::{run, FleetOptions, Notes, HOSTS};
pub use report::FleetReport;
