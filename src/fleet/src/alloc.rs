//! What the coordinator hands out: one [`Allocation`] per host (`PREFIX/alloc/HOST`), a ceiling
//! for each of its VMs that crosses a congested link, valid for a while, and the [`RoundReport`]
//! of each round. A host applies its allocation over its local policy and lifts it when it
//! lapses or when the fleet is lost. The round that computes them is `crate::plan` (feature
//! `coordinator`: it links the DRUM solver; a reader of the fleet, `resex top`, does not).

use crate::error::FleetError;
use serde::{Deserialize, Serialize};

/// The largest allocation accepted, bytes.
pub const MAX_ALLOC_BYTES: usize = 1536 << 10;

/// One VM's ceiling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmAlloc {
    /// The VM.
    pub vm: String,
    /// Its transmit ceiling, Mb/s.
    pub max_mbps: f64,
}

/// A host's allocation (`PREFIX/alloc/HOST`).
///
/// A host refuses one older than twice its `valid_ms` by `at_unix_ms` (a coordinator's clock
/// may be off by up to `valid_ms`): a left-over allocation is never applied anew.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    /// The host.
    pub host: String,
    /// The coordinator that wrote it.
    pub coordinator: String,
    /// The coordinator's round.
    pub round: u64,
    /// When, Unix ms (the coordinator's clock).
    pub at_unix_ms: u64,
    /// It lapses this long after the host reads it, ms.
    pub valid_ms: u64,
    /// Ceilings; VMs not listed have none from the fleet.
    pub vms: Vec<VmAlloc>,
}

impl Allocation {
    /// Read back from `key` (bounded, checked: a hostile value lifts nothing and sets nothing).
    pub fn parse(key: &str, v: &[u8]) -> Result<Self, FleetError> {
        let bad = |reason: String| FleetError::BadValue {
            key: key.into(),
            reason,
        };
        if v.len() > MAX_ALLOC_BYTES {
            return Err(bad(format!(
                "{} bytes, more than {MAX_ALLOC_BYTES}",
                v.len()
            )));
        }
        let a: Self = serde_json::from_slice(v).map_err(|e| bad(e.to_string()))?;
        if a.vms.len() > crate::record::MAX_VMS {
            return Err(bad(format!("{} VMs", a.vms.len())));
        }
        if !(1..=600_000).contains(&a.valid_ms) {
            return Err(bad(format!("valid_ms {} must be 1..=600000", a.valid_ms)));
        }
        if let Some(v) = a
            .vms
            .iter()
            .find(|v| !(v.max_mbps.is_finite() && v.max_mbps > 0.0 && v.max_mbps < 1e9))
        {
            return Err(bad(format!("{}: ceiling {} Mb/s", v.vm, v.max_mbps)));
        }
        Ok(a)
    }

    /// Whether it is too old to apply at `now_unix_ms` (see the type's documentation).
    #[must_use]
    pub fn stale(&self, now_unix_ms: u64) -> bool {
        now_unix_ms
            > self
                .at_unix_ms
                .saturating_add(self.valid_ms.saturating_mul(2))
    }

    /// The ceilings in bits per second, as the host's core takes them.
    #[must_use]
    pub fn ceilings_bps(&self) -> Vec<(String, u64)> {
        self.vms
            .iter()
            // Parsed ceilings are under 1e9 Mb/s: the product fits a u64.
            .map(|v| {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let bps = (v.max_mbps * 1e6).round().max(1.0) as u64;
                (v.vm.clone(), bps)
            })
            .collect()
    }
}

/// A round as the coordinator saw it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RoundReport {
    /// The round.
    pub round: u64,
    /// Hosts with a summary that cross a topology link (at most [`MAX_ROUND_VMS`] VMs in all).
    pub hosts: usize,
    /// Their VMs.
    pub vms: usize,
    /// Links with a positive price.
    pub congested: usize,
    /// Per-VM ceilings handed out.
    pub allocations: usize,
    /// Solver iterations this round.
    pub iterations: u32,
    /// Whether the prices settled.
    pub converged: bool,
    /// The worst link load over capacity after the allocation (1 at most).
    pub max_overload: f64,
}

/// The most a VM may ask for, Mb/s (a hostile summary's 1e308 must not overflow the solve).
pub const MAX_DEMAND_MBPS: f64 = 1e7;

/// The most VMs one round allocates over (the rest of the hosts wait).
pub const MAX_ROUND_VMS: usize = 2_000_000;
