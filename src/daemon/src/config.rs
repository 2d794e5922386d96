//! The daemon's configuration file (TOML; every key optional, command-line flags override).
//!
//! ```toml
//! backend = "local"                          # local | kvm | xen
//! policy = "/etc/resex/policies/ioshares.toml"  # omit: monitor only, no caps
//! run_dir = "/run/resex"                     # where the local backend's records are
//! connect = "qemu:///system"                 # the kvm backend's libvirt URI
//! state_dir = "/var/lib/resex"               # caps.json: original cap settings (crash safety)
//! api_socket = "/run/resex/resexd.sock"      # the local API (mode 0600)
//! journal = "/var/log/resex/journal.csv"     # optional usage + caps journal
//! metrics = "127.0.0.1:9464"                 # optional Prometheus endpoint (/metrics)
//! scan_budget = 16384                        # ring entries walked per VM per tick
//! discovery_ms = 100                         # how often domains are listed
//! snapshot_ms = 100                          # how often the API snapshot is refreshed
//! cpu_every = 10                             # read CPU time every 10 ms (off the loop)
//! realtime = true                            # SCHED_FIFO for the control loop when root
//!
//! [link]                                     # the host's RDMA port: link utilisation is
//! gbps = 100                                 # what the VMs send (counted by IBMon) over this
//! header_bytes = 58                          # rate; default 8 Gb/s, 58 (softhca's testbed)
//!
//! [rates]                                    # the rate lever of SR-IOV VFs
//! vf_lever = "auto"                          # auto | devlink | legacy | none
//! [rates.vfs]                                # VFs by VM name (wins over the backend's)
//! web-1 = "0000:03:00.2"                     # a PCI VF
//! db = { kind = "function", devlink = "pci/0000:03:00.0", vf = 3 }  # a PF's VF by index
//!
//! [periods]                                # the period detector (docs/mlcompat.md)
//! window = 8192                              # intervals of history per VM
//!
//! [vms.web-1]                                # what the admin grants a VM (wins over the
//! entitlement = "2Gbit"                      # backend's): its guaranteed transmit rate
//! cpu_floor = 20                             # and the lowest CPU cap, percent of one CPU
//! ```
//!
//! A VM without an `entitlement` gets an equal split of what the configured ones leave of
//! the link; the entitlement is the one input that decides how much a VM is protected
//! (docs/entitlements.md).
//!
//! `vf_lever`: `devlink` sets a VF's rate leaf (`devlink port function rate`, switchdev
//! mode), `legacy` the PF's per-VF rate (`ip link set PF vf N min_tx_rate max_tx_rate`),
//! `auto` devlink where the VF has a rate leaf and legacy elsewhere, `none` no VF lever.

use resex_backend::lever::Vf;
use resex_backend::vf::devlink::Handle;
use resex_backend::vf::sysfs::pci_addr;
use resex_backend::vf::Mechanism;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

mod periods;
pub use periods::PeriodsConfig;

/// The `[fleet]` section: the fleet's settings in a build with the fleet.
#[cfg(feature = "fleet")]
pub type FleetSection = resex_fleet::FleetConfig;
/// The `[fleet]` section: in a build without the fleet, read only to be refused.
#[cfg(not(feature = "fleet"))]
pub type FleetSection = toml::Table;

/// What a resexd built without the fleet says to a `[fleet]` section or `--fleet`.
pub const NO_FLEET: &str = "this resexd was built without the fleet: rebuild it with `--features fleet` (Debian: protobuf-compiler to build, etcd-server to run)";

#[cfg(feature = "fleet")]
fn check_fleet(f: &FleetSection) -> Result<(), ConfigError> {
    f.validate().map_err(ConfigError::Fleet)
}

#[cfg(not(feature = "fleet"))]
fn check_fleet(_: &FleetSection) -> Result<(), ConfigError> {
    Err(ConfigError::NoFleet)
}

/// The configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Backend name.
    #[serde(default = "default_backend")]
    pub backend: String,
    /// The policy file; `None` monitors without pricing caps.
    #[serde(default)]
    pub policy: Option<PathBuf>,
    /// The local backend's run directory.
    #[serde(default)]
    pub run_dir: Option<PathBuf>,
    /// The kvm backend's libvirt URI.
    #[serde(default = "default_connect")]
    pub connect: String,
    /// Where the cap records live.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// The API socket.
    #[serde(default)]
    pub api_socket: Option<PathBuf>,
    /// The journal.
    #[serde(default)]
    pub journal: Option<PathBuf>,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (e.g. "127.0.0.1:9464").
    #[serde(default)]
    pub metrics: Option<String>,
    /// Ring entries per VM per tick.
    #[serde(default = "default_budget")]
    pub scan_budget: u32,
    /// Domain listing period, ms.
    #[serde(default = "default_discovery")]
    pub discovery_ms: u64,
    /// API snapshot period, ms.
    #[serde(default = "default_snapshot")]
    pub snapshot_ms: u64,
    /// CPU time is read every this many milliseconds, on the sampler's thread (each read is
    /// a backend call per VM); the percentage measured applies until the next read.
    #[serde(default = "default_cpu_every")]
    pub cpu_every: u32,
    /// Run the control loop under SCHED_FIFO when allowed (root), so a busy host does not
    /// delay its ticks.
    #[serde(default = "yes")]
    pub realtime: bool,
    /// The host's RDMA port, for link utilisation.
    #[serde(default)]
    pub link: Option<LinkConfig>,
    /// The rate lever of SR-IOV VFs.
    #[serde(default)]
    pub rates: RatesConfig,
    /// `[fleet]`: join a fleet through etcd (needs a build with `--features fleet`; without
    /// it the section is refused).
    #[serde(default)]
    pub fleet: Option<FleetSection>,
    /// `[vms.NAME]`: what the admin grants each VM, by name.
    #[serde(default)]
    pub vms: BTreeMap<String, Grant>,
    /// `[periods]`: the period detector.
    #[serde(default)]
    pub periods: PeriodsConfig,
}

/// `[vms.NAME]`: what the admin grants one VM.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Its guaranteed transmit rate (`2Gbit`, `500Mbit`, or bits per second).
    #[serde(default, deserialize_with = "bits")]
    pub entitlement: Option<u64>,
    /// The lowest CPU cap a policy may give it, percent of one CPU.
    #[serde(default)]
    pub cpu_floor: Option<f64>,
}

fn bits<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    resex_common::deserialize_bits(d).map(Some)
}

impl Grant {
    /// Lays the grant over what the backend says of the domain.
    pub fn apply(&self, d: &mut resex_backend::DomainInfo) {
        if let Some(e) = self.entitlement {
            d.entitled_bps = Some(e);
        }
        if let Some(f) = self.cpu_floor {
            d.cpu_floor_pct = Some(f);
        }
    }
}

/// The rate lever of SR-IOV VFs: which mechanism, and VFs by VM name.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RatesConfig {
    /// Which mechanism sets VF rates.
    #[serde(default)]
    pub vf_lever: VfLeverChoice,
    /// VFs by VM name, for what the backend cannot see (they win over the backend's): a PCI
    /// address, or a table as a local domain record's `vf`.
    #[serde(default)]
    pub vfs: BTreeMap<String, VfEntry>,
}

/// `[rates] vf_lever`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum VfLeverChoice {
    /// devlink rate where the VF has a rate leaf, else the legacy VF rate.
    #[default]
    Auto,
    /// devlink rate only.
    Devlink,
    /// The legacy VF rate only.
    Legacy,
    /// No VF lever: VMs with SR-IOV VFs have no rate lever.
    None,
}

impl VfLeverChoice {
    /// The mechanism (`None` for `none`).
    pub fn mechanism(self) -> Option<Mechanism> {
        match self {
            VfLeverChoice::Auto => Some(Mechanism::Auto),
            VfLeverChoice::Devlink => Some(Mechanism::Devlink),
            VfLeverChoice::Legacy => Some(Mechanism::Legacy),
            VfLeverChoice::None => None,
        }
    }
}

/// One VF of `[rates.vfs]`: `"0000:03:00.2"` (a PCI VF) or a table (`{ kind = "pci", addr =
/// ".." }`, `{ kind = "function", devlink = "BUS/DEV", vf = N, netdev = ".." }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfEntry(pub Vf);

impl<'de> Deserialize<'de> for VfEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let v = toml::Value::deserialize(d)?;
        let vf = match v {
            toml::Value::String(s) => Vf::Pci {
                addr: pci_addr(&s).map_err(D::Error::custom)?,
            },
            t @ toml::Value::Table(_) => Vf::deserialize(t).map_err(D::Error::custom)?,
            other => {
                return Err(D::Error::custom(format!(
                    "a VF is a PCI address or a table, not `{other}`"
                )))
            }
        };
        match &vf {
            Vf::Pci { addr } => {
                pci_addr(addr).map_err(D::Error::custom)?;
            }
            Vf::Function { devlink, .. } if Handle::parse(devlink).is_none() => {
                return Err(D::Error::custom(format!(
                    "`{devlink}` is not a devlink instance (BUS/DEVICE, e.g. pci/0000:03:00.0)"
                )))
            }
            _ => {}
        }
        Ok(VfEntry(vf))
    }
}

/// The host's RDMA port.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Its rate, Gb/s.
    pub gbps: f64,
    /// Bytes on the wire per packet besides the payload.
    #[serde(default = "default_header")]
    pub header_bytes: u32,
}

impl LinkConfig {
    /// The configuration of a link known by its rate and header bytes.
    pub fn of(bits_per_sec: u64, header_bytes: u32) -> Self {
        Self {
            gbps: bits_per_sec as f64 / 1e9,
            header_bytes,
        }
    }
}

fn default_header() -> u32 {
    resex_core::HostLink::default().header_bytes
}

fn default_cpu_every() -> u32 {
    10
}
fn yes() -> bool {
    true
}

fn default_connect() -> String {
    "qemu:///system".to_owned()
}

fn default_backend() -> String {
    "local".into()
}
fn default_budget() -> u32 {
    resex_ibmon::monitor::DEFAULT_SCAN_BUDGET
}
fn default_discovery() -> u64 {
    100
}
fn default_snapshot() -> u64 {
    100
}

impl Default for Config {
    fn default() -> Self {
        toml::from_str("").unwrap_or_else(|_| unreachable!("every key has a default"))
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unreadable.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not TOML, or a key this config does not have.
    #[error("{0}")]
    Parse(#[source] toml::de::Error),
    /// A backend this daemon does not have.
    #[error("backend `{name}` is unknown (local, kvm, xen)")]
    UnknownBackend {
        /// The name given.
        name: String,
    },
    /// A link rate that is not in (0, 100000] Gb/s.
    #[error("link.gbps = {gbps} must be a rate in Gb/s above 0")]
    LinkRate {
        /// The rate given, Gb/s.
        gbps: f64,
    },
    /// A `[fleet]` section that cannot work.
    #[cfg(feature = "fleet")]
    #[error("[fleet]: {0}")]
    Fleet(#[source] resex_fleet::FleetError),
    /// A `[fleet]` section (or `--fleet`) in a resexd built without the fleet.
    #[error("{NO_FLEET}")]
    NoFleet,
    /// A VM entitled to nothing.
    #[error("[vms.{vm}] entitlement must be above 0 (omit it for an equal split)")]
    Entitlement {
        /// The VM.
        vm: String,
    },
    /// A VM's CPU floor that is not a percent of one CPU.
    #[error("[vms.{vm}] cpu_floor = {cpu_floor} must be a percent of one CPU, 0 or more")]
    CpuFloor {
        /// The VM.
        vm: String,
        /// The floor given, percent.
        cpu_floor: f64,
    },
    /// A budget or a period of 0.
    #[error(
        "{setting} is 0: scan_budget, discovery_ms, snapshot_ms and cpu_every must be above 0"
    )]
    Zero {
        /// The setting.
        setting: &'static str,
    },
    /// A `[periods]` setting out of range.
    #[error("[periods] {0}")]
    Periods(&'static str),
    /// A config file that is not valid, with the file's path.
    #[error("{}: {source}", path.display())]
    File {
        /// File.
        path: PathBuf,
        /// Why.
        source: Box<ConfigError>,
    },
}

impl Config {
    /// Parses and checks config text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(ConfigError::Parse)?;
        if !matches!(c.backend.as_str(), "local" | "kvm" | "xen") {
            return Err(ConfigError::UnknownBackend {
                name: c.backend.clone(),
            });
        }
        if let Some(l) = &c.link {
            if !(l.gbps.is_finite() && l.gbps > 0.0 && l.gbps <= 100_000.0) {
                return Err(ConfigError::LinkRate { gbps: l.gbps });
            }
        }
        if let Some(f) = &c.fleet {
            check_fleet(f)?;
        }
        for (name, g) in &c.vms {
            if g.entitlement == Some(0) {
                return Err(ConfigError::Entitlement { vm: name.clone() });
            }
            if let Some(f) = g.cpu_floor {
                if !(f.is_finite() && (0.0..=100_000.0).contains(&f)) {
                    return Err(ConfigError::CpuFloor {
                        vm: name.clone(),
                        cpu_floor: f,
                    });
                }
            }
        }
        c.periods.check().map_err(ConfigError::Periods)?;
        for (setting, zero) in [
            ("scan_budget", c.scan_budget == 0),
            ("discovery_ms", c.discovery_ms == 0),
            ("snapshot_ms", c.snapshot_ms == 0),
            ("cpu_every", c.cpu_every == 0),
        ] {
            if zero {
                return Err(ConfigError::Zero { setting });
            }
        }
        Ok(c)
    }

    /// Reads a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| ConfigError::File {
            path: path.to_owned(),
            source: Box::new(e),
        })
    }

    /// The run directory in force.
    pub fn run_dir(&self) -> PathBuf {
        self.run_dir
            .clone()
            .unwrap_or_else(resex_backend::local::default_run_dir)
    }

    /// The state directory in force (`/var/lib/resex` as root, else under the run directory).
    pub fn state_dir(&self) -> PathBuf {
        if let Some(d) = &self.state_dir {
            return d.clone();
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            PathBuf::from("/var/lib/resex")
        } else {
            self.run_dir().join("state")
        }
    }

    /// The link in force.
    pub fn link(&self) -> resex_core::HostLink {
        match &self.link {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Some(l) => resex_core::HostLink {
                bits_per_sec: (l.gbps * 1e9) as u64,
                header_bytes: l.header_bytes,
            },
            None => resex_core::HostLink::default(),
        }
    }

    /// `[rates.vfs]` as the lever takes it.
    pub fn vfs_by_name(&self) -> HashMap<String, Vf> {
        self.rates
            .vfs
            .iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect()
    }

    /// The API socket in force.
    pub fn api_socket(&self) -> PathBuf {
        self.api_socket
            .clone()
            .unwrap_or_else(|| self.run_dir().join("resexd.sock"))
    }
}

#[cfg(test)]
mod tests;
