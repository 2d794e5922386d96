//! The real Xen: libxenctrl, libxenforeignmemory and libxenstore, loaded at run time through
//! bindings bindgen generated from the installed headers (build.rs).

use super::{PageBatch, PageError, SchedParams, Scheduler, XenDomain, XenOps};
use crate::BackendError;
use resex_guestmem::RawRegion;
use std::ffi::CString;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A module of bindgen's output (generated code: its own lint rules).
macro_rules! bindings {
    ($m:ident, $file:literal) => {
        #[allow(
            dead_code,
            non_camel_case_types,
            non_snake_case,
            non_upper_case_globals,
            missing_docs,
            unsafe_op_in_unsafe_fn,
            clippy::all,
            clippy::undocumented_unsafe_blocks,
            clippy::cast_possible_truncation
        )]
        mod $m {
            include!(concat!(env!("OUT_DIR"), "/", $file));
        }
    };
}
bindings!(ctrl, "XenCtrl.rs");
bindings!(fmem, "XenForeignMemory.rs");
bindings!(store, "XenStore.rs");
bindings!(guest, "XenGuest.rs");

/// What is missing when this is not a Xen dom0.
pub const PRIVCMD: &str = "/dev/xen/privcmd";

/// Loads `name` (the development symlink, else any versioned `name.N`).
fn load<T>(
    name: &str,
    open: impl Fn(&str) -> Result<T, libloading::Error>,
) -> Result<T, BackendError> {
    let mut tried = vec![name.to_owned()];
    if let Ok(l) = open(name) {
        return Ok(l);
    }
    for dir in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
    ] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut found: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path().display().to_string())
            .filter(|p| {
                Path::new(p)
                    .file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| f.starts_with(&format!("{name}.")))
            })
            .collect();
        found.sort();
        for p in found.into_iter().rev() {
            if let Ok(l) = open(&p) {
                return Ok(l);
            }
            tried.push(p);
        }
    }
    Err(BackendError::Unavailable(format!(
        "cannot load {name} (tried {}): install the Xen libraries (Debian: libxen-dev)",
        tried.join(", ")
    )))
}

struct Libs {
    xc: ctrl::XenCtrl,
    fm: fmem::XenForeignMemory,
    xs: store::XenStore,
    /// libxenguest, for PV domains' p2m (None: not installed; PV memory is then unavailable).
    xg: Option<guest::XenGuest>,
    xch: *mut ctrl::xc_interface,
    fmh: *mut fmem::xenforeignmemory_handle,
    xsh: *mut store::xs_handle,
}

// SAFETY: the handles are used under the `RealXen` mutex (xc, xs) or are documented as usable
// from any thread (xenforeignmemory map/unmap); the libraries themselves are thread-safe.
unsafe impl Send for Libs {}
// SAFETY: as for Send.
unsafe impl Sync for Libs {}

impl Drop for Libs {
    fn drop(&mut self) {
        // SAFETY: each handle came from its library's open call and is closed exactly once.
        unsafe {
            self.xs.xs_close(self.xsh);
            self.fm.xenforeignmemory_close(self.fmh);
            self.xc.xc_interface_close(self.xch);
        }
    }
}

/// The real hypervisor (a Xen dom0 with the toolstack's libraries).
pub struct RealXen {
    libs: Arc<Libs>,
    /// xenctrl and xenstore calls are serialised.
    lock: Mutex<()>,
}

impl std::fmt::Debug for RealXen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RealXen")
    }
}

fn err(what: &str) -> BackendError {
    BackendError::io(what, std::io::Error::last_os_error())
}

impl RealXen {
    /// Opens Xen: says in one line what is missing when this is not a dom0.
    pub fn open() -> Result<Self, BackendError> {
        if !Path::new(PRIVCMD).exists() {
            return Err(BackendError::Unavailable(format!(
                "{PRIVCMD} is missing: this is not a Xen dom0 (no Xen, or the xen-privcmd driver \
                 is not loaded)"
            )));
        }
        // SAFETY: loading a shared library runs its initialisers; these are Xen's own
        // libraries, whose initialisers have no preconditions.
        let xc = load("libxenctrl.so", |p| unsafe { ctrl::XenCtrl::new(p) })?;
        // SAFETY: as above.
        let fm = load("libxenforeignmemory.so", |p| unsafe {
            fmem::XenForeignMemory::new(p)
        })?;
        // SAFETY: as above.
        let xs = load("libxenstore.so", |p| unsafe { store::XenStore::new(p) })?;
        // SAFETY: as above.
        let xg = load("libxenguest.so", |p| unsafe { guest::XenGuest::new(p) }).ok();
        // SAFETY: null logger and flags 0 are documented defaults.
        let xch = unsafe { xc.xc_interface_open(std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if xch.is_null() {
            return Err(err("xc_interface_open"));
        }
        // SAFETY: as above.
        let fmh = unsafe { fm.xenforeignmemory_open(std::ptr::null_mut(), 0) };
        // SAFETY: flags 0: a normal connection to xenstored.
        let xsh = unsafe { xs.xs_open(0) };
        if fmh.is_null() || xsh.is_null() {
            // SAFETY: whatever was opened is closed once.
            unsafe {
                if !fmh.is_null() {
                    fm.xenforeignmemory_close(fmh);
                }
                if !xsh.is_null() {
                    xs.xs_close(xsh);
                }
                xc.xc_interface_close(xch);
            }
            return Err(err("xenforeignmemory_open / xs_open"));
        }
        Ok(Self {
            libs: Arc::new(Libs {
                xc,
                fm,
                xs,
                xg,
                xch,
                fmh,
                xsh,
            }),
            lock: Mutex::new(()),
        })
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn scheduler_of(&self, pool: u32) -> Option<Scheduler> {
        let l = &self.libs;
        // SAFETY: xch is open; the result is freed below with the matching call.
        let info = unsafe { l.xc.xc_cpupool_getinfo(l.xch, pool) };
        if info.is_null() {
            return None;
        }
        // SAFETY: non-null: a valid xc_cpupoolinfo_t from the library.
        let id = unsafe { (*info).sched_id };
        // SAFETY: freed once, with the library's own free.
        unsafe { l.xc.xc_cpupool_infofree(l.xch, info) };
        match id {
            x if x == ctrl::XEN_SCHEDULER_CREDIT => Some(Scheduler::Credit),
            x if x == ctrl::XEN_SCHEDULER_CREDIT2 => Some(Scheduler::Credit2),
            _ => None,
        }
    }

    fn read_xs(&self, path: &str) -> Result<Option<String>, BackendError> {
        let l = &self.libs;
        let c = CString::new(path).map_err(|_| BackendError::XenstorePath { path: path.into() })?;
        let mut len: std::os::raw::c_uint = 0;
        // SAFETY: xsh is open; XBT_NULL (0) is "no transaction"; len receives the size.
        let p = unsafe { l.xs.xs_read(l.xsh, 0, c.as_ptr(), &mut len) };
        if p.is_null() {
            return Ok(None);
        }
        // SAFETY: xs_read returns `len` bytes (plus a NUL) malloc'ed for the caller.
        let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) }.to_vec();
        // SAFETY: the buffer is the caller's to free, with free(3).
        unsafe { libc::free(p) };
        Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
    }
}

/// A domain's handle as a UUID string.
fn uuid_of(d: &ctrl::xc_domaininfo_t) -> String {
    let h = d.handle;
    format!(
        "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11], h[12], h[13],
        h[14], h[15]
    )
}

/// Entry `pfn` of a mapped p2m: a machine frame, or `None` past its end, for an invalid entry
/// (all ones) or one Linux marks as not the guest's RAM (its foreign and identity bits).
///
/// # Safety
/// `mi.p2m_table` must map `mi.p2m_size` entries of `mi.guest_width` bytes.
unsafe fn p2m_entry(mi: &guest::xc_domain_meminfo, pfn: u64) -> Option<u64> {
    if pfn >= mi.p2m_size {
        return None;
    }
    let i = usize::try_from(pfn).ok()?;
    let (raw, marks) = if mi.guest_width == 4 {
        // SAFETY: i < p2m_size entries of 4 bytes (the caller's contract).
        let e = unsafe { (mi.p2m_table as *const u32).add(i).read_unaligned() };
        (u64::from(e), 3 << 30)
    } else {
        // SAFETY: i < p2m_size entries of 8 bytes (the caller's contract).
        let e = unsafe { (mi.p2m_table as *const u64).add(i).read_unaligned() };
        (e, 3 << 62)
    };
    let invalid = if mi.guest_width == 4 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    (raw != invalid && raw & marks == 0).then_some(raw)
}

struct Batch {
    libs: Arc<Libs>,
    base: *mut std::ffi::c_void,
    pages: usize,
    regions: Vec<Result<RawRegion, PageError>>,
}

// SAFETY: the mapping is accessed only through RawRegion's atomic copies; unmapping in Drop
// needs only the (thread-safe) foreign-memory handle.
unsafe impl Send for Batch {}
// SAFETY: as for Send.
unsafe impl Sync for Batch {}

impl PageBatch for Batch {
    fn page(&self, i: usize) -> Result<&RawRegion, PageError> {
        match self.regions.get(i) {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => Err(*e),
            None => Err(PageError::Beyond),
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.regions.clear();
        // SAFETY: base/pages came from xenforeignmemory_map and are unmapped once; no region
        // into them survives (cleared above).
        unsafe {
            self.libs
                .fm
                .xenforeignmemory_unmap(self.libs.fmh, self.base, self.pages as u64)
        };
    }
}

impl XenOps for RealXen {
    fn list(&self) -> Result<Vec<XenDomain>, BackendError> {
        let _g = self.guard();
        let l = &self.libs;
        let mut info: Vec<ctrl::xc_domaininfo_t> = vec![Default::default(); 1024];
        // SAFETY: `info` has room for 1024 entries; domains from 1 (dom0 is not ours).
        let n = unsafe {
            l.xc.xc_domain_getinfolist(l.xch, 1, 1024, info.as_mut_ptr())
        };
        if n < 0 {
            return Err(err("xc_domain_getinfolist"));
        }
        let mut out = Vec::new();
        for d in info.iter().take(n as usize) {
            if d.flags & ctrl::XEN_DOMINF_dying != 0 {
                continue;
            }
            let domid = u32::from(d.domain);
            let name = self
                .read_xs(&format!("/local/domain/{domid}/name"))?
                .unwrap_or_else(|| format!("domain-{domid}"));
            let uuid = uuid_of(d);
            out.push(XenDomain {
                domid,
                name,
                uuid,
                vcpus: d.max_vcpu_id + 1,
                ram_bytes: d.tot_pages.saturating_mul(4096),
                cpu_time_ns: d.cpu_time,
                scheduler: self.scheduler_of(d.cpupool),
                pv: d.flags & ctrl::XEN_DOMINF_hvm_guest == 0,
            });
        }
        Ok(out)
    }

    fn cpu_time(&self, domid: u32) -> Result<Option<(String, u64)>, BackendError> {
        let _g = self.guard();
        let l = &self.libs;
        let mut d = ctrl::xc_domaininfo_t::default();
        // SAFETY: `d` has room for the one entry asked for, from `domid` on.
        let n = unsafe { l.xc.xc_domain_getinfolist(l.xch, domid, 1, &mut d) };
        if n < 0 {
            return Err(err("xc_domain_getinfolist"));
        }
        // The next domain up is returned when `domid` is gone.
        let live = n == 1 && u32::from(d.domain) == domid && d.flags & ctrl::XEN_DOMINF_dying == 0;
        Ok(live.then(|| (uuid_of(&d), d.cpu_time)))
    }

    fn sched_get(&self, domid: u32, s: Scheduler) -> Result<SchedParams, BackendError> {
        let _g = self.guard();
        let l = &self.libs;
        let (rc, weight, cap) = match s {
            Scheduler::Credit => {
                let mut p = ctrl::xen_domctl_sched_credit::default();
                // SAFETY: xch is open; p is a valid out-parameter.
                let rc = unsafe { l.xc.xc_sched_credit_domain_get(l.xch, domid, &mut p) };
                (rc, p.weight, p.cap)
            }
            Scheduler::Credit2 => {
                let mut p = ctrl::xen_domctl_sched_credit2::default();
                // SAFETY: as above.
                let rc = unsafe { l.xc.xc_sched_credit2_domain_get(l.xch, domid, &mut p) };
                (rc, p.weight, p.cap)
            }
        };
        if rc != 0 {
            return Err(err("xc_sched_credit*_domain_get"));
        }
        Ok(SchedParams { weight, cap })
    }

    fn sched_set(&self, domid: u32, s: Scheduler, p: SchedParams) -> Result<(), BackendError> {
        let _g = self.guard();
        let l = &self.libs;
        let rc = match s {
            Scheduler::Credit => {
                let mut v = ctrl::xen_domctl_sched_credit {
                    weight: p.weight,
                    cap: p.cap,
                };
                // SAFETY: xch is open; v is a valid in-parameter.
                unsafe { l.xc.xc_sched_credit_domain_set(l.xch, domid, &mut v) }
            }
            Scheduler::Credit2 => {
                let mut v = ctrl::xen_domctl_sched_credit2 {
                    weight: p.weight,
                    cap: p.cap,
                };
                // SAFETY: as above.
                unsafe { l.xc.xc_sched_credit2_domain_set(l.xch, domid, &mut v) }
            }
        };
        if rc != 0 {
            return Err(err("xc_sched_credit*_domain_set"));
        }
        Ok(())
    }

    fn map(&self, domid: u32, gfns: &[u64]) -> Result<Box<dyn PageBatch>, BackendError> {
        let l = self.libs.clone();
        let pfns: Vec<fmem::xen_pfn_t> = gfns.iter().map(|&g| g as fmem::xen_pfn_t).collect();
        let mut errs = vec![0i32; gfns.len()];
        // SAFETY: fmh is open; pfns and errs hold `gfns.len()` entries each.
        let base = unsafe {
            l.fm.xenforeignmemory_map(
                l.fmh,
                domid,
                libc::PROT_READ | libc::PROT_WRITE,
                gfns.len() as u64,
                pfns.as_ptr(),
                errs.as_mut_ptr(),
            )
        };
        if base.is_null() {
            return Err(err("xenforeignmemory_map"));
        }
        let regions = errs
            .iter()
            .enumerate()
            .map(|(i, &e)| {
                if e == 0 {
                    // SAFETY: page i of the mapping is mapped (errs[i] == 0) and stays mapped
                    // until the batch is dropped, which drops the regions first.
                    Ok(unsafe { RawRegion::new((base as *mut u8).add(i * 4096), 4096) })
                } else {
                    Err(PageError::Refused { errno: -e })
                }
            })
            .collect();
        Ok(Box::new(Batch {
            libs: l,
            base,
            pages: gfns.len(),
            regions,
        }))
    }

    fn frames(&self, domid: u32, pfns: &[u64]) -> Result<Vec<Option<u64>>, BackendError> {
        let _g = self.guard();
        let l = &self.libs;
        let xg = l.xg.as_ref().ok_or_else(|| {
            BackendError::Unavailable(
                "cannot load libxenguest.so, which maps a PV domain's p2m: install the Xen \
                 libraries (Debian: libxen-dev)"
                    .into(),
            )
        })?;
        let mut mi = guest::xc_domain_meminfo::default();
        // SAFETY: xch is open (the same xc_interface type under another bindgen module); mi is
        // zeroed, as the call requires, and is released below with the matching call.
        let rc = unsafe { xg.xc_map_domain_meminfo(l.xch.cast(), domid, &mut mi) };
        if rc != 0 || mi.p2m_table.is_null() {
            return Err(err("xc_map_domain_meminfo"));
        }
        // SAFETY: p2m_table maps p2m_size entries of guest_width bytes each, until the unmap.
        let out = pfns.iter().map(|&p| unsafe { p2m_entry(&mi, p) }).collect();
        // SAFETY: mi came from xc_map_domain_meminfo and is released once.
        unsafe { xg.xc_unmap_domain_meminfo(l.xch.cast(), &mut mi) };
        Ok(out)
    }

    fn xs_read(&self, path: &str) -> Result<Option<String>, BackendError> {
        let _g = self.guard();
        self.read_xs(path)
    }

    fn xs_write(&self, path: &str, value: &str) -> Result<(), BackendError> {
        let _g = self.guard();
        let l = &self.libs;
        let c = CString::new(path).map_err(|_| BackendError::XenstorePath { path: path.into() })?;
        // SAFETY: xsh is open; value's bytes are passed with their length (no NUL needed).
        let ok = unsafe {
            l.xs.xs_write(
                l.xsh,
                0,
                c.as_ptr(),
                value.as_ptr() as *const std::ffi::c_void,
                u32::try_from(value.len()).unwrap_or(u32::MAX),
            )
        };
        if !ok {
            return Err(err("xs_write"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_xen_it_says_so_in_one_line() {
        if Path::new(PRIVCMD).exists() {
            return; // a real dom0: nothing to check here
        }
        let e = RealXen::open().unwrap_err().to_string();
        assert!(
            e.contains("/dev/xen/privcmd is missing") && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn the_libraries_load() {
        // The bindings and the installed libraries agree (every symbol resolves).
        // SAFETY: loading Xen's own libraries; their initialisers have no preconditions.
        load("libxenctrl.so", |p| unsafe { ctrl::XenCtrl::new(p) }).unwrap();
        // SAFETY: as above.
        load("libxenstore.so", |p| unsafe { store::XenStore::new(p) }).unwrap();
        // SAFETY: as above.
        load("libxenforeignmemory.so", |p| unsafe {
            fmem::XenForeignMemory::new(p)
        })
        .unwrap();
        // SAFETY: as above.
        load("libxenguest.so", |p| unsafe { guest::XenGuest::new(p) }).unwrap();
    }
}
