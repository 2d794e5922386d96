//! The core's settings and the link it measures utilisation against.

use resex_ibmon::{Counters, Limits, DEFAULT_SCAN_BUDGET};
use serde::{Deserialize, Serialize};

/// The host's link (its NIC port, one direction): what the utilisation is measured against.
/// The monitor counts every byte and packet a VM puts on it; a packet costs its payload plus
/// `header_bytes` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLink {
    /// The port's rate, bits per second.
    pub bits_per_sec: u64,
    /// Bytes on the wire per packet besides its payload (headers, CRCs).
    #[serde(default)]
    pub header_bytes: u32,
}

impl Default for HostLink {
    /// 8 Gb/s with 58 header bytes: the ResEx paper's testbed (softhca's `testbed` preset).
    fn default() -> Self {
        Self {
            bits_per_sec: 8_000_000_000,
            header_bytes: 58,
        }
    }
}

impl HostLink {
    /// Bits on the wire for what a monitor counted (payload and one header per packet sent).
    pub fn bits(&self, c: &Counters) -> f64 {
        (c.tx_bytes as f64 + c.tx_packets as f64 * f64::from(self.header_bytes)) * 8.0
    }

    /// `bits` over `ns` nanoseconds as a fraction of the port's rate.
    pub fn utilisation(&self, bits: f64, ns: u64) -> f64 {
        let capacity = self.bits_per_sec as f64 * ns as f64 / 1e9;
        if capacity > 0.0 {
            bits / capacity
        } else {
            0.0
        }
    }
}

/// What the core runs with.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Ring entries (CQEs + WQEs) walked per VM per step; what is left is read at the next.
    pub scan_budget: u32,
    /// The step's length when no policy sets one (a policy's `ledger.interval_ms` wins), ns.
    pub interval_ns: u64,
    /// The host's link.
    pub link: HostLink,
    /// Limits on registration documents (checked again for QPs added to a live VM).
    pub limits: Limits,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            scan_budget: DEFAULT_SCAN_BUDGET,
            interval_ns: 1_000_000,
            link: HostLink::default(),
            limits: Limits::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilisation_counts_payload_and_headers_against_the_rate() {
        let link = HostLink {
            bits_per_sec: 8_000_000_000,
            header_bytes: 58,
        };
        let c = Counters {
            tx_bytes: 1_000_000 - 58 * 100,
            tx_packets: 100,
            ..Counters::default()
        };
        let bits = link.bits(&c);
        assert_eq!(bits, 8_000_000.0);
        assert!((link.utilisation(bits, 1_000_000) - 1.0).abs() < 1e-12);
        assert_eq!(
            HostLink {
                bits_per_sec: 0,
                header_bytes: 0
            }
            .utilisation(1.0, 1),
            0.0
        );
    }
}
