//! The fleet (issue 22): many resexd hosts coordinated through a real etcd. Nothing here is a
//! consensus or membership protocol of its own: etcd's leases say who is alive, its election
//! API says who coordinates, and its keys hold what hosts publish.
//!
//! - [`keys`]: the key layout under `/resex/v1/`.
//! - [`record`]: what a host publishes: its record (under its lease) and its per-VM summary.
//! - [`config`]: the `[fleet]` section (endpoints, host name, lease TTL, publish period, auth and
//!   TLS passed through).
//! - [`topology`]: the shared fabric links the coordinator allocates over (`PREFIX/topology`).
//! - [`alloc`]: what the coordinator hands out: one allocation (per-VM ceilings with an expiry)
//!   per host, and each round's report.
//! - `advise` (feature `coordinator`): where new training jobs should go, from the topology and
//!   the periodic jobs running now (`resex fleet place`).
//! - `compat` (feature `coordinator`): the periodic jobs on each topology link and their
//!   congestion compatibility (the circle), for the round's report.
//! - `plan` (feature `coordinator`, on with `etcd`): the coordinator's round: DRUM over those
//!   links from the hosts' summaries (the only module that links the solver).
//! - [`status`]: the fleet view from what etcd holds (hosts, leader, lease ages, top
//!   aggressors), pure.
//! - [`error`]: why the fleet cannot be reached or used.
//! - `etcd` (feature `etcd`): the public face of the three below: `Fleet` and
//!   `Member`. Without the feature, [`connect_error`] says in one line what is
//!   missing.
//! - `client` (feature `etcd`): connecting (auth, TLS), paged reads, the fleet view read back.
//! - `coord` (feature `etcd`): the coordinator's round over etcd, and a host reading its
//!   allocation.
//! - `member` (feature `etcd`): a host in the fleet (lease, summaries, election, the
//!   coordinator's rounds, its allocation), on a thread of its own.
//! - `local` (feature `etcd`): a local etcd (the installed binary) on loopback, for
//!   `resex fleet demo` and the tests.

#![forbid(unsafe_code)]

#[cfg(feature = "coordinator")]
pub mod advise;
pub mod alloc;
#[cfg(feature = "coordinator")]
pub mod compat;
pub mod config;
pub mod error;
pub mod keys;
#[cfg(feature = "coordinator")]
pub mod plan;
pub mod record;
pub mod status;
pub mod topology;

#[cfg(feature = "etcd")]
pub mod client;
#[cfg(feature = "etcd")]
pub mod coord;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "etcd")]
pub mod local;
#[cfg(feature = "etcd")]
pub mod member;

pub use alloc::{Allocation, LinkCompat, LinkJob, RoundReport};
pub use config::FleetConfig;
pub use error::{FleetError, SettingError, TopologyError};
#[cfg(feature = "coordinator")]
pub use plan::Planner;
pub use record::{HostRecord, HostSummary, JobPeriod, PeriodRates, VmSummary};
pub use status::{FleetStatus, HostStatus};
pub use topology::Topology;

/// Why fleet mode cannot start in a build without the `etcd` feature.
#[must_use]
pub fn connect_error() -> FleetError {
    FleetError::NotBuilt
}
