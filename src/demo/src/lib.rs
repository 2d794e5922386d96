//! `resex demo` as a library: the paper's pair (a 64 KiB reporting VM and a 2 MiB interfering
//! VM) in four phases, `base` (the reporting VM alone), `interfered` (both, no policy),
//! `freemarket` (CPU caps) and `ioshares` (each VM's entitlement guaranteed in the transmit
//! scheduler, CPU caps and transmit ceilings above it); in real time on an embedded host with
//! resexd, or in the lab's virtual time; with whether the story held and how healthy the host
//! was. With the feature `fleet`, `resex fleet demo` too. The `resex` binary parses the options
//! and prints; everything else is here.
//!
//! - [`plan`]: [`Demo`]: the scenario, the four phases and their policies, their timing.
//! - [`phase`]: [`Phase`], one phase's figures; [`Story`], what the four show.
//! - [`report`]: [`DemoReport`] (`--json`'s output), [`HostReport`] (the real-time host).
//! - [`health`]: the run's own health, per phase: is this machine too busy for real-time
//!   figures; [`procstat`]: the `/proc/stat` it reads.
//! - [`embedded`]: [`EmbeddedDaemon`], an embedded host with resexd on it (the live run's host
//!   and each of the fleet demo's).
//! - [`live`]: the real-time run, shown through a [`live::LiveView`].
//! - [`lab`]: the virtual-time run.
//! - `fleet` (feature `fleet`): the fleet demo (a local etcd, N hosts, failover, etcd lost).
//! - [`error`]: [`DemoError`], why a demo could not run.

pub mod embedded;
pub mod error;
#[cfg(feature = "fleet")]
pub mod fleet;
pub mod health;
pub mod lab;
pub mod live;
pub mod phase;
pub mod plan;
pub mod procstat;
pub mod report;

pub use embedded::EmbeddedDaemon;
pub use error::DemoError;
pub use health::Health;
pub use phase::{Phase, Story};
pub use plan::Demo;
pub use report::{DemoReport, HostReport};
