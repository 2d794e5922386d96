//! resexd, the host daemon, as a library (the `resexd` binary and `resex demo` run it).
//!
//! - [`config`], the TOML configuration.
//! - [`control`], starting and stopping ([`control::start`], [`control::DaemonHandle`]).
//! - [`runloop`], the real-time loop; [`driver`], what one tick does: inputs, the host core's
//!   step (`resex_core`: scan, price, decide), actuation, journal, snapshot.
//! - [`sampler`], every slow backend call (domains, memory, CPU time) on a thread of its own.
//! - [`registrar`], the registration channel, host side.
//! - [`knob`], what the daemon turns (caps, transmit limits); [`store`], their original
//!   settings, for crash safety; [`actuator`], applies them off the loop.
//! - [`api`], the local API socket (its messages: `resex_api`).
//! - [`journal`], the usage and cap journal.
//! - [`periods`], the period detector (each VM's iterations, from its transmitted bytes) on a
//!   thread of its own, fed from the loop in batches.

pub mod actuator;
pub mod api;
pub mod config;
pub mod control;
pub mod driver;
pub mod inbox;
pub mod journal;
pub mod knob;
pub mod metrics;
pub mod periods;
pub mod registrar;
pub mod runloop;
pub mod sampler;
pub mod store;

pub use control::{start, DaemonHandle, Settings};
pub use runloop::RunSummary;
