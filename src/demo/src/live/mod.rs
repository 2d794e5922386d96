//! The demo's real-time run: an embedded host (softhca, real guest processes) with resexd on
//! it ([`crate::embedded::EmbeddedDaemon`]), and the four phases; each phase watched for the
//! host's own health ([`crate::health`]).
//!
//! - [`view`]: [`LiveView`], what the caller shows while the run goes (a dashboard, a table).
//! - `backlog`: the reporting VM's orders offered and not yet served, and when a phase's
//!   latency is that queue's.
//! - `guests`: the demo's guests in the daemon's snapshots, their registration, the
//!   time-critical threads' priorities.
//! - `phases`: the phases one after the other, each phase's figures.
//! - `run`: [`run`], [`LiveOptions`]: the whole run, from the host's start to its figures.

mod backlog;
mod guests;
mod phases;
mod run;
pub mod view;

pub use run::{run, LiveOptions};
pub use view::LiveView;
