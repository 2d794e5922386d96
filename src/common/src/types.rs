//! Types shared across the host's layers.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A VM's identity on this host: given once when the VM is first seen and never reused while
/// the process runs, so a journal row or an API entry names one VM for good. Ties between VMs
/// (two with equal MTUs) are broken by the lower id, so results never depend on the order in
/// which VMs are listed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct VmId(pub u32);

impl VmId {
    /// The id as an index (ids are small integers handed out in order).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for VmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vm{}", self.0)
    }
}

/// One latency report from a guest, as the host uses it (the mailbox's report after
/// validation; several reports of one interval merged into one).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencyReport {
    /// Requests measured.
    pub count: u64,
    /// Mean latency, ns.
    pub mean_ns: f64,
    /// Standard deviation, ns.
    pub stddev_ns: f64,
    /// Median, ns (0 when not reported).
    pub p50_ns: f64,
    /// 99th percentile, ns.
    pub p99_ns: f64,
    /// 99.9th percentile, ns (0 when not reported).
    pub p999_ns: f64,
}

/// A VM's place in its NIC port's transmit scheduler, as devlink rate has it: a guaranteed
/// rate (`tx_share`, or the legacy per-VF `min_tx_rate`), a ceiling (`tx_max`, `max_tx_rate`),
/// both in bits per second, and a weight for the port's spare capacity (`tx_weight`). `None`
/// in a field: no setting (work-conserving, uncapped, the default weight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TxLimit {
    /// Guaranteed rate, bits per second: traffic within it is served ahead of the port's
    /// excess traffic (the committed rate of HTB or DCB ETS; an entitlement).
    #[serde(default)]
    pub share_bps: Option<u64>,
    /// Ceiling, bits per second.
    #[serde(default)]
    pub max_bps: Option<u64>,
    /// Weight in the split of the excess, the capacity beyond every guaranteed rate
    /// (1..=100, relative to the other vports'; `None`: from the guaranteed rate, as mlx5's
    /// `bw_share`, or 1 without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

impl TxLimit {
    /// No setting.
    pub const NONE: TxLimit = TxLimit {
        share_bps: None,
        max_bps: None,
        weight: None,
    };

    /// A guaranteed rate and a ceiling, with the default weight.
    pub const fn new(share_bps: Option<u64>, max_bps: Option<u64>) -> TxLimit {
        TxLimit {
            share_bps,
            max_bps,
            weight: None,
        }
    }

    /// True when nothing is set.
    pub fn is_none(&self) -> bool {
        self.share_bps.is_none() && self.max_bps.is_none() && self.weight.is_none()
    }
}

/// What the NIC measured of a VM's send work requests, summed since it started: how many
/// completed, their sojourn in the NIC (from its doorbell to its completion) and the part of
/// that the wire alone needed (its packets at the port's rate), ns. The host's own evidence of
/// how long a guest's I/O takes, beside anything the guest reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NicTimes {
    /// Work requests completed.
    pub wqes: u64,
    /// Their sojourn, summed, ns.
    pub sojourn_ns: u64,
    /// Their packets' time on the wire at the port's rate, summed, ns.
    pub wire_ns: u64,
}

impl NicTimes {
    /// What was added since `earlier` (a counter that went backwards gives 0).
    pub fn since(&self, earlier: &NicTimes) -> NicTimes {
        NicTimes {
            wqes: self.wqes.saturating_sub(earlier.wqes),
            sojourn_ns: self.sojourn_ns.saturating_sub(earlier.sojourn_ns),
            wire_ns: self.wire_ns.saturating_sub(earlier.wire_ns),
        }
    }

    /// The sum of two.
    pub fn plus(&self, other: &NicTimes) -> NicTimes {
        NicTimes {
            wqes: self.wqes.saturating_add(other.wqes),
            sojourn_ns: self.sojourn_ns.saturating_add(other.sojourn_ns),
            wire_ns: self.wire_ns.saturating_add(other.wire_ns),
        }
    }

    /// The mean wait beyond the wire per work request, ns (`None` without one).
    pub fn wait_ns(&self) -> Option<f64> {
        (self.wqes > 0)
            .then(|| self.sojourn_ns.saturating_sub(self.wire_ns) as f64 / self.wqes as f64)
    }
}

/// Deserializes a rate written as [`parse_bits`] reads it, or as a bare number of bits per
/// second (for `deserialize_with`).
pub fn deserialize_bits<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(u64),
        S(String),
    }
    match <Raw as serde::Deserialize>::deserialize(d)? {
        Raw::N(n) => Ok(n),
        Raw::S(s) => parse_bits(&s).map_err(serde::de::Error::custom),
    }
}

/// A rate that [`parse_bits`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BitsError {
    /// Not a number with a unit.
    #[error("`{0}` is not a rate (e.g. 2Gbit, 500Mbit, 64000)")]
    NotARate(String),
    /// A number, but not between 1 bit/s and 1 Pbit/s.
    #[error("`{0}` is not a rate between 1 bit/s and 1 Pbit/s")]
    OutOfRange(String),
}

/// Parses a rate as admins write it (tc and devlink's units, decimal): `2Gbit`, `500mbit`,
/// `100kbit`, `64000bit`, or a bare number of bits per second; `bps` is accepted for `bit`.
pub fn parse_bits(s: &str) -> Result<u64, BitsError> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("bps")
        .map_or_else(|| t.clone(), |x| format!("{x}bit"));
    let (num, mult) = [
        ("tbit", 1e12),
        ("gbit", 1e9),
        ("mbit", 1e6),
        ("kbit", 1e3),
        ("bit", 1.0),
    ]
    .iter()
    .find_map(|(u, m)| t.strip_suffix(u).map(|n| (n.to_owned(), *m)))
    .unwrap_or((t.clone(), 1.0));
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| BitsError::NotARate(s.to_owned()))?;
    let bits = v * mult;
    if !(bits.is_finite() && (1.0..=1e15).contains(&bits)) {
        return Err(BitsError::OutOfRange(s.to_owned()));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(bits.round() as u64)
}

impl fmt::Display for TxLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = |b: u64| {
            if b >= 1_000_000_000 && b.is_multiple_of(1_000_000) {
                format!("{:.3}Gbit", b as f64 / 1e9)
            } else if b >= 1_000_000 {
                format!("{:.1}Mbit", b as f64 / 1e6)
            } else {
                format!("{b}bit")
            }
        };
        match (self.share_bps, self.max_bps) {
            (None, None) if self.weight.is_none() => return f.write_str("none"),
            (None, None) => Ok(()),
            (Some(s), None) => write!(f, "share {}", bits(s)),
            (None, Some(m)) => write!(f, "max {}", bits(m)),
            (Some(s), Some(m)) => write!(f, "share {} max {}", bits(s), bits(m)),
        }?;
        match self.weight {
            Some(w) if self.share_bps.is_none() && self.max_bps.is_none() => {
                write!(f, "weight {w}")
            }
            Some(w) => write!(f, " weight {w}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_id_is_a_bare_number_on_the_wire_and_vm_n_for_people() {
        assert_eq!(serde_json::to_string(&VmId(7)).unwrap(), "7");
        assert_eq!(serde_json::from_str::<VmId>("7").unwrap(), VmId(7));
        assert_eq!(VmId(7).to_string(), "vm7");
        assert_eq!(VmId(7).index(), 7);
    }

    #[test]
    fn tx_limits_read_as_people_write_them() {
        assert_eq!(TxLimit::NONE.to_string(), "none");
        assert!(TxLimit::default().is_none());
        let t = TxLimit {
            share_bps: Some(500_000_000),
            max_bps: Some(2_000_000_000),
            weight: None,
        };
        assert_eq!(t.to_string(), "share 500.0Mbit max 2.000Gbit");
        let j = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<TxLimit>(&j).unwrap(), t);
        assert_eq!(
            serde_json::from_str::<TxLimit>("{}").unwrap(),
            TxLimit::NONE
        );
    }

    #[test]
    fn rates_parse_in_tc_units() {
        assert_eq!(parse_bits("2Gbit"), Ok(2_000_000_000));
        assert_eq!(parse_bits("500mbit"), Ok(500_000_000));
        assert_eq!(parse_bits("1.5Gbps"), Ok(1_500_000_000));
        assert_eq!(parse_bits("64000"), Ok(64_000));
        assert_eq!(parse_bits(" 10kbit "), Ok(10_000));
        for bad in ["", "fast", "0", "-1Gbit", "2Pbit", "1e30"] {
            assert!(parse_bits(bad).is_err(), "{bad}");
        }
    }
}
