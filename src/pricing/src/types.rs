//! What goes into one pricing step and what comes out of it.

pub use resex_common::{LatencyReport, TxLimit, VmId};
use serde::Serialize;
use std::fmt;

/// A latency baseline: what the VM's application sees on a quiet host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Baseline {
    /// Mean request latency, nanoseconds.
    pub mean_ns: f64,
    /// Standard deviation of the request latency, nanoseconds.
    pub stddev_ns: f64,
}

/// A VM as the engine knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct VmSpec {
    /// Engine identity.
    pub id: VmId,
    /// Name shown to people (domain name).
    pub name: String,
    /// Virtual CPUs: the CPU allotment and the cap ceiling (100 x vCPUs) scale with it.
    pub vcpus: u32,
    /// Weight of the VM's share of the link when the policy splits it by weight (> 0).
    pub weight: f64,
    /// The VM's own SLA threshold (fraction), overriding the policy's default.
    pub sla_threshold: Option<f64>,
    /// A configured latency baseline; without one the policy learns it from reports.
    pub baseline: Option<Baseline>,
    /// What the admin grants it (the defaults: an equal split of the link, the policy's
    /// CPU floor).
    pub entitlement: Entitlement,
}

impl VmSpec {
    /// A VM with weight 1, the policy's SLA and a learned baseline.
    pub fn new(id: u32, name: impl Into<String>, vcpus: u32) -> Self {
        Self {
            id: VmId(id),
            name: name.into(),
            vcpus,
            weight: 1.0,
            sla_threshold: None,
            baseline: None,
            entitlement: Entitlement::default(),
        }
    }
}

/// One VM's measured use of one interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VmUsage {
    /// Which VM.
    pub vm: VmId,
    /// CPU used in the interval, percent of one physical CPU (may exceed 100 with several vCPUs).
    pub cpu_pct: f64,
    /// MTU-sized packets the VM put on the link in the interval.
    pub mtus: u64,
    /// Bytes the VM sent in the interval.
    pub bytes: u64,
    /// The latency report that arrived in this interval, if any.
    pub report: Option<LatencyReport>,
    /// What the NIC measured of its work requests that completed in the interval, where the
    /// NIC measures it (the host's own evidence of its I/O delay).
    pub nic: Option<resex_common::NicTimes>,
}

impl VmUsage {
    /// Usage with no report.
    pub fn new(vm: VmId, cpu_pct: f64, mtus: u64) -> Self {
        Self {
            vm,
            cpu_pct,
            mtus,
            bytes: 0,
            report: None,
            nic: None,
        }
    }
}

/// Everything measured in one interval.
#[derive(Debug, Clone, Copy)]
pub struct IntervalInput<'a> {
    /// The interval's index since the engine's time zero (strictly increasing; gaps allowed).
    pub interval: u64,
    /// Host link utilisation in [0, 1]; `None` lets the engine compute it from the MTUs.
    pub link_util: Option<f64>,
    /// Per-VM usage; a registered VM that is missing used nothing and sent no report.
    pub usage: &'a [VmUsage],
}

/// Why a cap changed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CapReason {
    /// A new epoch replenished the balance and lifted the balance-rule cuts.
    EpochReplenish,
    /// The balance fell below the low-balance fraction with enough of the epoch left.
    LowBalance {
        /// Balance after this interval's charges.
        balance: f64,
        /// The VM's allotment this epoch.
        allotment: f64,
    },
    /// The VM's rate rose because it was named as an interferer (cap = base / rate).
    Interferer {
        /// The VM whose latency report named it.
        victim: VmId,
        /// The new rate.
        rate: f64,
    },
    /// No interference: the rate decayed towards 1 and the cap rises back.
    Decay {
        /// The new rate.
        rate: f64,
    },
    /// DRUM's allocation: the VM's CQ service z as a CPU share (the VM's full vCPUs when it
    /// is idle).
    Allocation {
        /// z, percent of one CPU (before rounding and clamping).
        cpu_pct: f64,
    },
    /// The entitlement guard: the VM sends within its entitlement (no cap), or the policy's
    /// cap would take it below its CPU floor or its entitlement.
    Entitlement {
        /// Its smoothed transmit rate, bits per second.
        rate_bps: f64,
        /// Its entitlement, bits per second.
        entitled_bps: f64,
    },
}

impl fmt::Display for CapReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapReason::EpochReplenish => write!(f, "epoch replenish"),
            CapReason::LowBalance { balance, allotment } => write!(
                f,
                "low balance {:.1}% of allotment: cap cut",
                if *allotment > 0.0 {
                    100.0 * balance / allotment
                } else {
                    0.0
                }
            ),
            CapReason::Interferer { victim, rate } => {
                write!(f, "interferer of {victim}: rate {rate:.3}")
            }
            CapReason::Decay { rate } => write!(f, "no interference: rate decays to {rate:.3}"),
            CapReason::Allocation { cpu_pct } => write!(f, "DRUM: CQ service {cpu_pct:.1}% CPU"),
            CapReason::Entitlement {
                rate_bps,
                entitled_bps,
            } => entitled(f, *rate_bps, *entitled_bps),
        }
    }
}

/// Why a VM's transmit limit changed (the rate lever).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TxReason {
    /// A latency-sensitive VM gets a guaranteed share while it is active.
    Protect {
        /// The VM protected.
        victim: VmId,
    },
    /// An aggressor gets a ceiling because shares were not enough for this victim.
    Limit {
        /// The VM whose latency asked for it.
        victim: VmId,
    },
    /// The reason for the setting is gone: it is lifted.
    Release,
    /// A policy that decides caps, acting through the rate lever: its cap as a ceiling, the
    /// same fraction of the link.
    Ceiling(CapReason),
    /// DRUM's allocation: the VM's WQE rate x as its share (or ceiling) of the link.
    Allocation {
        /// x, percent of the link (before rounding).
        link_pct: f64,
    },
    /// Adaptive unfairness: the VM's share grows with its progress in its current burst.
    Progress {
        /// How far into its burst it is, percent of its learned burst size (0 for a VM that
        /// is not in a burst and weighs as the most advanced one).
        progress_pct: f64,
    },
    /// The Justitia baseline: an elephant's equal part of the elephants' virtual link.
    Justitia {
        /// The virtual link, percent of the link.
        virtual_link_pct: f64,
    },
    /// The entitlement guard: the VM's guarantee is its entitlement, and a ceiling applies
    /// only above it.
    Entitlement {
        /// Its smoothed transmit rate, bits per second.
        rate_bps: f64,
        /// Its entitlement, bits per second.
        entitled_bps: f64,
    },
}

/// "sends X of its Y entitlement" for people.
fn entitled(f: &mut fmt::Formatter<'_>, rate_bps: f64, entitled_bps: f64) -> fmt::Result {
    write!(
        f,
        "entitlement: sends {:.0} of its {:.0} Mbit/s",
        rate_bps / 1e6,
        entitled_bps / 1e6
    )
}

impl fmt::Display for TxReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxReason::Protect { victim } => write!(f, "share to protect {victim}"),
            TxReason::Limit { victim } => write!(f, "ceiling for {victim}'s latency"),
            TxReason::Release => f.write_str("released"),
            TxReason::Ceiling(r) => write!(f, "{r} (as a ceiling)"),
            TxReason::Allocation { link_pct } => {
                write!(f, "DRUM: WQE rate {link_pct:.1}% of the link")
            }
            TxReason::Progress { progress_pct } => {
                write!(f, "{progress_pct:.0}% into its burst")
            }
            TxReason::Justitia { virtual_link_pct } => {
                write!(
                    f,
                    "Justitia: elephants share {virtual_link_pct:.0}% of the link"
                )
            }
            TxReason::Entitlement {
                rate_bps,
                entitled_bps,
            } => entitled(f, *rate_bps, *entitled_bps),
        }
    }
}

/// A transmit limit the rate lever should set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TxDecision {
    /// Which VM.
    pub vm: VmId,
    /// The limit ([`TxLimit::NONE`]: no setting).
    pub tx: TxLimit,
    /// Why.
    pub reason: TxReason,
}

/// A cap the actuator should set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CapDecision {
    /// Which VM.
    pub vm: VmId,
    /// The cap, percent of one physical CPU, within [floor, 100 x vCPUs].
    pub cap_pct: f64,
    /// Why.
    pub reason: CapReason,
}

/// One VM's line of one interval's result.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AccountRow {
    /// Which VM.
    pub vm: VmId,
    /// The VM's allotment in this epoch (Resos).
    pub allotment: f64,
    /// Balance after this interval's charges (never below zero).
    pub balance: f64,
    /// CPU charge of this interval (`cpu_pct x rate`).
    pub charge_cpu: f64,
    /// I/O charge of this interval (`mtus x rate`).
    pub charge_io: f64,
    /// The VM's rate (Resos per CPU percent and per MTU).
    pub rate: f64,
    /// The VM's current cap, percent of one physical CPU.
    pub cap: f64,
    /// Interference the VM's report showed this interval (fraction), when it reported.
    pub intf_pct: Option<f64>,
    /// The VM its report blamed, when its interference was above its SLA threshold.
    pub interferer: Option<VmId>,
    /// Set when the cap changed this interval.
    pub reason: Option<CapReason>,
}

/// The result of one interval.
#[derive(Debug, Clone, Default)]
pub struct EngineOutput {
    /// The interval that was priced.
    pub interval: u64,
    /// Link utilisation used for this interval.
    pub link_util: f64,
    /// One row per registered VM, in id order.
    pub rows: Vec<AccountRow>,
    /// Caps that changed (only at actuation boundaries).
    pub decisions: Vec<CapDecision>,
    /// Transmit limits that changed (only at actuation boundaries; only policies that use the
    /// rate lever make them).
    pub tx_decisions: Vec<TxDecision>,
}

/// What the admin configured for a VM (`None`: the default).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Entitlement {
    /// Guaranteed transmit rate, bits per second (default: an equal split of the link).
    pub tx_bps: Option<u64>,
    /// CPU floor, percent of one CPU (default: the policy's `caps.floor_pct`).
    pub cpu_floor_pct: Option<f64>,
}

/// A VM's entitlement in force and what the host measured against it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Entitled {
    /// Guaranteed transmit rate in force, bits per second.
    pub tx_bps: f64,
    /// CPU floor in force, percent of one CPU.
    pub cpu_floor_pct: f64,
    /// Transmit rate on the wire, bits per second, smoothed over about [`crate::entitlement::RATE_MEMORY_S`].
    pub rate_bps: f64,
    /// The last actuation period's rate, bits per second.
    pub period_bps: f64,
    /// Sending above its entitlement: the only state in which ceilings and caps apply.
    pub excess: bool,
    /// The lowest cap the guard allows while it is in excess, percent (learned).
    pub guard_cap: f64,
    /// Wire bits of the actuation period so far.
    pub(crate) bits: f64,
    /// The policy's last transmit limit and reason (what it would set without the guard).
    pub(crate) policy_tx: Option<(TxLimit, TxReason)>,
}

impl Entitled {
    /// Counts one interval's traffic: `bytes` and `packets` as the monitor counted them (a
    /// trace without bytes: `packets` full packets of `path_mtu`).
    pub(crate) fn count(&mut self, bytes: u64, packets: u64, path_mtu: u32, header_bytes: u32) {
        let payload = if bytes == 0 {
            packets as f64 * f64::from(path_mtu)
        } else {
            bytes as f64
        };
        self.bits += (payload + packets as f64 * f64::from(header_bytes)) * 8.0;
    }

    /// True when the VM sent within its entitlement (no ceiling or cap may apply).
    pub fn within(&self) -> bool {
        !self.excess
    }
}
