//! The leaf crate every other resex crate may use, host side and guest side alike: it depends
//! on nothing of ours and does no I/O.
//!
//! - [`VmId`]: one typed VM identity, used by the monitor, the ledger, the engine, the journal
//!   and the API.
//! - [`LatencyReport`]: one interval's latency as a guest reported it (what the host reads out
//!   of the mailbox and the pricing policies use).
//! - [`TxLimit`]: a VM's guarantee, ceiling and weight in its port's transmit scheduler (the rate
//!   lever); [`NicTimes`]: how long its work requests took in the NIC.
//! - [`recorder`]: [`LatencyRecorder`], a per-interval log-linear latency histogram, and its
//!   [`LatencySummary`].
//! - [`limiter`]: [`LogLimiter`], clock-free rate limiting of logs a guest can trigger.
//! - [`rng`]: xorshift64, the seeded randomness of deterministic runs.
//! - [`size`]: byte sizes as people write them (`64KiB`); [`polling`]: how a transport waits
//!   ([`Polling`]), a word of the scenario format and of BenchEx's options.

#![forbid(unsafe_code)]

pub mod limiter;
pub mod polling;
pub mod recorder;
pub mod rng;
pub mod size;
mod types;

pub use limiter::LogLimiter;
pub use polling::Polling;
pub use recorder::{LatencyRecorder, LatencySummary};
pub use types::{deserialize_bits, parse_bits, BitsError, LatencyReport, NicTimes, TxLimit, VmId};
