//! The `local` backend: the embedded host's domains. The host publishes one JSON record per
//! running guest under `RUN_DIR/local/domains/`; the daemon lists them (checking that each
//! guest's process is alive), maps each guest's RAM file, reads CPU time and sets caps through
//! the handles the record names, and opens the registration channel (a Unix socket the guest's
//! agent listens on) - the same shape as libvirt's domains, sockets and cgroups.

use crate::cap::CapHandle;
use crate::cpu::CpuSource;
use crate::{BackendError, Channel, DomainInfo, Hypervisor};
use resex_guestmem::{FileMemory, GuestMemory};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What the embedded host publishes per guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainRecord {
    /// Domain id (unique on the host).
    pub id: u32,
    /// Name.
    pub name: String,
    /// The embedded host instance that runs it.
    pub host: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// The guest RAM file (file offset = guest-physical address).
    pub ram_file: PathBuf,
    /// RAM size, bytes.
    pub ram_size: u64,
    /// The guest's process.
    pub pid: u32,
    /// Where its CPU time is read.
    pub cpu: CpuSource,
    /// How it is capped.
    pub cap: CapHandle,
    /// Its agent's registration channel.
    pub channel: PathBuf,
    /// Its SLA threshold, when the scenario gives one.
    #[serde(default)]
    pub sla_threshold: Option<f64>,
    /// Its link weight.
    #[serde(default = "one")]
    pub weight: f64,
    /// Its VF: where its transmit rate is scheduled (the rate lever), if anywhere.
    #[serde(default)]
    pub vf: Option<crate::lever::Vf>,
    /// Its entitlement on the link, bits per second, when the scenario gives one.
    #[serde(default)]
    pub entitled_bps: Option<u64>,
    /// Its CPU floor, % of one CPU, when the scenario gives one.
    #[serde(default)]
    pub cpu_floor_pct: Option<f64>,
}

fn one() -> f64 {
    1.0
}

impl DomainRecord {
    /// The identity that survives a daemon restart.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.host, self.name, self.pid)
    }
}

/// The run directory: `$RESEX_RUN_DIR`, else `/run/resex` when writable (root), else
/// `$XDG_RUNTIME_DIR/resex`, else `/tmp/resex-UID`.
pub fn default_run_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RESEX_RUN_DIR") {
        return PathBuf::from(d);
    }
    let run = Path::new("/run");
    // SAFETY: geteuid has no preconditions and no side effects.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 && run.is_dir() {
        return run.join("resex");
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(x).join("resex");
    }
    PathBuf::from(format!("/tmp/resex-{uid}"))
}

/// Where records live under a run directory.
pub fn domains_dir(run: &Path) -> PathBuf {
    run.join("local").join("domains")
}

/// Publishes a record (atomically: written beside, then renamed).
pub fn publish(run: &Path, r: &DomainRecord) -> Result<PathBuf, BackendError> {
    let dir = domains_dir(run);
    std::fs::create_dir_all(&dir)
        .map_err(|e| BackendError::io(format!("creating {}", dir.display()), e))?;
    let path = dir.join(format!("{}-{}.json", r.host, r.name));
    let tmp = dir.join(format!(".{}-{}.json.tmp", r.host, r.name));
    let text = serde_json::to_vec_pretty(r).map_err(BackendError::Json)?;
    std::fs::write(&tmp, text)
        .map_err(|e| BackendError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &path)
        .map_err(|e| BackendError::io(format!("renaming to {}", path.display()), e))?;
    Ok(path)
}

fn alive(pid: u32) -> bool {
    // Signal 0 only checks that the process exists.
    crate::cap::signal(pid, 0)
}

/// The local backend.
pub struct LocalBackend {
    run: PathBuf,
    records: Mutex<HashMap<String, DomainRecord>>,
    mems: Mutex<HashMap<String, Arc<dyn GuestMemory>>>,
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalBackend({})", self.run.display())
    }
}

impl LocalBackend {
    /// A backend reading records under `run`.
    pub fn new(run: &Path) -> Self {
        Self {
            run: run.to_owned(),
            records: Mutex::new(HashMap::new()),
            mems: Mutex::new(HashMap::new()),
        }
    }

    fn record(&self, key: &str) -> Result<DomainRecord, BackendError> {
        let known = self
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned();
        match known {
            Some(r) => Ok(r),
            None => {
                self.domains()?;
                self.records
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(key)
                    .cloned()
                    .ok_or_else(|| BackendError::NoDomain(key.to_owned()))
            }
        }
    }

    /// A domain's published record (SLA threshold, weight, channel...).
    pub fn domain_record(&self, key: &str) -> Result<DomainRecord, BackendError> {
        self.record(key)
    }
}

impl Hypervisor for LocalBackend {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn domains(&self) -> Result<Vec<DomainInfo>, BackendError> {
        let dir = domains_dir(&self.run);
        let mut found = HashMap::new();
        match std::fs::read_dir(&dir) {
            Ok(rd) => {
                for e in rd.flatten() {
                    let p = e.path();
                    if p.extension().is_none_or(|x| x != "json")
                        || p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                    {
                        continue;
                    }
                    let Ok(text) = std::fs::read(&p) else {
                        continue;
                    };
                    match serde_json::from_slice::<DomainRecord>(&text) {
                        Ok(r) if alive(r.pid) => {
                            found.insert(r.key(), r);
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!("ignoring {}: {e}", p.display()),
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(BackendError::io(format!("listing {}", dir.display()), e)),
        }
        let mut out: Vec<DomainInfo> = found
            .values()
            .map(|r| DomainInfo {
                key: r.key(),
                id: r.id,
                name: r.name.clone(),
                vcpus: r.vcpus,
                ram_size: r.ram_size,
                weight: r.weight,
                sla_threshold: r.sla_threshold,
                entitled_bps: r.entitled_bps,
                cpu_floor_pct: r.cpu_floor_pct,
            })
            .collect();
        out.sort_by_key(|d| d.id);
        let mut mems = self.mems.lock().unwrap_or_else(|p| p.into_inner());
        mems.retain(|k, _| found.contains_key(k));
        *self.records.lock().unwrap_or_else(|p| p.into_inner()) = found;
        Ok(out)
    }

    fn cpu_time_ns(&self, key: &str) -> Result<u64, BackendError> {
        self.record(key)?.cpu.read_ns()
    }

    fn memory(&self, key: &str) -> Result<Arc<dyn GuestMemory>, BackendError> {
        if let Some(m) = self.mems.lock().unwrap_or_else(|p| p.into_inner()).get(key) {
            return Ok(m.clone());
        }
        let r = self.record(key)?;
        let m: Arc<dyn GuestMemory> = Arc::new(FileMemory::open(&r.ram_file)?);
        if m.size() < r.ram_size {
            return Err(BackendError::RamFile {
                vm: r.name.clone(),
                path: r.ram_file.clone(),
                size: m.size(),
                want: r.ram_size,
            });
        }
        self.mems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_owned(), m.clone());
        Ok(m)
    }

    fn open_channel(&self, key: &str) -> Result<Channel, BackendError> {
        crate::connect_unix_channel(&self.record(key)?.channel)
    }

    fn cap_mechanism(&self, key: &str) -> String {
        self.record(key)
            .map(|r| r.cap.describe())
            .unwrap_or_else(|e| e.to_string())
    }

    fn vf(&self, key: &str) -> Result<Option<crate::lever::Vf>, BackendError> {
        Ok(self.record(key)?.vf)
    }

    fn save_cap(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        self.record(key)?.cap.save()
    }

    fn set_cap(&self, key: &str, pct: Option<f64>) -> Result<(), BackendError> {
        self.record(key)?.cap.set(pct)
    }

    fn restore_cap(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError> {
        self.record(key)?.cap.restore(saved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_live_published_domains_only() {
        let run = tempfile::tempdir().unwrap();
        let ram = run.path().join("g.ram");
        FileMemory::create(&ram, 1 << 20).unwrap();
        let mut r = DomainRecord {
            entitled_bps: None,
            cpu_floor_pct: None,
            id: 1,
            name: "g".into(),
            host: "h1".into(),
            vcpus: 1,
            ram_file: ram,
            ram_size: 1 << 20,
            pid: std::process::id(),
            cpu: CpuSource::Proc(std::process::id()),
            cap: CapHandle::Sigstop(std::process::id()),
            channel: run.path().join("none.sock"),
            sla_threshold: None,
            weight: 1.0,
            vf: None,
        };
        publish(run.path(), &r).unwrap();
        r.name = "dead".into();
        r.pid = u32::MAX - 1;
        publish(run.path(), &r).unwrap();
        std::fs::write(domains_dir(run.path()).join("junk.json"), "{").unwrap();
        let b = LocalBackend::new(run.path());
        let d = b.domains().unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].name, "g");
        assert!(b.cpu_time_ns(&d[0].key).unwrap() > 0);
        assert_eq!(b.memory(&d[0].key).unwrap().size(), 1 << 20);
        let e = b.open_channel(&d[0].key).err().unwrap().to_string();
        assert!(e.contains("none.sock"), "{e}");
        assert!(matches!(
            b.cpu_time_ns("nope"),
            Err(BackendError::NoDomain(_))
        ));
    }
}
