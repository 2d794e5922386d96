//! resexd, the host daemon, as a library (the `resexd` binary and `resex demo` run it).
//!
//! - [`config`], the TOML configuration.
//! - [`control`], starting and stopping ([`control::start`], [`control::DaemonHandle`]).
//! - [`runloop`], the real-time loop; [`driver`], what one tick does: inputs, the host core's
//!   step (`resex_core`: scan, price, decide), actuation, journal, snapshot.
//! - [`sampler`], every slow backend call (domains, memory, CPU time) on a thread of its own.
//! - [`registrar`], the registration channel, host side.
//! - [`capstore`], original cap settings, for crash safety; [`actuator`], applies caps off the loop.
//! - [`api`], the local API socket (its messages: `resex_api`).
//! - [`journal`], the usage and cap journal.

pub mod actuator;
pub mod api;
pub mod capstore;
pub mod config;
pub mod control;
pub mod driver;
pub mod journal;
pub mod metrics;
pub mod registrar;
pub mod runloop;
pub mod sampler;

pub use control::{start, DaemonHandle, Settings};
pub use runloop::RunSummary;
