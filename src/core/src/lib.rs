//! The one host core: what resexd and the lab both run.
//!
//! Given the registered VMs, their guest memories, CPU-time samples from a backend and the time
//! `now`, one [`HostCore::step`] scans every VM's rings (IBMon), drains their latency mailboxes,
//! turns counters into usage, measures the link's utilisation from IBMon's exact byte counts,
//! runs the pricing engine and returns what to actuate (cap intents) with one row per VM. The
//! core owns no thread, no clock and no I/O besides guest memory: `resexd` drives it from its
//! 1 ms real-time loop, the lab from virtual time, so a policy result from the lab is what
//! resexd would do on the same trace (a test feeds one trace through both drivers).
//!
//! - [`config`]: [`CoreConfig`] and the link the utilisation is measured against.
//! - [`info`]: what the driver tells the core about a VM ([`VmInfo`]).
//! - [`vm`]: what the core keeps of a VM.
//! - [`error`]: what the core refuses ([`CoreError`]).
//! - [`cpu`]: CPU percent from successive CPU-time samples.
//! - [`output`]: a step's result: per-VM rows and [`Intents`] ([`CapIntent`]s, [`TxIntent`]s:
//!   the rate lever is a VM's share and ceiling in its port's transmit scheduler).
//! - [`fleet`]: the fleet coordinator's transmit ceilings over the local policy, with expiry;
//!   [`adaptive`]: a ceiling that follows a schedule (adaptive unfairness between compatible
//!   periodic jobs on a shared link).
//! - [`grant`]: a host's allocation from the fleet's coordinator as the core takes it
//!   ([`grant::FleetGrant`]; its conversion from the coordinator's record with feature `fleet`).
//! - [`lever`]: one type for every lever the core turns (a VM's CPU cap, its transmit limit):
//!   the value in force, the admin's pin, the fleet's ceiling, why; one [`Intent`] type.
//! - [`periods`]: each VM's transmitted bytes per interval and the period detector's verdicts
//!   (a [`periods::PeriodWatch`] the driver runs off its loop).
//! - [`host`]: [`HostCore`]: the VM table, membership in pricing, pins, policy changes.
//! - [`step`]: the step itself.
//! - [`snapshot`]: the API's [`resex_api::Snapshot`] built from the core's state.
//!
//! Every VM is priced from the interval after the driver adds it (resexd: when discovery
//! finds it; the lab: when its guest starts), registered or not: CPU is charged from the
//! start, I/O once its rings are known. Its quiet latency is learned from its reports
//! whatever the policy and handed to every new policy.

pub mod adaptive;
pub mod config;
pub mod cpu;
pub mod error;
pub mod fleet;
pub mod grant;
pub mod host;
pub mod info;
pub mod lever;
pub mod output;
pub mod periods;
pub mod snapshot;
pub mod step;
pub mod vm;

pub use config::{CoreConfig, HostLink};
pub use cpu::CpuSample;
pub use error::CoreError;
pub use fleet::{FleetApplied, FleetCeilings};
pub use host::{HostCore, NamedPolicy};
pub use info::VmInfo;
pub use lever::{Cap, Cause, Intent, Lever, LeverKind, Levers, Tx};
pub use output::{CapCause, CapIntent, Intents, Priced, StepOutput, TxCause, TxIntent, VmRow};
pub use resex_common::TxLimit;
pub use resex_common::VmId;
pub use vm::VmView;
