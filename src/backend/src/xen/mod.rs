//! The `xen` backend (feature `xen` for the real hypervisor; Debian: libxen-dev, libclang-dev).
//!
//! - Domains and CPU time: `xc_domain_getinfolist` (`xc_domain_getinfo` no longer exists).
//! - Caps: `xc_sched_credit_domain_set` or `xc_sched_credit2_domain_set`, by the scheduler of
//!   the domain's cpupool; both take a cap in percent of one physical CPU (0: none), our unit.
//! - Guest memory: xenforeignmemory, mapped in batches of [`BATCH_PAGES`] pages when first
//!   touched and cached ([`XenMemory`]). A guest's address / 4096 is its frame number: what
//!   the foreign mapping takes for a guest Xen translates (HVM, PVH), while for a PV guest the
//!   mapping takes machine frames, which its p2m gives ([`XenOps::frames`]; the agent in a PV
//!   guest registers pseudo-physical addresses from `/proc/self/pagemap`).
//! - Registration: a [`resex_proto::xsline`] link over xenstore, under the guest-writable
//!   `/local/domain/ID/data/resex/agent` ([`XsStore`], [`link_base`]).
//! - The rate lever's VF: the first network SR-IOV VF among the domain's PCI passthrough
//!   functions, which libxl lists in xenstore ([`XenOps::pci_devices`]).
//!
//! Everything the backend asks of Xen goes through [`XenOps`]: the real implementation
//! (`ffi`, dynamically loaded libxenctrl, libxenforeignmemory, libxenstore) and the fake the
//! tests use sit behind it.

#[cfg(feature = "xen")]
mod ffi;
#[cfg(feature = "xen")]
pub use ffi::RealXen;

use crate::{BackendError, Channel, DomainInfo, Hypervisor, SavedError};
use resex_guestmem::{GuestAddress, GuestMemory, MemError, RawRegion};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Pages mapped at once.
pub const BATCH_PAGES: u64 = 64;
/// The frame asked for where a PV guest's page has none (Xen refuses it, that page alone).
pub const NO_FRAME: u64 = u64::MAX;
const PAGE: u64 = 4096;

/// A domain's scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// credit (`XEN_SCHEDULER_CREDIT`).
    Credit,
    /// credit2 (`XEN_SCHEDULER_CREDIT2`).
    Credit2,
}

/// A scheduler's per-domain parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SchedParams {
    /// Relative weight.
    pub weight: u16,
    /// Cap, percent of one physical CPU (0: uncapped).
    pub cap: u16,
}

/// A domain as Xen lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct XenDomain {
    /// Domain id.
    pub domid: u32,
    /// Name (xenstore).
    pub name: String,
    /// UUID (the domain handle).
    pub uuid: String,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory, bytes.
    pub ram_bytes: u64,
    /// CPU time used, ns.
    pub cpu_time_ns: u64,
    /// Its cpupool's scheduler (`None`: one we cannot cap, e.g. RTDS or null).
    pub scheduler: Option<Scheduler>,
    /// A PV guest: its frame numbers are pseudo-physical, and mapping its pages takes the
    /// machine frames of its p2m.
    pub pv: bool,
}

/// Why a page of a batch has no mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// Xen would not map the page (a hole, a page the guest gave up): the errno it gave.
    #[error("xenforeignmemory_map: {}", std::io::Error::from_raw_os_error(*errno))]
    Refused {
        /// The (positive) errno.
        errno: i32,
    },
    /// Past the end of the batch.
    #[error("beyond the batch")]
    Beyond,
}

/// A batch of mapped guest pages.
pub trait PageBatch: Send + Sync {
    /// The mapping of page `i` of the batch, or why it is missing.
    fn page(&self, i: usize) -> Result<&RawRegion, PageError>;
}

/// What the backend needs from Xen.
pub trait XenOps: Send + Sync {
    /// Every domain but dom0 that is not dying.
    fn list(&self) -> Result<Vec<XenDomain>, BackendError>;
    /// One domain's UUID and CPU time (ns), `None` when it is gone or dying: what a CPU
    /// sample needs, without listing every domain and reading their names.
    fn cpu_time(&self, domid: u32) -> Result<Option<(String, u64)>, BackendError> {
        Ok(self
            .list()?
            .into_iter()
            .find(|d| d.domid == domid)
            .map(|d| (d.uuid, d.cpu_time_ns)))
    }
    /// A domain's scheduler parameters.
    fn sched_get(&self, domid: u32, s: Scheduler) -> Result<SchedParams, BackendError>;
    /// Sets them.
    fn sched_set(&self, domid: u32, s: Scheduler, p: SchedParams) -> Result<(), BackendError>;
    /// Maps `gfns` of the domain (read-write), one batch: frame numbers as the foreign mapping
    /// takes them (for a PV domain, machine frames: see [`Self::frames`]).
    fn map(&self, domid: u32, gfns: &[u64]) -> Result<Box<dyn PageBatch>, BackendError>;
    /// A PV domain's machine frames behind its pseudo-physical frames `pfns`, from its p2m
    /// (`None`: no frame behind that page, or past the p2m's end).
    fn frames(&self, domid: u32, pfns: &[u64]) -> Result<Vec<Option<u64>>, BackendError>;
    /// Reads a xenstore path.
    fn xs_read(&self, path: &str) -> Result<Option<String>, BackendError>;
    /// Writes a xenstore path.
    fn xs_write(&self, path: &str, value: &str) -> Result<(), BackendError>;
    /// The PCI functions passed through to the domain, in order: libxl's PCI backend in
    /// xenstore, `/local/domain/0/backend/pci/DOMID/0/num_devs` and `dev-N` (`DDDD:BB:SS.F`).
    /// None when the domain has no PCI backend.
    fn pci_devices(&self, domid: u32) -> Result<Vec<String>, BackendError> {
        let be = format!("/local/domain/0/backend/pci/{domid}/0");
        let Some(n) = self.xs_read(&format!("{be}/num_devs"))? else {
            return Ok(Vec::new());
        };
        let n: u32 = n.trim().parse().map_err(|_| BackendError::Unparsable {
            file: format!("{be}/num_devs"),
            text: n.trim().to_owned(),
            expected: "a count",
        })?;
        // A count past what any domain can have is junk, not a loop of 4 billion reads.
        let mut out = Vec::new();
        for i in 0..n.min(256) {
            if let Some(d) = self.xs_read(&format!("{be}/dev-{i}"))? {
                out.push(d.trim().to_owned());
            }
        }
        Ok(out)
    }
}

/// The backend over any [`XenOps`].
pub struct XenBackend<O: XenOps> {
    ops: Arc<O>,
    mems: Mutex<HashMap<u32, Arc<XenMemory<O>>>>,
    sysfs: std::path::PathBuf,
}

impl<O: XenOps> std::fmt::Debug for XenBackend<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("XenBackend")
    }
}

fn domid_of(key: &str) -> Result<u32, BackendError> {
    key.split_once('/')
        .and_then(|(d, _)| d.parse().ok())
        .ok_or_else(|| BackendError::NoDomain(key.to_owned()))
}

impl<O: XenOps + 'static> XenBackend<O> {
    /// A backend over `ops`.
    pub fn new(ops: O) -> Self {
        Self {
            ops: Arc::new(ops),
            mems: Mutex::new(HashMap::new()),
            sysfs: crate::vf::sysfs::SYSFS.into(),
        }
    }

    /// Reads sysfs under `root` (which passthrough functions are network VFs).
    pub fn with_sysfs(mut self, root: &std::path::Path) -> Self {
        self.sysfs = root.to_owned();
        self
    }

    /// xenstore, for [`resex_proto::xsline`] links to the domains.
    pub fn xs_store(&self) -> Arc<dyn resex_proto::xsline::Store> {
        Arc::new(XsStore(self.ops.clone()))
    }

    /// The domain id in a domain's key.
    pub fn domid(key: &str) -> Result<u32, BackendError> {
        domid_of(key)
    }

    fn domain(&self, key: &str) -> Result<XenDomain, BackendError> {
        let domid = domid_of(key)?;
        self.ops
            .list()?
            .into_iter()
            .find(|d| d.domid == domid && key_of(d) == key)
            .ok_or_else(|| BackendError::NoDomain(key.to_owned()))
    }

    fn scheduler(&self, key: &str) -> Result<(u32, Scheduler), BackendError> {
        let d = self.domain(key)?;
        let s = d.scheduler.ok_or_else(|| {
            BackendError::Unavailable(format!(
                "domain {}: its cpupool's scheduler has no cap (credit or credit2 needed)",
                d.name
            ))
        })?;
        Ok((d.domid, s))
    }
}

/// `DOMID/UUID`: a domain id is reused after a domain dies; the pair is not.
fn key_of(d: &XenDomain) -> String {
    format!("{}/{}", d.domid, d.uuid)
}

impl<O: XenOps + 'static> Hypervisor for XenBackend<O> {
    fn kind(&self) -> &'static str {
        "xen"
    }

    fn domains(&self) -> Result<Vec<DomainInfo>, BackendError> {
        Ok(self
            .ops
            .list()?
            .into_iter()
            .map(|d| DomainInfo {
                entitled_bps: None,
                cpu_floor_pct: None,
                key: key_of(&d),
                id: d.domid,
                name: d.name.clone(),
                vcpus: d.vcpus.max(1),
                ram_size: crate::lowmem(d.ram_bytes),
                weight: 1.0,
                sla_threshold: None,
            })
            .collect())
    }

    fn cpu_time_ns(&self, key: &str) -> Result<u64, BackendError> {
        // Sampled every few ms per VM: one domain's info, not a listing with xenstore reads.
        match self.ops.cpu_time(domid_of(key)?)? {
            Some((uuid, ns)) if key.split_once('/').is_some_and(|(_, u)| u == uuid) => Ok(ns),
            _ => Err(BackendError::NoDomain(key.to_owned())),
        }
    }

    fn memory(&self, key: &str) -> Result<Arc<dyn GuestMemory>, BackendError> {
        let d = self.domain(key)?;
        let mut mems = self.mems.lock().unwrap_or_else(|p| p.into_inner());
        let m = mems
            .entry(d.domid)
            .or_insert_with(|| {
                Arc::new(XenMemory {
                    ops: self.ops.clone(),
                    domid: d.domid,
                    pv: d.pv,
                    size: crate::lowmem(d.ram_bytes),
                    batches: Mutex::new(HashMap::new()),
                })
            })
            .clone();
        Ok(m)
    }

    fn open_channel(&self, key: &str) -> Result<Channel, BackendError> {
        let d = self.domain(key)?;
        Ok(registration_channel(self.ops.clone(), d.domid))
    }

    fn cap_mechanism(&self, key: &str) -> String {
        match self.scheduler(key) {
            Ok((_, Scheduler::Credit)) => "xen credit cap".into(),
            Ok((_, Scheduler::Credit2)) => "xen credit2 cap".into(),
            Err(e) => e.to_string(),
        }
    }

    fn vf(&self, key: &str) -> Result<Option<crate::lever::Vf>, BackendError> {
        let devs = self.ops.pci_devices(self.domain(key)?.domid)?;
        Ok(
            crate::vf::sysfs::pick_vf(&self.sysfs, &devs)
                .map(|addr| crate::lever::Vf::Pci { addr }),
        )
    }

    fn save_cap(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        let (domid, s) = self.scheduler(key)?;
        let p = self.ops.sched_get(domid, s)?;
        Ok(serde_json::json!({ "scheduler": s, "weight": p.weight, "cap": p.cap }))
    }

    fn set_cap(&self, key: &str, pct: Option<f64>) -> Result<(), BackendError> {
        let (domid, s) = self.scheduler(key)?;
        let mut p = self.ops.sched_get(domid, s)?;
        p.cap = match pct {
            None => 0,
            // Xen's cap is whole percent, at least 1 (0 means none).
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Some(c) if c.is_finite() && c > 0.0 => c.round().clamp(1.0, f64::from(u16::MAX)) as u16,
            Some(pct) => return Err(BackendError::BadCap { pct }),
        };
        self.ops.sched_set(domid, s, p)
    }

    fn restore_cap(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError> {
        #[derive(serde::Deserialize)]
        struct Saved {
            scheduler: Scheduler,
            weight: u16,
            cap: u16,
        }
        let s: Saved = serde_json::from_value(saved.clone()).map_err(|source| SavedError::Xen {
            saved: saved.clone(),
            source,
        })?;
        let (domid, now) = self.scheduler(key)?;
        if now != s.scheduler {
            return Err(SavedError::Moved {
                from: s.scheduler,
                to: now,
            }
            .into());
        }
        self.ops.sched_set(
            domid,
            now,
            SchedParams {
                weight: s.weight,
                cap: s.cap,
            },
        )
    }
}

/// A domain's RAM through foreign mappings: each batch of [`BATCH_PAGES`] pages is mapped when
/// first touched and kept.
pub struct XenMemory<O: XenOps> {
    ops: Arc<O>,
    domid: u32,
    /// Frames go through the domain's p2m.
    pv: bool,
    size: u64,
    batches: Mutex<HashMap<u64, Arc<dyn PageBatch>>>,
}

impl<O: XenOps> XenMemory<O> {
    fn batch(&self, n: u64) -> Result<Arc<dyn PageBatch>, MemError> {
        let mut b = self.batches.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(x) = b.get(&n) {
            return Ok(x.clone());
        }
        let first = n * BATCH_PAGES;
        let last = (first + BATCH_PAGES).min(self.size.div_ceil(PAGE));
        let gfns: Vec<u64> = (first..last).collect();
        let unmapped = |e: BackendError| MemError::Unmapped {
            gfn: first,
            why: e.to_string(),
        };
        let frames = if self.pv {
            let f = self.ops.frames(self.domid, &gfns).map_err(unmapped)?;
            // A page with no machine frame is refused by the mapping, that page alone.
            f.into_iter().map(|f| f.unwrap_or(NO_FRAME)).collect()
        } else {
            gfns
        };
        let x: Arc<dyn PageBatch> = Arc::from(self.ops.map(self.domid, &frames).map_err(unmapped)?);
        b.insert(n, x.clone());
        Ok(x)
    }

    // The casts to usize are of values under 4096 or under `len` (a usize already).
    #[allow(clippy::cast_possible_truncation)]
    fn each(
        &self,
        addr: GuestAddress,
        len: usize,
        mut f: impl FnMut(&RawRegion, usize, std::ops::Range<usize>) -> bool,
    ) -> Result<(), MemError> {
        let end = addr.0.checked_add(len as u64).filter(|&e| e <= self.size);
        let Some(end) = end else {
            return Err(MemError::OutOfRange {
                addr,
                len,
                size: self.size,
            });
        };
        let mut a = addr.0;
        while a < end {
            let gfn = a / PAGE;
            let off = (a % PAGE) as usize;
            let n = ((PAGE - a % PAGE).min(end - a)) as usize;
            let batch = self.batch(gfn / BATCH_PAGES)?;
            let i = (gfn % BATCH_PAGES) as usize;
            let page = batch.page(i).map_err(|why| MemError::Unmapped {
                gfn,
                why: why.to_string(),
            })?;
            let done = (a - addr.0) as usize;
            if !f(page, off, done..done + n) {
                return Err(MemError::Unmapped {
                    gfn,
                    why: "short mapping".into(),
                });
            }
            a += n as u64;
        }
        Ok(())
    }
}

impl<O: XenOps> GuestMemory for XenMemory<O> {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        let len = buf.len();
        self.each(addr, len, |p, off, r| p.read(off, &mut buf[r]))
    }

    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        self.each(addr, data.len(), |p, off, r| p.write(off, &data[r]))
    }
}

/// xenstore through [`XenOps`], for [`resex_proto::xsline`] links (the registration channel,
/// `resex xen hca`'s control path and relays).
pub struct XsStore<O: XenOps>(pub Arc<O>);

impl<O: XenOps> resex_proto::xsline::Store for XsStore<O> {
    fn read(&self, path: &str) -> std::io::Result<Option<String>> {
        self.0.xs_read(path).map_err(std::io::Error::other)
    }

    fn write(&self, path: &str, value: &str) -> std::io::Result<()> {
        self.0.xs_write(path, value).map_err(std::io::Error::other)
    }
}

/// The xenstore directory of the domain's link `name` (guest-writable: the domain's `data`).
pub fn link_base(domid: u32, name: &str) -> String {
    format!("/local/domain/{domid}/data/resex/{name}")
}

/// The registration channel: the [`resex_proto::xsline`] link `agent`. A read that waits
/// [`CHANNEL_TIMEOUT`] for the agent gives up with `TimedOut` (the registrar reads on).
fn registration_channel<O: XenOps + 'static>(ops: Arc<O>, domid: u32) -> Channel {
    let (r, w) = resex_proto::xsline::open(
        Arc::new(XsStore(ops)),
        &link_base(domid, "agent"),
        resex_proto::xsline::Side::Host,
        CHANNEL_TIMEOUT,
        resex_proto::channel::MAX_LINE,
    );
    (Box::new(r), Box::new(w))
}

/// How long a registration channel read or write waits for the agent.
pub const CHANNEL_TIMEOUT: Duration = Duration::from_secs(10);

/// Relays clients of the Unix socket `path` to the link at `base` (BenchEx's bootstrap
/// listener `xs:NAME` in the domain), one client at a time: each turn starts with
/// [`resex_proto::xsline::CONNECT`] and carries lines both ways until the client closes.
pub fn relay(
    store: Arc<dyn resex_proto::xsline::Store>,
    base: String,
    path: &std::path::Path,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, BackendError> {
    let _ = std::fs::remove_file(path);
    let l = std::os::unix::net::UnixListener::bind(path)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| BackendError::io(format!("binding {}", path.display()), e))?;
    std::thread::Builder::new()
        .name("xs-relay".into())
        .spawn(move || {
            let open = || {
                resex_proto::xsline::open(
                    store.clone(),
                    &base,
                    resex_proto::xsline::Side::Host,
                    Duration::from_secs(30),
                    64 * 1024,
                )
            };
            let mut link = open();
            let mut clients = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                match l.accept() {
                    Ok((s, _)) => {
                        clients += 1;
                        link = relay_turn(s, link, &stop).unwrap_or_else(open);
                        tracing::debug!("{base}: relay client {clients} done");
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        tracing::warn!("{base}: relay accept: {e}");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        })
        .map_err(|e| BackendError::io("starting the relay thread", e))
}

type Link = (resex_proto::xsline::XsReader, resex_proto::xsline::XsWriter);

/// One client's turn: its lines to the link here, the link's to it on a second thread.
fn relay_turn(
    s: std::os::unix::net::UnixStream,
    (mut r, mut w): Link,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Option<Link> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = Arc::new(AtomicBool::new(false));
    let back = (|| {
        s.set_nonblocking(false)?;
        w.write_all(format!("{}\n", resex_proto::xsline::CONNECT).as_bytes())?;
        s.try_clone()
    })();
    let Ok(mut out) = back else {
        return Some((r, w));
    };
    let (d, st) = (done.clone(), stop.clone());
    let to_client = std::thread::spawn(move || {
        r.set_timeout(Duration::from_millis(200));
        let mut line = String::new();
        while !d.load(Ordering::Acquire) && !st.load(Ordering::Acquire) {
            line.clear();
            match r.read_line(&mut line) {
                Ok(_) if out.write_all(line.as_bytes()).is_ok() => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                _ => break,
            }
        }
        r
    });
    let mut from = std::io::BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        match from.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if !line.ends_with('\n') {
                    line.push('\n');
                }
                if w.write_all(line.as_bytes()).is_err() {
                    break;
                }
            }
        }
    }
    done.store(true, Ordering::Release);
    to_client.join().ok().map(|r| (r, w))
}

#[cfg(test)]
mod tests;
