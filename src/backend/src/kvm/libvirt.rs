//! The kvm backend over libvirt (feature `libvirt`; Debian: libvirt-dev).

use super::xml::{DomainXml, AGENT_CHANNEL, CHANNEL_SNIPPET, MEMORY_SNIPPET};
use super::PERIOD_US;
use crate::lowmem;
use crate::{BackendError, Channel, DomainInfo, Hypervisor};
use resex_guestmem::{FileMemory, GuestMemory};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use virt::connect::Connect;
use virt::domain::Domain;

/// A domain's mapped RAM and the QEMU process it belongs to.
type Mapped = (u32, Arc<dyn GuestMemory>);

/// Domains of a libvirt connection (`qemu:///system` by default).
pub struct KvmBackend {
    conn: Connect,
    uri: String,
    /// Mapped guest RAM by key (UUID), with the QEMU pid it belongs to.
    mems: Mutex<HashMap<String, Mapped>>,
}

impl std::fmt::Debug for KvmBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KvmBackend({})", self.uri)
    }
}

fn lv(call: &'static str) -> impl FnOnce(virt::error::Error) -> BackendError {
    move |e| BackendError::Libvirt {
        call,
        message: e.message().to_owned(),
    }
}

impl KvmBackend {
    /// Connects to libvirt at `uri`.
    pub fn connect(uri: &str) -> Result<Self, BackendError> {
        let conn = Connect::open(Some(uri)).map_err(|e| {
            BackendError::Unavailable(format!(
                "cannot connect to libvirt at {uri}: {} (is libvirtd running?)",
                e.message()
            ))
        })?;
        Ok(Self {
            conn,
            uri: uri.to_owned(),
            mems: Mutex::new(HashMap::new()),
        })
    }

    fn domain(&self, key: &str) -> Result<Domain, BackendError> {
        let d = self
            .conn
            .lookup_domain_by_uuid_string(key)
            .map_err(|_| BackendError::NoDomain(key.to_owned()))?;
        if !d.is_active().unwrap_or(false) {
            return Err(BackendError::NoDomain(key.to_owned()));
        }
        Ok(d)
    }

    fn xml(&self, d: &Domain) -> Result<DomainXml, BackendError> {
        DomainXml::parse(&d.xml_desc(0).map_err(lv("reading the domain XML"))?)
    }

    /// The QEMU process of a running domain (libvirt's pid file).
    fn qemu_pid(name: &str) -> Result<u32, BackendError> {
        let path = format!("/run/libvirt/qemu/{name}.pid");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| BackendError::io(format!("reading {path} (QEMU's pid)"), e))?;
        text.trim().parse().map_err(|_| BackendError::Unparsable {
            file: path.clone(),
            text: text.trim().to_owned(),
            expected: "a pid",
        })
    }
}

impl Hypervisor for KvmBackend {
    fn kind(&self) -> &'static str {
        "kvm"
    }

    fn domains(&self) -> Result<Vec<DomainInfo>, BackendError> {
        let flags = virt::sys::VIR_CONNECT_LIST_DOMAINS_ACTIVE;
        let doms = self
            .conn
            .list_all_domains(flags)
            .map_err(lv("listing domains"))?;
        let mut out = Vec::with_capacity(doms.len());
        for d in doms {
            // A domain that stops while being listed is skipped, not an error.
            let (Ok(key), Ok(x)) = (d.uuid_string(), self.xml(&d)) else {
                continue;
            };
            out.push(DomainInfo {
                entitled_bps: None,
                cpu_floor_pct: None,
                key,
                id: d.id().unwrap_or(0),
                name: x.name.clone(),
                vcpus: x.vcpus.max(1),
                ram_size: lowmem(x.memory),
                weight: 1.0,
                sla_threshold: None,
            });
        }
        out.sort_by_key(|d| d.id);
        Ok(out)
    }

    fn cpu_time_ns(&self, key: &str) -> Result<u64, BackendError> {
        let d = self.domain(key)?;
        // virDomainGetCPUStats' total is the cgroup's count in ns (`cpu.time` of `virsh
        // domstats`); virDomainGetInfo's comes from /proc in 10 ms ticks, too coarse for a
        // 100 ms window. The latter is the fallback where the former is not supported.
        if let Ok(v) = d.cpu_stats(-1, 1, 0) {
            if let Some(t) = v.first().and_then(|s| s.cpu_time) {
                return Ok(t);
            }
        }
        Ok(d.info().map_err(lv("virDomainGetInfo"))?.cpu_time)
    }

    fn memory(&self, key: &str) -> Result<Arc<dyn GuestMemory>, BackendError> {
        let d = self.domain(key)?;
        let x = self.xml(&d)?;
        let pid = Self::qemu_pid(&x.name)?;
        let mut mems = self.mems.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((p, m)) = mems.get(key) {
            if *p == pid {
                return Ok(m.clone());
            }
        }
        if !x.shared_file_memory {
            return Err(BackendError::Unavailable(format!(
                "domain {}: guest RAM is not a shared file the host can read: add \
                 {MEMORY_SNIPPET} to its definition (or run `resex kvm prepare {}`) and restart it",
                x.name, x.name
            )));
        }
        let path = super::ramfile::find(pid, x.memory)?;
        let m: Arc<dyn GuestMemory> = Arc::new(FileMemory::open(&path)?);
        mems.insert(key.to_owned(), (pid, m.clone()));
        Ok(m)
    }

    fn open_channel(&self, key: &str) -> Result<Channel, BackendError> {
        let d = self.domain(key)?;
        let x = self.xml(&d)?;
        let Some(path) = x.channel_path else {
            return Err(BackendError::Unavailable(format!(
                "domain {}: no virtio-serial channel `{AGENT_CHANNEL}`: add {CHANNEL_SNIPPET} \
                 to its <devices> (or run `resex kvm prepare {}`)",
                x.name, x.name
            )));
        };
        crate::connect_unix_channel(std::path::Path::new(&path))
    }

    fn vf(&self, key: &str) -> Result<Option<crate::lever::Vf>, BackendError> {
        // The domain's first network VF among its passthrough PCI functions.
        let x = self.xml(&self.domain(key)?)?;
        let root = std::path::Path::new(crate::vf::sysfs::SYSFS);
        Ok(crate::vf::sysfs::pick_vf(root, &x.pci_passthrough)
            .map(|addr| crate::lever::Vf::Pci { addr }))
    }

    fn cap_mechanism(&self, _key: &str) -> String {
        format!(
            "libvirt global_quota (cgroup CFS), period {} ms (longer under 10%)",
            PERIOD_US / 1000
        )
    }

    fn save_cap(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        let s = self
            .domain(key)?
            .scheduler_parameters()
            .map_err(lv("virDomainGetSchedulerParameters"))?;
        Ok(serde_json::json!({
            "global_period": s.global_bw.period,
            "global_quota": s.global_bw.quota,
        }))
    }

    fn set_cap(&self, key: &str, pct: Option<f64>) -> Result<(), BackendError> {
        let (period, quota) = super::bandwidth_us(pct)?;
        set_global(&self.domain(key)?, Some(period), Some(quota))
    }

    fn restore_cap(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError> {
        let (period, quota) = super::parse_saved(saved)?;
        set_global(&self.domain(key)?, period, quota)
    }
}

fn set_global(d: &Domain, period: Option<u64>, quota: Option<i64>) -> Result<(), BackendError> {
    let mut s = d
        .scheduler_parameters()
        .map_err(lv("virDomainGetSchedulerParameters"))?;
    // Only the global bandwidth is written: every other field is left out of the call.
    let scheduler_type = std::mem::take(&mut s.scheduler_type);
    let info = virt::domain::SchedulerInfo {
        scheduler_type,
        cpu_shares: None,
        vcpu_bw: Default::default(),
        emulator_bw: Default::default(),
        global_bw: virt::domain::SchedBandwidth { period, quota },
        iothread_bw: Default::default(),
        weight: None,
        cap: None,
        reservation: None,
        limit: None,
        shares: None,
    };
    d.set_scheduler_parameters_flags(&info, virt::sys::VIR_DOMAIN_AFFECT_LIVE)
        .map_err(lv("virDomainSetSchedulerParameters"))
}
