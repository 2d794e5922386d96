//! What the daemon turns and must put back: a VM's CPU cap (through the backend) and its
//! transmit limit (through the rate lever). One store and one actuator serve both
//! ([`crate::store`], [`crate::actuator`]).

use resex_backend::lever::RateLever;
use resex_backend::{BackendError, Hypervisor};
use resex_common::TxLimit;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;

/// A per-VM setting, by domain key.
pub trait Knob: Send + Sync + 'static {
    /// What is set.
    type Value: Clone + PartialEq + std::fmt::Debug + Serialize + DeserializeOwned + Send;
    /// The file in the state directory that records the original settings.
    const FILE: &'static str;
    /// What the knob is, in messages (`cap`, `transmit limit`).
    const WHAT: &'static str;
    /// Who sets it (recorded with each original: a record made by another backend or lever is
    /// left alone).
    fn kind(&self) -> &'static str;
    /// The domains that exist now (a record of one that is gone is dropped).
    fn live(&self) -> Result<HashSet<String>, BackendError>;
    /// The domain's present setting, exactly.
    fn save(&self, key: &str) -> Result<serde_json::Value, BackendError>;
    /// Sets a value.
    fn set(&self, key: &str, v: &Self::Value) -> Result<(), BackendError>;
    /// Puts back a saved setting.
    fn restore(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError>;
}

fn live_of(hv: &dyn Hypervisor) -> Result<HashSet<String>, BackendError> {
    Ok(hv.domains()?.into_iter().map(|d| d.key).collect())
}

/// CPU caps, through the backend.
#[derive(Clone)]
pub struct CapKnob(pub Arc<dyn Hypervisor>);

impl Knob for CapKnob {
    type Value = f64;
    const FILE: &'static str = "caps.json";
    const WHAT: &'static str = "cap";
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    fn live(&self) -> Result<HashSet<String>, BackendError> {
        live_of(&*self.0)
    }
    fn save(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        self.0.save_cap(key)
    }
    fn set(&self, key: &str, v: &f64) -> Result<(), BackendError> {
        self.0.set_cap(key, Some(*v))
    }
    fn restore(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError> {
        self.0.restore_cap(key, saved)
    }
}

/// Transmit limits, through the rate lever (domains listed by the backend).
#[derive(Clone)]
pub struct TxKnob {
    /// The lever.
    pub lever: Arc<dyn RateLever>,
    /// The backend (which domains exist).
    pub hv: Arc<dyn Hypervisor>,
}

impl Knob for TxKnob {
    type Value = TxLimit;
    const FILE: &'static str = "rates.json";
    const WHAT: &'static str = "transmit limit";
    fn kind(&self) -> &'static str {
        self.lever.kind()
    }
    fn live(&self) -> Result<HashSet<String>, BackendError> {
        live_of(&*self.hv)
    }
    fn save(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        self.lever.save(key)
    }
    fn set(&self, key: &str, v: &TxLimit) -> Result<(), BackendError> {
        self.lever.set(key, *v)
    }
    fn restore(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError> {
        self.lever.restore(key, saved)
    }
}
