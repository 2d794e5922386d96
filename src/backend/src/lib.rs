//! How the daemon sees a hypervisor: the [`Hypervisor`] trait (list domains, CPU time, guest
//! memory, the registration channel, caps) and its backends.
//!
//! - [`local`], the embedded host's domains (guest processes with RAM files), discovered from
//!   the records the host publishes.
//! - [`cap`], cap mechanisms for processes: cgroup v2 `cpu.max`, cgroup v1 CFS quota, and a
//!   SIGSTOP/SIGCONT duty cycle.
//! - [`kvm`], libvirt's domains (feature `libvirt`): `global_quota` caps, `cpuTime`, the shared
//!   RAM file, a virtio-serial registration channel.
//! - [`memory`], domains whose RAM is memory in this process, with a delay or a gate on every
//!   call: the daemon's tests and benchmark of a slow or hung backend.
//! - [`cpu`], CPU-time sources for processes: cgroup v1 `cpuacct.usage`, cgroup v2 `cpu.stat`,
//!   `/proc/PID/task/*/schedstat`.
//!
//! - [`lever`], the second lever: a VM's transmit share and ceiling ([`lever::RateLever`]).
//! - [`error`], the typed cases of [`BackendError`]: a saved setting that is not ours, a domain's
//!   XML that cannot be used.
//!
//! A cap is a percent of one physical CPU (Xen's unit); `None` is uncapped.

pub mod cap;
pub mod cpu;
pub mod error;
pub mod kvm;
pub mod lever;
pub mod local;
pub mod memory;
pub mod vf;
pub mod xen;

pub use error::{SavedError, XmlError};
use resex_guestmem::GuestMemory;
use std::io::{BufRead, Write};
use std::sync::Arc;

/// One domain as a backend lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainInfo {
    /// Identity that survives a daemon restart (a UUID, or host + name + pid).
    pub key: String,
    /// Small id for people.
    pub id: u32,
    /// Name.
    pub name: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Guest RAM size, bytes.
    pub ram_size: u64,
    /// Its share weight for a weighted link split (1 unless configured).
    pub weight: f64,
    /// Its own SLA threshold (fraction), when configured.
    pub sla_threshold: Option<f64>,
    /// Its entitlement on the link, bits per second, when configured (default: an equal
    /// split).
    pub entitled_bps: Option<u64>,
    /// Its CPU floor, % of one CPU, when configured (default: the policy's floor).
    pub cpu_floor_pct: Option<f64>,
}

/// Guest RAM the kvm and xen backends read (guest-physical addresses from 0, below the PCI
/// hole): all of it up to 2 GiB, else the first 2 GiB. On QEMU's `q35`
/// machine RAM above 2 GiB (2.75 GiB when smaller) and on `pc` above 3.5 GiB is placed above
/// 4 GiB, where file offset and guest-physical address part; 2 GiB is below the hole on both.
pub fn lowmem(ram: u64) -> u64 {
    ram.min(2 << 30)
}

/// A registration channel session: read and write halves.
pub type Channel = (Box<dyn BufRead + Send>, Box<dyn Write + Send>);

/// A channel session on the Unix socket at `path` (writes time out after 2 s: a guest that
/// stops reading cannot hold a daemon thread).
pub fn connect_unix_channel(path: &std::path::Path) -> Result<Channel, BackendError> {
    let s = std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| BackendError::io(format!("connecting to {}", path.display()), e))?;
    s.set_write_timeout(Some(std::time::Duration::from_secs(2)))
        .map_err(|e| BackendError::io("socket timeout", e))?;
    let rd = s
        .try_clone()
        .map_err(|e| BackendError::io("cloning the channel socket", e))?;
    Ok((Box::new(std::io::BufReader::new(rd)), Box::new(s)))
}

/// What can go wrong in a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The domain is not (or no longer) there.
    #[error("no domain {0}")]
    NoDomain(String),
    /// The backend cannot run on this machine (one line, saying why).
    #[error("{0}")]
    Unavailable(String),
    /// An operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Guest memory could not be mapped.
    #[error(transparent)]
    Mem(#[from] resex_guestmem::MemError),
    /// A kernel or hypervisor value that does not parse (a cgroup file, a pid file, a xenstore
    /// count).
    #[error("{file}: `{text}` is not {expected}")]
    Unparsable {
        /// Where it was read (a file's name or path, a xenstore path).
        file: String,
        /// What was there (trimmed).
        text: String,
        /// What it should be (`a number`, `a pid`, ...).
        expected: &'static str,
    },
    /// A kernel file without the key it should have.
    #[error("{file} has no {key}")]
    MissingKey {
        /// The file.
        file: &'static str,
        /// The key.
        key: &'static str,
    },
    /// A cap that is not a positive number of percent.
    #[error("cap {pct}% is not a positive number")]
    BadCap {
        /// The cap asked for.
        pct: f64,
    },
    /// A saved setting that cannot be put back.
    #[error(transparent)]
    Saved(#[from] SavedError),
    /// A domain's XML that cannot be read or prepared.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// A VF, its address or its lever that cannot work (boxed: a kernel refusal is large).
    #[error(transparent)]
    Vf(Box<vf::VfError>),
    /// A libvirt call failed.
    #[error("{call}: {message}")]
    Libvirt {
        /// The call, or what it was for.
        call: &'static str,
        /// libvirt's message.
        message: String,
    },
    /// softhca's admin socket refused or failed.
    #[error("softhca admin socket {}: {source}", socket.display())]
    Admin {
        /// The socket.
        socket: std::path::PathBuf,
        /// Why.
        source: resex_proto::hca_admin::AdminError,
    },
    /// A record or a setting that does not encode as JSON.
    #[error("{0}")]
    Json(serde_json::Error),
    /// A guest's RAM file smaller than its record says.
    #[error("{vm}: RAM file {} is {size} bytes, the record says {want}", path.display())]
    RamFile {
        /// The VM.
        vm: String,
        /// Its RAM file.
        path: std::path::PathBuf,
        /// The file's size, bytes.
        size: u64,
        /// The record's RAM size, bytes.
        want: u64,
    },
    /// A xenstore path with a NUL byte (no C string holds it).
    #[error("xenstore path {path:?} has a NUL byte")]
    XenstorePath {
        /// The path.
        path: String,
    },
}

impl From<vf::VfError> for BackendError {
    fn from(e: vf::VfError) -> Self {
        BackendError::Vf(Box::new(e))
    }
}

impl BackendError {
    /// An I/O error with context.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        BackendError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A hypervisor as the daemon uses it. Methods take `&self`: the control loop, the discovery
/// thread and the registration threads share one backend.
pub trait Hypervisor: Send + Sync {
    /// `local`, `kvm` or `xen`.
    fn kind(&self) -> &'static str;
    /// The running domains.
    fn domains(&self) -> Result<Vec<DomainInfo>, BackendError>;
    /// Total CPU time the domain has used, ns.
    fn cpu_time_ns(&self, key: &str) -> Result<u64, BackendError>;
    /// The domain's guest-physical memory.
    fn memory(&self, key: &str) -> Result<Arc<dyn GuestMemory>, BackendError>;
    /// Opens a session on the domain's registration channel.
    fn open_channel(&self, key: &str) -> Result<Channel, BackendError>;
    /// How caps are enforced on this domain, for people (`cgroup v1 cpu.cfs_quota_us, 10 ms`).
    fn cap_mechanism(&self, key: &str) -> String;
    /// The domain's present cap setting, exactly, to put back later.
    fn save_cap(&self, key: &str) -> Result<serde_json::Value, BackendError>;
    /// Sets a cap (percent of one physical CPU) or lifts it.
    fn set_cap(&self, key: &str, pct: Option<f64>) -> Result<(), BackendError>;
    /// Puts back a setting from [`Hypervisor::save_cap`].
    fn restore_cap(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError>;
    /// Where the domain's transmit rate is scheduled (its VF), if it has one.
    fn vf(&self, key: &str) -> Result<Option<lever::Vf>, BackendError> {
        let _ = key;
        Ok(None)
    }
    /// A rate lever of the backend's own, when it has one that [`lever::HostLever`] (VFs from
    /// [`Hypervisor::vf`]) is not.
    fn rate_lever(self: Arc<Self>) -> Option<Arc<dyn lever::RateLever>> {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_ram_below_the_hole_is_read() {
        assert_eq!(super::lowmem(128 << 20), 128 << 20);
        assert_eq!(super::lowmem(8 << 30), 2 << 30);
    }
}
