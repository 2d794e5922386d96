//! Crash safety for caps: before the daemon first touches a VM's cap it records the VM's original
//! setting in `STATE_DIR/caps.json` (written to a temporary file, synced, renamed). Restoring puts
//! every recorded VM back and forgets it. A restarted daemon restores before anything else, so a
//! `kill -9` in the middle of throttling leaves nothing throttled once it runs again.

use resex_backend::{BackendError, Hypervisor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One VM's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapRecord {
    /// Its name when recorded.
    pub name: String,
    /// The backend that set it.
    pub backend: String,
    /// The setting before the daemon touched it (backend-specific, exact).
    pub original: serde_json::Value,
    /// The cap the daemon last set (percent; None: it put the original back).
    pub current: Option<f64>,
}

/// The store.
#[derive(Debug)]
pub struct CapStore {
    path: PathBuf,
    records: BTreeMap<String, CapRecord>,
    /// Records changed since the file was last written.
    dirty: bool,
}

/// The store could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// File I/O.
    #[error("cap store {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not our JSON.
    #[error("cap store {path} is corrupt: {message} (move it aside to start afresh; the VMs it names may still be capped)")]
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

impl CapStore {
    /// Opens (or starts) the store in `dir`.
    pub fn open(dir: &Path) -> Result<CapStore, StoreError> {
        let path = dir.join("caps.json");
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
        Ok(CapStore {
            path,
            records,
            dirty: false,
        })
    }

    /// The records.
    pub fn records(&self) -> &BTreeMap<String, CapRecord> {
        &self.records
    }

    fn persist(&self) -> Result<(), StoreError> {
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
        Ok(())
    }

    /// Writes the records if a cap changed since they were last written (the caps in force,
    /// as applied: what `current` says after a crash).
    pub fn sync(&mut self) -> Result<(), StoreError> {
        if self.dirty {
            self.persist()?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Sets a cap, first recording the original setting if this VM has none recorded (written
    /// at once: a crash must find it); the cap applied is recorded by the next
    /// [`CapStore::sync`].
    pub fn set(
        &mut self,
        hv: &dyn Hypervisor,
        key: &str,
        name: &str,
        pct: f64,
    ) -> Result<(), StoreError> {
        if !self.records.contains_key(key) {
            let original = hv.save_cap(key)?;
            self.records.insert(
                key.to_owned(),
                CapRecord {
                    name: name.to_owned(),
                    backend: hv.kind().to_owned(),
                    original,
                    current: None,
                },
            );
            self.persist()?;
        }
        hv.set_cap(key, Some(pct))?;
        if let Some(r) = self.records.get_mut(key) {
            if r.current != Some(pct) {
                r.current = Some(pct);
                self.dirty = true;
            }
        }
        Ok(())
    }

    /// Puts one VM back to its original setting and forgets it.
    pub fn restore(&mut self, hv: &dyn Hypervisor, key: &str) -> Result<bool, StoreError> {
        let Some(r) = self.records.get(key) else {
            return Ok(false);
        };
        hv.restore_cap(key, &r.original)?;
        self.records.remove(key);
        self.persist()?;
        self.dirty = false;
        Ok(true)
    }

    /// Forgets a VM that no longer exists.
    pub fn forget(&mut self, key: &str) -> Result<(), StoreError> {
        if self.records.remove(key).is_some() {
            self.persist()?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Restores every recorded VM that still exists on `hv` (others are forgotten: a domain
    /// that is gone has no cap). Returns (restored, forgotten, failures).
    pub fn restore_all(&mut self, hv: &dyn Hypervisor) -> (usize, usize, Vec<String>) {
        let live: std::collections::HashSet<String> = hv
            .domains()
            .map(|d| d.into_iter().map(|d| d.key).collect())
            .unwrap_or_default();
        let keys: Vec<String> = self.records.keys().cloned().collect();
        let (mut restored, mut forgotten, mut failed) = (0, 0, Vec::new());
        for k in keys {
            let backend = self.records[&k].backend.clone();
            if backend != hv.kind() {
                continue;
            }
            if !live.contains(&k) {
                let _ = self.forget(&k);
                forgotten += 1;
                continue;
            }
            match self.restore(hv, &k) {
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
    use resex_backend::{BackendError, Channel, DomainInfo};
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

    #[test]
    fn the_file_records_the_cap_applied_last_not_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let hv = OneDomain::default();
        let mut store = CapStore::open(dir.path()).unwrap();
        store.set(&hv, "k", "vm", 77.8).unwrap();
        store.sync().unwrap();
        assert_eq!(on_disk(dir.path())["k"].current, Some(77.8));
        store.set(&hv, "k", "vm", 10.0).unwrap();
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
        let (restored, forgotten, failed) = CapStore::open(dir.path()).unwrap().restore_all(&hv);
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
                Err(BackendError::Invalid("refused".into()))
            }
            fn restore_cap(&self, k: &str, s: &serde_json::Value) -> Result<(), BackendError> {
                self.0.restore_cap(k, s)
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let hv = Refuses(OneDomain::default());
        let mut store = CapStore::open(dir.path()).unwrap();
        assert!(store.set(&hv, "k", "vm", 30.0).is_err());
        store.sync().unwrap();
        assert_eq!(on_disk(dir.path())["k"].current, None);
    }
}
