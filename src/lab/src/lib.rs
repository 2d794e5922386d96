//! The lab: a whole host replayed in virtual time, deterministically.
//!
//! Guests are workload models (a BenchEx server: orders arrive, are computed, and answered
//! with an RDMA WRITE of the scenario's buffer size) on a vCPU under a cap; they post real mlx5
//! work requests into simulated guest memory through the shim; softhca and its link model run
//! on a virtual clock; the real monitor (IBMon) reads those rings; the real pricing engine sets
//! caps, applied after a configurable actuator delay. The scenario format is the embedded
//! host's.
//!
//! - [`vcpu`]: the vCPU under a cap (credit2-like: cap% of each 10 ms period, parked when spent).
//! - [`server`]: the BenchEx server model.
//! - [`guest`]: one guest: its memory, server, mailbox, registration and figures.
//! - [`host`]: the lab host; [`events`]: the loops that move virtual time.
//! - [`driver`]: the lab's driver of the host core (`resex_core`, the one resexd runs).
//! - [`fabric`]: the lab fabric (`resex_fabric`) with every host a whole lab host.
//! - [`result`]: what a run reports.
//! - [`paper`]: the ResEx paper's experiments as lab runs.
//! - [`compare`]: policies side by side on the same scenarios.
//! - [`transport`]: the shim's transports on softhca in virtual time (status-byte, sliding
//!   window, CPWR, HiPower), the papers' experiments.

pub mod compare;
pub mod driver;
pub mod error;
pub mod events;
pub mod fabric;
pub mod guest;
pub mod host;
pub mod paper;
pub mod result;
pub mod server;
pub mod transport;
pub mod vcpu;

pub use host::{LabConfig, LabError, LabHost};

/// The link a scenario asks for: its preset, with the rate and base latency overridden (the
/// scenario loader refuses unknown presets).
pub fn link_of(s: &resex_scenario::Scenario) -> resex_softhca::LinkConfig {
    resex_softhca::LinkConfig::preset_with(&s.link.preset, s.link.gbps, s.link.base_latency_us)
        .unwrap_or_default()
}
pub use result::{HostResult, LabResult, Series, VmResult, VmSeries, VmTraffic};

#[cfg(test)]
mod tests {
    #[test]
    fn every_preset_a_scenario_may_name_is_a_link_softhca_knows() {
        for p in resex_scenario::LINK_PRESETS {
            assert!(resex_softhca::LinkConfig::preset(p).is_some(), "{p}");
        }
        assert!(resex_softhca::LinkConfig::preset_with("nope", None, None).is_none());
        let l = resex_softhca::LinkConfig::preset_with("100g", Some(25.0), Some(2.0)).unwrap();
        assert_eq!((l.bits_per_sec, l.base_latency_ns), (25_000_000_000, 2000));
    }
}
