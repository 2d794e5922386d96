//! The second lever: a VM's place in its NIC port's transmit scheduler (a guaranteed share and a
//! ceiling, [`TxLimit`]), which a CPU cap cannot replace: a cap cannot split a transfer that is
//! already posted. Real SR-IOV NICs schedule per VF (mlx5 vport QoS, set through devlink rate
//! or the legacy per-VF min/max rate); softhca schedules per guest port. Which VF belongs to
//! which VM comes from the backend (domain XML, PCI passthrough list, the scenario).

use crate::{BackendError, Hypervisor};
use resex_common::TxLimit;
use resex_proto::hca_admin::{ask, AdminRequest};
use serde::{Deserialize, Serialize};
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A rate lever, by domain key (as the [`crate::Hypervisor`] names domains).
pub trait RateLever: Send + Sync {
    /// `softhca`, `devlink`, `vf-rate`, `memory`, or `none`.
    fn kind(&self) -> &'static str;
    /// How the domain's transmit rate is enforced, for people; `None`: the domain has no
    /// lever (no VF known for it).
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
}

/// A lever for SR-IOV VFs by PCI address (devlink rate, or the legacy per-VF rate on the PF).
pub trait VfLever: Send + Sync {
    /// `devlink`, `vf-rate`, ...
    fn kind(&self) -> &'static str;
    /// How the VF's rate is enforced, for people; an error says why it cannot be.
    fn describe(&self, vf: &str) -> Result<String, BackendError>;
    /// The VF's present setting, exactly.
    fn save(&self, vf: &str) -> Result<serde_json::Value, BackendError>;
    /// Sets a limit.
    fn set(&self, vf: &str, tx: TxLimit) -> Result<(), BackendError>;
    /// Puts back a saved setting.
    fn restore(&self, vf: &str, saved: &serde_json::Value) -> Result<(), BackendError>;
}

/// The host's lever: each domain's VF from the backend, then softhca's scheduler for a guest
/// port or the VF lever for an SR-IOV VF. A domain without a VF has no lever (said once).
pub struct HostLever {
    hv: Arc<dyn Hypervisor>,
    pci: Option<Arc<dyn VfLever>>,
    told: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl HostLever {
    /// The lever for `hv`'s domains; `pci` serves SR-IOV VFs (`None`: they have no lever).
    pub fn new(hv: Arc<dyn Hypervisor>, pci: Option<Arc<dyn VfLever>>) -> Self {
        Self {
            hv,
            pci,
            told: Default::default(),
        }
    }

    fn vf(&self, key: &str) -> Result<Vf, BackendError> {
        self.hv.vf(key)?.ok_or_else(|| no_lever(key))
    }

    fn pci(&self, key: &str) -> Result<&Arc<dyn VfLever>, BackendError> {
        self.pci.as_ref().ok_or_else(|| {
            BackendError::Unavailable(format!(
                "no rate lever for VM {key}: its VF is an SR-IOV function and no VF lever is configured"
            ))
        })
    }

    /// Logs once per domain why it has no lever.
    fn tell(&self, key: &str, why: &str) {
        let mut t = self.told.lock().unwrap_or_else(|p| p.into_inner());
        if t.insert(key.to_owned()) {
            tracing::info!("{why}");
        }
    }
}

impl RateLever for HostLever {
    fn kind(&self) -> &'static str {
        "host"
    }

    fn describe(&self, key: &str) -> Option<String> {
        match self.vf(key) {
            Ok(Vf::Soft { vport, .. }) => Some(format!("softhca vport {vport}")),
            Ok(Vf::Pci { addr }) => match self.pci(key).and_then(|l| l.describe(&addr)) {
                Ok(d) => Some(d),
                Err(e) => {
                    self.tell(key, &e.to_string());
                    None
                }
            },
            Err(e) => {
                self.tell(key, &e.to_string());
                None
            }
        }
    }

    fn save(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        match self.vf(key)? {
            Vf::Soft { socket, vport } => {
                Ok(tx_json(soft(&socket, &AdminRequest::GetTx { vport })?))
            }
            Vf::Pci { addr } => self.pci(key)?.save(&addr),
        }
    }

    fn set(&self, key: &str, tx: TxLimit) -> Result<(), BackendError> {
        match self.vf(key)? {
            Vf::Soft { socket, vport } => {
                soft(&socket, &AdminRequest::SetTx { vport, tx }).map(drop)
            }
            Vf::Pci { addr } => self.pci(key)?.set(&addr, tx),
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
            Vf::Pci { addr } => self.pci(key)?.restore(&addr, saved),
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
    ask(&mut BufReader::new(r), &mut w, req)
        .map_err(|e| BackendError::Invalid(format!("{}: {e}", what())))
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
    serde_json::from_value(saved.clone())
        .map_err(|e| BackendError::Invalid(format!("saved transmit limit {saved}: {e}")))
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

    #[test]
    fn saved_limits_round_trip() {
        let t = TxLimit {
            share_bps: Some(1),
            max_bps: None,
        };
        assert_eq!(tx_of(&tx_json(t)).unwrap(), t);
        assert!(tx_of(&serde_json::json!("x")).is_err());
    }
}
