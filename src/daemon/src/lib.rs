//! resexd, the host daemon, as a library (the `resexd` binary and `resex demo` run it).
//!
//! - [`config`], the TOML configuration.
//! - [`control`], the control loop ([`control::start`], [`control::DaemonHandle`]).
//! - [`registrar`], the registration channel, host side.
//! - [`vm`], one VM's monitors, mailbox and counters.
//! - [`capstore`], original cap settings, for crash safety; [`actuator`], applies caps off the loop.
//! - [`api`], the local API socket (its messages: `resex_api`).
//! - [`journal`], the usage and cap journal.

pub mod actuator;
pub mod api;
pub mod capstore;
pub mod config;
pub mod control;
pub mod journal;
pub mod metrics;
pub mod registrar;
pub mod vm;

pub use control::{start, DaemonHandle, RunSummary, Settings};
