//! Crash safety for every setting the daemon changes (caps, transmit limits): before the daemon
//! first touches a VM's setting it records the VM's original in `STATE_DIR/<file>` (written to
//! a temporary file, synced, renamed), and after each batch of changes it records what it
//! applied. Restoring puts every recorded VM back and forgets it. A restarted daemon restores
//! before anything else, so a `kill -9` in the middle of throttling leaves nothing throttled
//! once it runs again.

use crate::knob::Knob;
use resex_backend::BackendError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One VM's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record<V> {
    /// Its name when recorded.
    pub name: String,
    /// The backend (or lever) that set it.
    pub backend: String,
    /// The setting before the daemon touched it (backend-specific, exact).
    pub original: serde_json::Value,
    /// The value the daemon last applied (None: none yet, or it put the original back).
    pub current: Option<V>,
}

/// A cap record (`caps.json`).
pub type CapRecord = Record<f64>;

/// The store of one knob.
#[derive(Debug)]
pub struct Store<K: Knob> {
    path: PathBuf,
    records: BTreeMap<String, Record<K::Value>>,
    /// Records changed since the file was last written.
    dirty: bool,
}

/// The store of caps.
pub type CapStore = Store<crate::knob::CapKnob>;

/// The store could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// File I/O.
    #[error("state file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not our JSON.
    #[error("state file {path} is corrupt: {message} (move it aside to start afresh; the VMs it names may still be throttled)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Parser's message.
        message: String,
    },
    /// The backend refused.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl<K: Knob> Store<K> {
    /// Opens (or starts) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join(K::FILE);
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let records = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| StoreError::Corrupt {
                path: path.clone(),
                message: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(io(e)),
        };
        Ok(Self {
            path,
            records,
            dirty: false,
        })
    }

    /// The records.
    pub fn records(&self) -> &BTreeMap<String, Record<K::Value>> {
        &self.records
    }

    fn persist(&mut self) -> Result<(), StoreError> {
        let io = |source| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        let tmp = self.path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&serde_json::to_vec_pretty(&self.records).unwrap_or_default())
            .map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        self.dirty = false;
        Ok(())
    }

    /// Writes the records if a value changed since they were last written (the values in
    /// force, as applied: what `current` says after a crash).
    pub fn sync(&mut self) -> Result<(), StoreError> {
        if self.dirty {
            self.persist()?;
        }
        Ok(())
    }

    /// Sets a value, first recording the original setting if this VM has none recorded
    /// (written at once: a crash must find it); the value applied is recorded by the next
    /// [`Store::sync`].
    pub fn set(&mut self, knob: &K, key: &str, name: &str, v: &K::Value) -> Result<(), StoreError> {
        if !self.records.contains_key(key) {
            let original = knob.save(key)?;
            self.records.insert(
                key.to_owned(),
                Record {
                    name: name.to_owned(),
                    backend: knob.kind().to_owned(),
                    original,
                    current: None,
                },
            );
            self.persist()?;
        }
        knob.set(key, v)?;
        if let Some(r) = self.records.get_mut(key) {
            if r.current.as_ref() != Some(v) {
                r.current = Some(v.clone());
                self.dirty = true;
            }
        }
        Ok(())
    }

    /// Puts one VM back to its original setting and forgets it.
    pub fn restore(&mut self, knob: &K, key: &str) -> Result<bool, StoreError> {
        let Some(r) = self.records.get(key) else {
            return Ok(false);
        };
        knob.restore(key, &r.original)?;
        self.records.remove(key);
        self.persist()?;
        Ok(true)
    }

    /// Forgets a VM that no longer exists.
    pub fn forget(&mut self, key: &str) -> Result<(), StoreError> {
        if self.records.remove(key).is_some() {
            self.persist()?;
        }
        Ok(())
    }

    /// Restores every recorded VM that still exists (others are forgotten: a domain that is
    /// gone has no setting). Returns (restored, forgotten, failures).
    pub fn restore_all(&mut self, knob: &K) -> (usize, usize, Vec<String>) {
        if self.records.is_empty() {
            return (0, 0, Vec::new());
        }
        let live = knob.live().unwrap_or_default();
        let keys: Vec<String> = self.records.keys().cloned().collect();
        let (mut restored, mut forgotten, mut failed) = (0, 0, Vec::new());
        for k in keys {
            if self.records[&k].backend != knob.kind() {
                continue;
            }
            if !live.contains(&k) {
                let _ = self.forget(&k);
                forgotten += 1;
                continue;
            }
            match self.restore(knob, &k) {
                Ok(_) => restored += 1,
                Err(e) => failed.push(format!("{k}: {e}")),
            }
        }
        (restored, forgotten, failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knob::CapKnob;
    use resex_backend::{Channel, DomainInfo, Hypervisor};
    use resex_guestmem::GuestMemory;
    use std::sync::{Arc, Mutex};

    /// One domain whose cap is a number.
    #[derive(Default)]
    struct OneDomain {
        cap: Mutex<Option<f64>>,
    }

    impl Hypervisor for OneDomain {
        fn kind(&self) -> &'static str {
            "test"
        }
        fn domains(&self) -> Result<Vec<DomainInfo>, BackendError> {
            Ok(vec![DomainInfo {
                entitled_bps: None,
                cpu_floor_pct: None,
                key: "k".into(),
                id: 1,
                name: "vm".into(),
                vcpus: 1,
                ram_size: 1 << 20,
                weight: 1.0,
                sla_threshold: None,
            }])
        }
        fn cpu_time_ns(&self, _: &str) -> Result<u64, BackendError> {
            Ok(0)
        }
        fn memory(&self, k: &str) -> Result<Arc<dyn GuestMemory>, BackendError> {
            Err(BackendError::NoDomain(k.into()))
        }
        fn open_channel(&self, k: &str) -> Result<Channel, BackendError> {
            Err(BackendError::NoDomain(k.into()))
        }
        fn cap_mechanism(&self, _: &str) -> String {
            "a number".into()
        }
        fn save_cap(&self, _: &str) -> Result<serde_json::Value, BackendError> {
            Ok(serde_json::json!(*self.cap.lock().unwrap()))
        }
        fn set_cap(&self, _: &str, pct: Option<f64>) -> Result<(), BackendError> {
            *self.cap.lock().unwrap() = pct;
            Ok(())
        }
        fn restore_cap(&self, _: &str, saved: &serde_json::Value) -> Result<(), BackendError> {
            *self.cap.lock().unwrap() = saved.as_f64();
            Ok(())
        }
    }

    fn on_disk(dir: &Path) -> BTreeMap<String, CapRecord> {
        serde_json::from_slice(&std::fs::read(dir.join("caps.json")).unwrap()).unwrap()
    }

    fn knob<H: Hypervisor + 'static>(hv: H) -> (Arc<H>, CapKnob) {
        let hv = Arc::new(hv);
        (hv.clone(), CapKnob(hv))
    }

    #[test]
    fn the_file_records_the_cap_applied_last_not_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let (hv, k) = knob(OneDomain::default());
        let mut store = CapStore::open(dir.path()).unwrap();
        store.set(&k, "k", "vm", &77.8).unwrap();
        store.sync().unwrap();
        assert_eq!(on_disk(dir.path())["k"].current, Some(77.8));
        store.set(&k, "k", "vm", &10.0).unwrap();
        store.sync().unwrap();
        let rec = &on_disk(dir.path())["k"];
        assert_eq!(rec.current, Some(10.0), "what a crash would find");
        assert_eq!(
            rec.original,
            serde_json::Value::Null,
            "the setting before the first cap"
        );
        assert_eq!(*hv.cap.lock().unwrap(), Some(10.0));
        // A restarted daemon puts the original back.
        let (restored, forgotten, failed) = CapStore::open(dir.path()).unwrap().restore_all(&k);
        assert_eq!((restored, forgotten, failed.len()), (1, 0, 0));
        assert_eq!(*hv.cap.lock().unwrap(), None);
        assert!(on_disk(dir.path()).is_empty());
    }

    #[test]
    fn a_cap_the_backend_refused_is_not_recorded_as_applied() {
        struct Refuses(OneDomain);
        impl Hypervisor for Refuses {
            fn kind(&self) -> &'static str {
                "test"
            }
            fn domains(&self) -> Result<Vec<DomainInfo>, BackendError> {
                self.0.domains()
            }
            fn cpu_time_ns(&self, k: &str) -> Result<u64, BackendError> {
                self.0.cpu_time_ns(k)
            }
            fn memory(&self, k: &str) -> Result<Arc<dyn GuestMemory>, BackendError> {
                self.0.memory(k)
            }
            fn open_channel(&self, k: &str) -> Result<Channel, BackendError> {
                self.0.open_channel(k)
            }
            fn cap_mechanism(&self, k: &str) -> String {
                self.0.cap_mechanism(k)
            }
            fn save_cap(&self, k: &str) -> Result<serde_json::Value, BackendError> {
                self.0.save_cap(k)
            }
            fn set_cap(&self, _: &str, _: Option<f64>) -> Result<(), BackendError> {
                Err(BackendError::Unavailable("refused".into()))
            }
            fn restore_cap(&self, k: &str, s: &serde_json::Value) -> Result<(), BackendError> {
                self.0.restore_cap(k, s)
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let (_hv, k) = knob(Refuses(OneDomain::default()));
        let mut store = CapStore::open(dir.path()).unwrap();
        assert!(store.set(&k, "k", "vm", &30.0).is_err());
        store.sync().unwrap();
        assert_eq!(on_disk(dir.path())["k"].current, None);
    }
}
