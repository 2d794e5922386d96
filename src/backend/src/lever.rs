//! The second lever: a VM's place in its NIC port's transmit scheduler (a guaranteed share and a
//! ceiling, [`TxLimit`]), which a CPU cap cannot replace: a cap cannot split a transfer that is
//! already posted. Real SR-IOV NICs schedule per VF (mlx5 vport QoS, set through devlink rate
//! or the legacy per-VF min/max rate); softhca schedules per guest port. Which VF belongs to
//! which VM comes from the backend (domain XML, PCI passthrough list, the scenario).

use crate::BackendError;
use resex_common::TxLimit;

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
