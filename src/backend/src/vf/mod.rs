//! The rate lever of real SR-IOV NICs ([`NetlinkLever`], a [`VfLever`]): a VF's transmit
//! share and ceiling in its NIC's eswitch scheduler, set through the kernel.
//!
//! - [`devlink`]: devlink rate (`devlink port function rate set DEV/PORT tx_share S tx_max M`),
//!   the VF's rate leaf on its eswitch port; needs the eswitch in switchdev mode (mlx5 since
//!   Linux 5.14; netdevsim).
//! - [`legacy`]: the per-VF rate on the PF (`ip link set PF vf N min_tx_rate S max_tx_rate M`,
//!   `IFLA_VF_RATE`), in whole Mbit/s; legacy eswitch mode (mlx5, ixgbe/i40e/ice max only, ...).
//! - `auto`: devlink where the VF has an eswitch port with a rate leaf, else legacy.
//! - [`sysfs`]: a VF's PCI address to its PF, index and netdev.
//! - [`netlink`]: one request and its answers on a netlink socket, with the kernel's
//!   extended-ack message in every refusal.
//!
//! Every kernel refusal is one line naming the VF, the mechanism and the attribute. Nothing
//! shells out; no C library is linked.

pub mod devlink;
pub mod legacy;
pub mod netlink;
pub mod sysfs;

use crate::lever::{Vf, VfLever};
use crate::BackendError;
use devlink::{Attr, Handle};
use netlink::NetlinkError;
use resex_common::TxLimit;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Which mechanism sets VF rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mechanism {
    /// devlink rate where the VF has a rate leaf, else the legacy VF rate.
    Auto,
    /// devlink rate only.
    Devlink,
    /// The legacy VF rate only.
    Legacy,
}

/// A VF as the mechanisms address it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// How messages name it.
    pub label: String,
    /// Its PF's devlink instance.
    pub devlink: Handle,
    /// Its PF's network interface (the legacy mechanism's), when it has one.
    pub pf_netdev: Option<String>,
    /// Its index on the PF.
    pub vf: u32,
    /// Its PF's PCI function number, when it is a PCI device.
    pub pf_number: Option<u16>,
}

/// Resolves a VF (sysfs under `root` for PCI addresses and for a PF's netdev).
pub fn target(vf: &Vf, root: &Path) -> Result<Target, BackendError> {
    match vf {
        Vf::Pci { addr } => {
            let p = sysfs::resolve_pci(root, addr)?;
            Ok(Target {
                label: format!("VF {} (VF {} of PF {})", p.addr, p.index, p.pf),
                devlink: Handle {
                    bus: "pci".into(),
                    dev: p.pf.clone(),
                },
                pf_netdev: p.pf_netdevs.into_iter().next(),
                vf: p.index,
                pf_number: Some(p.pf_number),
            })
        }
        Vf::Function {
            devlink,
            netdev,
            vf,
        } => {
            let h = Handle::parse(devlink).ok_or_else(|| VfError::NotDevlink {
                text: devlink.clone(),
            })?;
            let pf_netdev = netdev.clone().or_else(|| {
                let dir = root.join("bus").join(&h.bus).join("devices").join(&h.dev);
                sysfs::netdevs(&dir).into_iter().next()
            });
            Ok(Target {
                label: format!("VF {vf} of {h}"),
                devlink: h,
                pf_netdev,
                vf: *vf,
                pf_number: None,
            })
        }
        Vf::Soft { vport, .. } => Err(VfError::Soft { vport: *vport }.into()),
    }
}

/// A setting as saved (kernel units, exactly, to be put back as they were).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "lever", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Saved {
    /// A devlink rate leaf, bytes per second.
    Devlink {
        /// `tx_share`.
        tx_share: u64,
        /// `tx_max`.
        tx_max: u64,
    },
    /// The legacy VF rate, Mbit/s.
    VfRate {
        /// `min_tx_rate`.
        min_tx_rate: u32,
        /// `max_tx_rate`.
        max_tx_rate: u32,
    },
}

/// devlink's unit from ours: bits/s to bytes/s, rounded to the nearest byte (at least 1: a
/// setting stays a setting); `None` is 0, no setting.
pub fn bytes_per_sec(bits: Option<u64>) -> u64 {
    bits.map_or(0, |b| (b / 8 + u64::from(b % 8 >= 4)).max(1))
}

/// A rate the legacy VF rate (whole Mbit/s in a `u32`) cannot say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LegacyRateError {
    /// Under half a Mbit/s: it would round to 0, which lifts the limit.
    #[error("{} is below 1 Mbit/s, the legacy VF rate's unit", fmt_bits(*.0))]
    BelowUnit(u64),
    /// Over `u32::MAX` Mbit/s.
    #[error("{} is beyond the legacy VF rate's range", fmt_bits(*.0))]
    BeyondRange(u64),
}

/// The legacy unit from ours: bits/s to whole Mbit/s, rounded to the nearest; `None` is 0.
/// Below 0.5 Mbit/s cannot be said (0 would lift the limit) and is refused.
pub fn mbit_per_sec(bits: Option<u64>) -> Result<u32, LegacyRateError> {
    let Some(b) = bits else { return Ok(0) };
    let m = b / 1_000_000 + u64::from(b % 1_000_000 >= 500_000);
    match u32::try_from(m) {
        Ok(0) => Err(LegacyRateError::BelowUnit(b)),
        Ok(m) => Ok(m),
        Err(_) => Err(LegacyRateError::BeyondRange(b)),
    }
}

/// Bits per second for people: `500Mbit`, `500.5Mbit`, `2Gbit`, `64kbit`, `999bit`.
pub fn fmt_bits(b: u64) -> String {
    let trim = |x: f64| {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    };
    if b >= 1_000_000_000 {
        format!("{}Gbit", trim(b as f64 / 1e9))
    } else if b >= 1_000_000 {
        format!("{}Mbit", trim(b as f64 / 1e6))
    } else if b >= 1_000 {
        format!("{}kbit", trim(b as f64 / 1e3))
    } else {
        format!("{b}bit")
    }
}

/// A kernel request on a VF's behalf, as a refusal names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetlinkOp {
    /// Opening a generic netlink socket for devlink.
    OpenDevlink,
    /// Listing devlink ports.
    ListPorts,
    /// Reading the rate leaf of the VF's eswitch port, to find it.
    FindRateLeaf {
        /// The PF's devlink instance.
        devlink: Handle,
        /// The VF's port.
        port: u32,
    },
    /// Reading the rate leaf.
    RateGet {
        /// The PF's devlink instance.
        devlink: Handle,
        /// The VF's port.
        port: u32,
    },
    /// Setting one attribute of the rate leaf.
    RateSet {
        /// The PF's devlink instance.
        devlink: Handle,
        /// The VF's port.
        port: u32,
        /// `tx_share` or `tx_max`.
        attr: &'static str,
        /// Its value, bytes per second (0: none).
        bytes_per_sec: u64,
    },
    /// Opening an rtnetlink socket.
    OpenRtnetlink,
    /// Reading the PF's link (its VFs' rates).
    GetLink {
        /// The PF's network interface.
        pf: String,
    },
    /// Setting the legacy VF rate.
    SetVfRate {
        /// The PF's network interface.
        pf: String,
        /// The VF's index.
        vf: u32,
        /// `min_tx_rate`, Mbit/s.
        min_tx_rate: u32,
        /// `max_tx_rate`, Mbit/s.
        max_tx_rate: u32,
    },
}

impl std::fmt::Display for NetlinkOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetlinkOp::OpenDevlink => f.write_str("opening devlink (generic netlink)"),
            NetlinkOp::ListPorts => f.write_str("listing devlink ports"),
            NetlinkOp::FindRateLeaf { devlink, port } => {
                write!(f, "devlink port {devlink}/{port} has no rate leaf")
            }
            NetlinkOp::RateGet { devlink, port } => write!(f, "devlink rate get {devlink}/{port}"),
            NetlinkOp::RateSet {
                devlink,
                port,
                attr,
                bytes_per_sec,
            } => {
                write!(f, "devlink rate set {devlink}/{port} {attr} ")?;
                if *bytes_per_sec == 0 {
                    f.write_str("0 (none)")?;
                } else {
                    write!(
                        f,
                        "{bytes_per_sec} B/s ({})",
                        fmt_bits(bytes_per_sec.saturating_mul(8))
                    )?;
                }
                f.write_str(" refused")
            }
            NetlinkOp::OpenRtnetlink => f.write_str("opening rtnetlink"),
            NetlinkOp::GetLink { pf } => write!(f, "RTM_GETLINK {pf}"),
            NetlinkOp::SetVfRate {
                pf,
                vf,
                min_tx_rate,
                max_tx_rate,
            } => write!(
                f,
                "IFLA_VF_RATE on {pf} vf {vf} min_tx_rate {min_tx_rate} max_tx_rate \
                 {max_tx_rate} (Mbit/s) refused"
            ),
        }
    }
}

/// A VF, its address or its lever that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum VfError {
    /// Not `BUS/DEVICE`.
    #[error("`{text}` is not a devlink instance (BUS/DEVICE, e.g. pci/0000:03:00.0)")]
    NotDevlink {
        /// The text given.
        text: String,
    },
    /// Not `DDDD:BB:SS.F`.
    #[error("`{text}` is not a PCI address (DDDD:BB:SS.F, e.g. 0000:03:00.2)")]
    NotPci {
        /// The text given.
        text: String,
    },
    /// A softhca vport given where an SR-IOV VF is needed.
    #[error("softhca vport {vport} is not an SR-IOV VF")]
    Soft {
        /// The vport.
        vport: u32,
    },
    /// The kernel refused a request (other than with `EOPNOTSUPP`: that is unavailable).
    #[error("{label}: {op}: {source}")]
    Refused {
        /// The VF, as messages name it.
        label: String,
        /// The request.
        op: NetlinkOp,
        /// The kernel's refusal.
        source: NetlinkError,
    },
    /// A saved setting of the other mechanism than the one chosen.
    #[error("{label}: {saved:?} is a setting of the other mechanism")]
    OtherMechanism {
        /// The VF, as messages name it.
        label: String,
        /// The setting.
        saved: Saved,
    },
    /// A rate the legacy VF rate cannot say.
    #[error("{label}: {source}")]
    LegacyRate {
        /// The VF, as messages name it.
        label: String,
        /// Why.
        source: LegacyRateError,
    },
}

/// A kernel refusal as one line: `LABEL: WHAT: ERROR`, unavailable for `EOPNOTSUPP`.
fn refused(label: &str, op: NetlinkOp, e: NetlinkError) -> BackendError {
    match e.errno() {
        Some(libc::EOPNOTSUPP) | None => BackendError::Unavailable(format!("{label}: {op}: {e}")),
        Some(_) => VfError::Refused {
            label: label.to_owned(),
            op,
            source: e,
        }
        .into(),
    }
}

/// Where the chosen mechanism sets the VF's rate.
enum Chosen {
    Devlink { sock: devlink::Socket, port: u32 },
    Legacy { sock: legacy::Socket, pf: String },
}

/// The lever of real SR-IOV NICs, over netlink.
#[derive(Debug, Clone)]
pub struct NetlinkLever {
    mech: Mechanism,
    sysfs: PathBuf,
}

impl NetlinkLever {
    /// A lever using `mech`, reading the real `/sys`.
    pub fn new(mech: Mechanism) -> Self {
        Self::with_sysfs(mech, Path::new(sysfs::SYSFS))
    }

    /// A lever reading sysfs under `root`.
    pub fn with_sysfs(mech: Mechanism, root: &Path) -> Self {
        Self {
            mech,
            sysfs: root.to_owned(),
        }
    }

    fn devlink(&self, t: &Target) -> Result<Chosen, BackendError> {
        let open = |e| refused(&t.label, NetlinkOp::OpenDevlink, e);
        let mut sock = devlink::Socket::open().map_err(open)?;
        let ports = sock
            .ports()
            .map_err(|e| refused(&t.label, NetlinkOp::ListPorts, e))?;
        let port = devlink::find_vf_port(&ports, &t.devlink, t.vf, t.pf_number)
            .map(|p| p.index)
            .ok_or_else(|| {
                BackendError::Unavailable(format!(
                    "{}: {} has no eswitch port for VF {} (devlink rate needs the eswitch in \
                     switchdev mode: devlink dev eswitch set {} mode switchdev)",
                    t.label, t.devlink, t.vf, t.devlink
                ))
            })?;
        sock.rate(&t.devlink, port).map_err(|e| {
            refused(
                &t.label,
                NetlinkOp::FindRateLeaf {
                    devlink: t.devlink.clone(),
                    port,
                },
                e,
            )
        })?;
        Ok(Chosen::Devlink { sock, port })
    }

    fn legacy(&self, t: &Target) -> Result<Chosen, BackendError> {
        let pf = t.pf_netdev.clone().ok_or_else(|| {
            BackendError::Unavailable(format!(
                "{}: its PF ({}) has no network interface for the legacy VF rate",
                t.label, t.devlink
            ))
        })?;
        let sock =
            legacy::Socket::open().map_err(|e| refused(&t.label, NetlinkOp::OpenRtnetlink, e))?;
        Ok(Chosen::Legacy { sock, pf })
    }

    fn choose(&self, vf: &Vf) -> Result<(Target, Chosen), BackendError> {
        let t = target(vf, &self.sysfs)?;
        let c = match self.mech {
            Mechanism::Devlink => self.devlink(&t)?,
            Mechanism::Legacy => self.legacy(&t)?,
            Mechanism::Auto => match self.devlink(&t) {
                Ok(c) => c,
                Err(d) => {
                    tracing::debug!("{d}: the legacy VF rate instead");
                    self.legacy(&t).map_err(|l| {
                        BackendError::Unavailable(format!("{d}; and the legacy VF rate: {l}"))
                    })?
                }
            },
        };
        Ok((t, c))
    }

    fn read(t: &Target, c: &mut Chosen) -> Result<Saved, BackendError> {
        match c {
            Chosen::Devlink { sock, port } => {
                let r = sock.rate(&t.devlink, *port).map_err(|e| {
                    refused(
                        &t.label,
                        NetlinkOp::RateGet {
                            devlink: t.devlink.clone(),
                            port: *port,
                        },
                        e,
                    )
                })?;
                Ok(Saved::Devlink {
                    tx_share: r.tx_share,
                    tx_max: r.tx_max,
                })
            }
            Chosen::Legacy { sock, pf } => {
                match sock
                    .rate(pf, t.vf)
                    .map_err(|e| refused(&t.label, NetlinkOp::GetLink { pf: pf.clone() }, e))?
                {
                    Ok(r) => Ok(Saved::VfRate {
                        min_tx_rate: r.min,
                        max_tx_rate: r.max,
                    }),
                    Err(n) => Err(BackendError::Unavailable(format!(
                        "{}: {pf} lists {n} VFs and not VF {} (or its driver reports no rate)",
                        t.label, t.vf
                    ))),
                }
            }
        }
    }

    fn write(t: &Target, c: &mut Chosen, to: Saved) -> Result<(), BackendError> {
        match (c, to) {
            (Chosen::Devlink { sock, port }, Saved::Devlink { tx_share, tx_max }) => {
                let now = sock.rate(&t.devlink, *port).map_err(|e| {
                    refused(
                        &t.label,
                        NetlinkOp::RateGet {
                            devlink: t.devlink.clone(),
                            port: *port,
                        },
                        e,
                    )
                })?;
                // One attribute per request, ordered so that no step has a share above the
                // ceiling: the ceiling first when the new share would exceed the old one.
                let max_first = now.tx_max != 0 && tx_share > now.tx_max;
                let mut steps = [("tx_share", tx_share), ("tx_max", tx_max)];
                if max_first {
                    steps.reverse();
                }
                for (name, v) in steps {
                    let a = if name == "tx_share" {
                        Attr::TxShare(v)
                    } else {
                        Attr::TxMax(v)
                    };
                    sock.set(&t.devlink, *port, a).map_err(|e| {
                        refused(
                            &t.label,
                            NetlinkOp::RateSet {
                                devlink: t.devlink.clone(),
                                port: *port,
                                attr: name,
                                bytes_per_sec: v,
                            },
                            e,
                        )
                    })?;
                }
                Ok(())
            }
            (
                Chosen::Legacy { sock, pf },
                Saved::VfRate {
                    min_tx_rate,
                    max_tx_rate,
                },
            ) => {
                let r = legacy::VfRate {
                    min: min_tx_rate,
                    max: max_tx_rate,
                };
                sock.set(pf, t.vf, r).map_err(|e| {
                    refused(
                        &t.label,
                        NetlinkOp::SetVfRate {
                            pf: pf.clone(),
                            vf: t.vf,
                            min_tx_rate,
                            max_tx_rate,
                        },
                        e,
                    )
                })
            }
            (Chosen::Devlink { .. }, s) | (Chosen::Legacy { .. }, s) => {
                Err(VfError::OtherMechanism {
                    label: t.label.clone(),
                    saved: s,
                }
                .into())
            }
        }
    }
}

impl VfLever for NetlinkLever {
    fn kind(&self) -> &'static str {
        match self.mech {
            Mechanism::Auto => "vf-auto",
            Mechanism::Devlink => "devlink",
            Mechanism::Legacy => "vf-rate",
        }
    }

    fn describe(&self, vf: &Vf) -> Result<String, BackendError> {
        let (t, c) = self.choose(vf)?;
        Ok(match c {
            Chosen::Devlink { port, .. } => {
                format!("devlink rate {}/{port} ({})", t.devlink, t.label)
            }
            Chosen::Legacy { pf, .. } => {
                format!("VF rate on {pf} vf {} (IFLA_VF_RATE, {})", t.vf, t.label)
            }
        })
    }

    fn save(&self, vf: &Vf) -> Result<serde_json::Value, BackendError> {
        let (t, mut c) = self.choose(vf)?;
        let s = Self::read(&t, &mut c)?;
        serde_json::to_value(s).map_err(BackendError::Json)
    }

    fn set(&self, vf: &Vf, tx: TxLimit) -> Result<(), BackendError> {
        let (t, mut c) = self.choose(vf)?;
        let to = match c {
            Chosen::Devlink { .. } => Saved::Devlink {
                tx_share: bytes_per_sec(tx.share_bps),
                tx_max: bytes_per_sec(tx.max_bps),
            },
            Chosen::Legacy { .. } => {
                let m = |b| {
                    mbit_per_sec(b).map_err(|source| {
                        BackendError::from(VfError::LegacyRate {
                            label: t.label.clone(),
                            source,
                        })
                    })
                };
                Saved::VfRate {
                    min_tx_rate: m(tx.share_bps)?,
                    max_tx_rate: m(tx.max_bps)?,
                }
            }
        };
        Self::write(&t, &mut c, to)
    }

    fn restore(&self, vf: &Vf, saved: &serde_json::Value) -> Result<(), BackendError> {
        let s: Saved =
            serde_json::from_value(saved.clone()).map_err(|source| crate::SavedError::VfRate {
                saved: saved.clone(),
                source,
            })?;
        let t = target(vf, &self.sysfs)?;
        // Put back through the mechanism that saved it, whatever is chosen now.
        let mut c = match s {
            Saved::Devlink { .. } => self.devlink(&t)?,
            Saved::VfRate { .. } => self.legacy(&t)?,
        };
        // Already so (a setting the kernel refused changed nothing): nothing to write, and no
        // second refusal to report.
        if Self::read(&t, &mut c)? == s {
            return Ok(());
        }
        Self::write(&t, &mut c, s)
    }
}

#[cfg(test)]
mod tests;
