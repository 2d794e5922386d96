//! The second lever: a VM's place in its NIC port's transmit scheduler (a guaranteed share and a
//! ceiling, [`TxLimit`]), which a CPU cap cannot replace: a cap cannot split a transfer that is
//! already posted. Real SR-IOV NICs schedule per VF (mlx5 vport QoS, set through devlink rate
//! or the legacy per-VF min/max rate); softhca schedules per guest port. Which VF belongs to
//! which VM comes from the backend (domain XML, PCI passthrough list, the scenario).

use crate::{BackendError, Hypervisor};
use resex_common::TxLimit;
use resex_proto::hca_admin::{ask, AdminRequest};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A rate lever, by domain key (as the [`crate::Hypervisor`] names domains).
pub trait RateLever: Send + Sync {
    /// `softhca`, `devlink`, `vf-rate`, `memory`, or `none`.
    fn kind(&self) -> &'static str;
    /// How the domain's transmit rate is enforced, for people; `None`: the domain has no
    /// lever (no VF known for it, or one that cannot be set).
    fn describe(&self, key: &str) -> Option<String>;
    /// The domain's present setting, exactly, to put back later.
    fn save(&self, key: &str) -> Result<serde_json::Value, BackendError>;
    /// Sets a limit ([`TxLimit::NONE`] lifts any).
    fn set(&self, key: &str, tx: TxLimit) -> Result<(), BackendError>;
    /// Puts back a setting from [`RateLever::save`].
    fn restore(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError>;
}

/// Where a domain's transmit rate is scheduled: its VF, as the backend knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Vf {
    /// A guest port (vport) in softhca's scheduler, set through the embedded host's admin
    /// socket.
    Soft {
        /// The admin socket.
        socket: PathBuf,
        /// The guest port.
        vport: u32,
    },
    /// An SR-IOV virtual function, by its PCI address (`0000:03:00.2`).
    Pci {
        /// The VF's PCI address.
        addr: String,
    },
    /// A virtual function by its PF's devlink instance and its index: what a PCI VF resolves
    /// to, and how a VF that is no PCI device (netdevsim's) is named.
    Function {
        /// The PF's devlink instance, `BUS/DEVICE` (`pci/0000:03:00.0`,
        /// `netdevsim/netdevsim1`).
        devlink: String,
        /// The PF's network interface, for the legacy VF rate (default: the instance's first
        /// under sysfs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        netdev: Option<String>,
        /// The VF's index on its PF.
        vf: u32,
    },
}

impl std::fmt::Display for Vf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Vf::Soft { vport, .. } => write!(f, "softhca vport {vport}"),
            Vf::Pci { addr } => write!(f, "VF {addr}"),
            Vf::Function { devlink, vf, .. } => write!(f, "VF {vf} of {devlink}"),
        }
    }
}

/// A lever for SR-IOV VFs ([`Vf::Pci`], [`Vf::Function`]): devlink rate, or the legacy
/// per-VF rate on the PF ([`crate::vf::NetlinkLever`]).
pub trait VfLever: Send + Sync {
    /// `devlink`, `vf-rate`, `vf-auto`.
    fn kind(&self) -> &'static str;
    /// How the VF's rate is enforced, for people; an error says why it cannot be.
    fn describe(&self, vf: &Vf) -> Result<String, BackendError>;
    /// The VF's present setting, exactly.
    fn save(&self, vf: &Vf) -> Result<serde_json::Value, BackendError>;
    /// Sets a limit.
    fn set(&self, vf: &Vf, tx: TxLimit) -> Result<(), BackendError>;
    /// Puts back a saved setting.
    fn restore(&self, vf: &Vf, saved: &serde_json::Value) -> Result<(), BackendError>;
}

/// The host's lever: each domain's VF (the configured table's by name, else the backend's),
/// then softhca's scheduler for a guest port or the VF lever for an SR-IOV VF. A domain
/// without a VF has no lever (said once).
pub struct HostLever {
    hv: Arc<dyn Hypervisor>,
    vfs: Option<Arc<dyn VfLever>>,
    by_name: HashMap<String, Vf>,
    names: Mutex<HashMap<String, String>>,
    told: Mutex<std::collections::HashSet<String>>,
}

impl HostLever {
    /// The lever for `hv`'s domains; `vfs` serves SR-IOV VFs (`None`: they have no lever).
    pub fn new(hv: Arc<dyn Hypervisor>, vfs: Option<Arc<dyn VfLever>>) -> Self {
        Self {
            hv,
            vfs,
            by_name: HashMap::new(),
            names: Default::default(),
            told: Default::default(),
        }
    }

    /// VFs by domain name, for what the backend cannot see; they win over the backend's.
    pub fn with_names(mut self, by_name: HashMap<String, Vf>) -> Self {
        self.by_name = by_name;
        self
    }

    /// A domain's name (the backend's listing, remembered).
    fn name_of(&self, key: &str) -> Result<Option<String>, BackendError> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = names.get(key) {
            return Ok(Some(n.clone()));
        }
        for d in self.hv.domains()? {
            names.insert(d.key, d.name);
        }
        Ok(names.get(key).cloned())
    }

    fn vf(&self, key: &str) -> Result<Vf, BackendError> {
        self.vf_of(key)?.ok_or_else(|| no_lever(key))
    }

    /// The VM's VF; `None` when it has none.
    fn vf_of(&self, key: &str) -> Result<Option<Vf>, BackendError> {
        if !self.by_name.is_empty() {
            if let Some(v) = self.name_of(key)?.and_then(|n| self.by_name.get(&n)) {
                return Ok(Some(v.clone()));
            }
        }
        self.hv.vf(key)
    }

    fn pci(&self, key: &str) -> Result<&Arc<dyn VfLever>, BackendError> {
        self.vfs.as_ref().ok_or_else(|| {
            BackendError::Unavailable(format!(
                "no rate lever for VM {key}: its VF is an SR-IOV function and no VF lever is \
                 configured (resexd's [rates] vf_lever is \"none\")"
            ))
        })
    }

    /// Logs once per domain why it has no lever.
    /// Says once per VM why it has no rate lever: a warning when its VF cannot be driven, a
    /// note when it has no VF at all (a VM without a passed-through function is common).
    fn tell(&self, key: &str, why: &str, warn: bool) {
        let mut t = self.told.lock().unwrap_or_else(|p| p.into_inner());
        if t.insert(key.to_owned()) {
            if warn {
                tracing::warn!("{why}");
            } else {
                tracing::info!("{why}");
            }
        }
    }
}

impl RateLever for HostLever {
    fn kind(&self) -> &'static str {
        "host"
    }

    fn describe(&self, key: &str) -> Option<String> {
        match self.vf_of(key) {
            Ok(Some(Vf::Soft { vport, .. })) => Some(format!("softhca vport {vport}")),
            Ok(None) => {
                self.tell(key, &no_lever(key).to_string(), false);
                None
            }
            Ok(Some(vf)) => match self.pci(key) {
                Ok(l) => match l.describe(&vf) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        self.tell(key, &format!("no rate lever for VM {key}: {e}"), true);
                        None
                    }
                },
                Err(e) => {
                    self.tell(key, &e.to_string(), true);
                    None
                }
            },
            Err(e) => {
                self.tell(key, &e.to_string(), true);
                None
            }
        }
    }

    fn save(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        match self.vf(key)? {
            Vf::Soft { socket, vport } => {
                Ok(tx_json(soft(&socket, &AdminRequest::GetTx { vport })?))
            }
            vf => self.pci(key)?.save(&vf),
        }
    }

    fn set(&self, key: &str, tx: TxLimit) -> Result<(), BackendError> {
        match self.vf(key)? {
            Vf::Soft { socket, vport } => {
                soft(&socket, &AdminRequest::SetTx { vport, tx }).map(drop)
            }
            vf => self.pci(key)?.set(&vf, tx),
        }
    }

    fn restore(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError> {
        match self.vf(key)? {
            Vf::Soft { socket, vport } => soft(
                &socket,
                &AdminRequest::SetTx {
                    vport,
                    tx: tx_of(saved)?,
                },
            )
            .map(drop),
            vf => self.pci(key)?.restore(&vf, saved),
        }
    }
}

/// One request on softhca's admin socket.
fn soft(socket: &std::path::Path, req: &AdminRequest) -> Result<TxLimit, BackendError> {
    let what = || format!("softhca admin socket {}", socket.display());
    let s = UnixStream::connect(socket).map_err(|e| BackendError::io(what(), e))?;
    let timeout = Some(Duration::from_secs(2));
    s.set_read_timeout(timeout)
        .and_then(|()| s.set_write_timeout(timeout))
        .map_err(|e| BackendError::io(what(), e))?;
    let r = s.try_clone().map_err(|e| BackendError::io(what(), e))?;
    let mut w = s;
    ask(&mut BufReader::new(r), &mut w, req).map_err(|source| BackendError::Admin {
        socket: socket.to_owned(),
        source,
    })
}

/// No lever on this host: every domain is without one.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLever;

impl RateLever for NoLever {
    fn kind(&self) -> &'static str {
        "none"
    }
    fn describe(&self, _key: &str) -> Option<String> {
        None
    }
    fn save(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        Err(no_lever(key))
    }
    fn set(&self, key: &str, _tx: TxLimit) -> Result<(), BackendError> {
        Err(no_lever(key))
    }
    fn restore(&self, key: &str, _saved: &serde_json::Value) -> Result<(), BackendError> {
        Err(no_lever(key))
    }
}

/// The error of a domain without a lever.
pub fn no_lever(key: &str) -> BackendError {
    BackendError::Unavailable(format!("no rate lever for VM {key}"))
}

/// A limit as the JSON a lever saves (`{"share_bps":..,"max_bps":..}`), and back.
pub fn tx_json(tx: TxLimit) -> serde_json::Value {
    serde_json::to_value(tx).unwrap_or(serde_json::Value::Null)
}

/// The limit a saved setting holds.
pub fn tx_of(saved: &serde_json::Value) -> Result<TxLimit, BackendError> {
    serde_json::from_value(saved.clone()).map_err(|source| {
        crate::SavedError::TxLimit {
            saved: saved.clone(),
            source,
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_lever_says_so_for_every_call() {
        let l = NoLever;
        assert_eq!(l.describe("a"), None);
        let e = l.set("a", TxLimit::NONE).unwrap_err().to_string();
        assert_eq!(e, "no rate lever for VM a");
        assert!(l.save("a").is_err() && l.restore("a", &serde_json::Value::Null).is_err());
    }

    /// What a VF lever was asked, in order.
    #[derive(Default)]
    struct Asked(Mutex<Vec<String>>);

    impl VfLever for Asked {
        fn kind(&self) -> &'static str {
            "asked"
        }
        fn describe(&self, vf: &Vf) -> Result<String, BackendError> {
            Ok(format!("lever of {vf}"))
        }
        fn save(&self, vf: &Vf) -> Result<serde_json::Value, BackendError> {
            self.0.lock().unwrap().push(format!("save {vf}"));
            Ok(serde_json::json!(7))
        }
        fn set(&self, vf: &Vf, tx: TxLimit) -> Result<(), BackendError> {
            self.0.lock().unwrap().push(format!("set {vf} {tx}"));
            Ok(())
        }
        fn restore(&self, vf: &Vf, saved: &serde_json::Value) -> Result<(), BackendError> {
            self.0.lock().unwrap().push(format!("restore {vf} {saved}"));
            Ok(())
        }
    }

    #[test]
    fn vfs_by_name_win_and_a_vm_without_one_has_no_lever() {
        use crate::memory::{MemDomain, MemoryBackend};
        let mem = || Arc::new(resex_guestmem::VecMemory::new(4096));
        let mut a = MemDomain::new("vm-a", mem(), None);
        a.info.key = "uuid-a".into();
        let b = MemDomain::new("vm-b", mem(), None);
        let hv: Arc<dyn Hypervisor> = Arc::new(MemoryBackend::new(vec![a, b], Duration::ZERO));
        let table = HashMap::from([(
            "vm-a".to_owned(),
            Vf::Function {
                devlink: "netdevsim/netdevsim1".into(),
                netdev: None,
                vf: 0,
            },
        )]);
        let asked = Arc::new(Asked::default());
        let l = HostLever::new(hv.clone(), Some(asked.clone())).with_names(table.clone());
        assert_eq!(
            l.describe("uuid-a").as_deref(),
            Some("lever of VF 0 of netdevsim/netdevsim1"),
            "found by the domain's name, not its key"
        );
        let tx = TxLimit {
            share_bps: Some(500_000_000),
            max_bps: None,
            weight: None,
        };
        assert_eq!(l.save("uuid-a").unwrap(), serde_json::json!(7));
        l.set("uuid-a", tx).unwrap();
        l.restore("uuid-a", &serde_json::json!(7)).unwrap();
        assert_eq!(
            *asked.0.lock().unwrap(),
            [
                "save VF 0 of netdevsim/netdevsim1",
                "set VF 0 of netdevsim/netdevsim1 share 500.0Mbit",
                "restore VF 0 of netdevsim/netdevsim1 7"
            ]
        );
        assert_eq!(
            l.describe("vm-b"),
            None,
            "in no table, no VF from the backend"
        );
        let e = l.set("vm-b", tx).unwrap_err().to_string();
        assert_eq!(e, "no rate lever for VM vm-b");
        let none = HostLever::new(hv, None).with_names(table);
        assert_eq!(none.describe("uuid-a"), None);
        let e = none.set("uuid-a", tx).unwrap_err().to_string();
        assert!(e.contains("no VF lever is configured"), "{e}");
    }

    #[test]
    fn saved_limits_round_trip() {
        let t = TxLimit {
            share_bps: Some(1),
            max_bps: None,
            weight: None,
        };
        assert_eq!(tx_of(&tx_json(t)).unwrap(), t);
        assert!(matches!(
            tx_of(&serde_json::json!("x")),
            Err(BackendError::Saved(crate::SavedError::TxLimit { .. }))
        ));
    }
}
