//! Pricing in Resos: the currency that buys both CPU and I/O.
//!
//! Pure code: no I/O, no clock reads, no randomness, no unsafe. The same inputs give the same
//! outputs, whatever the order in which VMs are listed; the daemon, the lab and
//! `resex price replay` run this same engine.
//!
//! - [`config`]: policy files (`policies/*.toml`), typed and range-checked.
//! - [`ledger`]: accounts, allotments per epoch (prorated for late arrivals), charges.
//! - [`policy`]: the [`Policy`] trait and the balance rule both shipped policies use.
//! - [`freemarket`], [`ioshares`]: the paper's Algorithms 1 and 2; [`governor`]: ours
//!   (congestion-gated, split by share, a proportional-integral controller); [`interference`]:
//!   the report-to-interference measure IOShares and the governor share; [`drum`]: DRUM's
//!   utility maximisation on one host (`resex-drum`'s ADMM), x as transmit limits, z as caps;
//!   [`progress`]: adaptive unfairness, a bursting VM's share growing with its progress;
//!   [`justitia`]: Justitia (NSDI '22) as a baseline to compare with, not shipped.
//! - [`entitlement`]: what the admin grants each VM, and the guard that holds every policy
//!   to it (ceilings and caps only above it, the guarantee its own).
//! - [`evidence`]: the host's own evidence (the NIC's times, the link) against each latency
//!   report; a report the host contradicts is discounted before any policy sees it.
//! - [`engine`]: [`Engine`], which steps a host one interval at a time.
//! - [`trace`], [`replay`]: the usage trace format and open-loop replay.

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

pub mod baseline;
pub mod config;
pub mod drum;
pub mod engine;
pub mod entitlement;
pub mod evidence;
pub mod freemarket;
pub mod governor;
pub mod interference;
pub mod ioshares;
pub mod justitia;
pub mod ledger;
pub mod policy;
pub mod progress;
pub mod replay;
pub mod trace;
pub mod types;

pub use baseline::BaselineLearner;
pub use config::{ConfigError, IoSharesMode, Lever, PolicyConfig, PolicyKind};
pub use engine::{Departure, Engine, PricingError};
pub use entitlement::{Entitled, Entitlement};
pub use ledger::Account;
pub use policy::{Ctx, Policy};
pub use types::{
    AccountRow, Baseline, CapDecision, CapReason, EngineOutput, IntervalInput, LatencyReport,
    TxDecision, TxLimit, TxReason, VmId, VmSpec, VmUsage,
};
