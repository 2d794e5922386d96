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
        Ok(CapStore { path, records })
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

    /// Sets a cap, first recording the original setting if this VM has none recorded.
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
                    current: Some(pct),
                },
            );
            self.persist()?;
        } else if let Some(r) = self.records.get_mut(key) {
            r.current = Some(pct);
        }
        hv.set_cap(key, Some(pct))?;
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
        Ok(true)
    }

    /// Forgets a VM that no longer exists.
    pub fn forget(&mut self, key: &str) -> Result<(), StoreError> {
        if self.records.remove(key).is_some() {
            self.persist()?;
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
