//! The backend sampler: every call into the hypervisor that can be slow (listing domains,
//! mapping guest memory, reading CPU time, asking how caps are enforced) runs here, on a
//! thread of its own, never on the 1 ms loop. It hands the loop what it found as messages; a
//! libvirt call that hangs delays the next sample, never a tick (the loop uses the latest
//! sample it has).
//!
//! It also gives each domain its [`VmId`] when it first sees it (ids are never reused while
//! the daemon runs) and starts the domain's registrar, which speaks to the loop in `VmId`s.

use crate::config::Grant;
use crate::inbox::Post;
use crate::registrar::{self, RegEvent};
use resex_backend::lever::RateLever;
use resex_backend::{DomainInfo, Hypervisor};
use resex_common::{LogLimiter, VmId};
use resex_core::{CpuSample, VmInfo};
use resex_guestmem::GuestMemory;
use resex_ibmon::Limits;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the sampler tells the loop.
pub enum Sample {
    /// A domain appeared.
    Added {
        /// Its id from now on.
        id: VmId,
        /// The backend's key for it (what caps are set by).
        key: String,
        /// What the core needs to know.
        info: VmInfo,
    },
    /// A domain's guest memory is mapped.
    Memory {
        /// Which.
        id: VmId,
        /// Its memory.
        mem: Arc<dyn GuestMemory>,
    },
    /// A domain is gone.
    Removed {
        /// Which.
        id: VmId,
    },
    /// CPU-time samples of every domain that could be read.
    Cpu(Vec<(VmId, CpuSample)>),
}

impl std::fmt::Debug for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sample::Added { id, key, .. } => write!(f, "Added({id}, {key})"),
            Sample::Memory { id, .. } => write!(f, "Memory({id})"),
            Sample::Removed { id } => write!(f, "Removed({id})"),
            Sample::Cpu(v) => write!(f, "Cpu({} samples)", v.len()),
        }
    }
}

/// How often the sampler does what.
#[derive(Debug, Clone, Copy)]
pub struct Periods {
    /// Listing domains (and retrying memory that could not be mapped yet).
    pub discovery: Duration,
    /// Reading CPU time.
    pub cpu: Duration,
}

struct Known {
    id: VmId,
    name: String,
    mapped: bool,
    registrar_stop: Arc<AtomicBool>,
}

/// The sampler's state.
struct Sampler {
    hv: Arc<dyn Hypervisor>,
    lever: Arc<dyn RateLever>,
    limits: Limits,
    clock: Instant,
    out: Post<Sample>,
    reg_tx: Post<RegEvent>,
    known: HashMap<String, Known>,
    next_id: u32,
    log_list: LogLimiter,
    log_cpu: LogLimiter,
    /// `[vms.NAME]` of the config: what the admin grants, over what the backend says.
    grants: BTreeMap<String, Grant>,
}

/// Unix time at `clock`, ns (saturating; 0 before 1970).
#[must_use]
pub fn unix_at(clock: Instant) -> u64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let at = since_epoch.saturating_sub(clock.elapsed());
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds since `clock` (the loop's time base).
pub fn ns_since(clock: Instant) -> u64 {
    u64::try_from(clock.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Sampler {
    fn discover(&mut self) -> bool {
        let doms = match self.hv.domains() {
            Ok(d) => d,
            Err(e) => {
                if let Some(n) = self.log_list.hit() {
                    tracing::warn!("listing domains: {e} [{n}]");
                }
                return true;
            }
        };
        let live: std::collections::HashSet<&str> = doms.iter().map(|d| d.key.as_str()).collect();
        let gone: Vec<String> = self
            .known
            .keys()
            .filter(|k| !live.contains(k.as_str()))
            .cloned()
            .collect();
        for k in gone {
            if let Some(v) = self.known.remove(&k) {
                v.registrar_stop.store(true, Ordering::Release);
                tracing::info!("{}: gone", v.name);
                if self.out.send(Sample::Removed { id: v.id }).is_err() {
                    return false;
                }
            }
        }
        for d in doms {
            if !self.known.contains_key(&d.key) && !self.add(&d) {
                return false;
            }
            if !self.map(&d.key) {
                return false;
            }
        }
        true
    }

    fn add(&mut self, d: &DomainInfo) -> bool {
        let mut d = d.clone();
        if let Some(g) = self.grants.get(&d.name) {
            g.apply(&mut d);
        }
        let d = &d;
        self.next_id += 1;
        let id = VmId(self.next_id);
        let mechanism = self.hv.cap_mechanism(&d.key);
        let tx_lever = self.lever.describe(&d.key);
        tracing::info!(
            "{}: found ({} vCPUs, caps by {mechanism}) as {id}",
            d.name,
            d.vcpus
        );
        let info = VmInfo {
            name: d.name.clone(),
            vcpus: d.vcpus,
            ram_size: d.ram_size,
            weight: d.weight,
            sla_threshold: d.sla_threshold,
            cap_mechanism: mechanism,
            tx_lever,
            entitlement: resex_pricing::Entitlement {
                tx_bps: d.entitled_bps,
                cpu_floor_pct: d.cpu_floor_pct,
            },
        };
        // Added before its registrar starts: the loop applies a registration only after the
        // samples taken with or after it (see `Driver::apply_inputs`).
        let sent = self
            .out
            .send(Sample::Added {
                id,
                key: d.key.clone(),
                info,
            })
            .is_ok();
        let stop = Arc::new(AtomicBool::new(false));
        let (hv, key, name, ram, limits, tx, st) = (
            self.hv.clone(),
            d.key.clone(),
            d.name.clone(),
            d.ram_size,
            self.limits,
            self.reg_tx.clone(),
            stop.clone(),
        );
        let _ = std::thread::Builder::new()
            .name(format!("reg-{}", d.name))
            .spawn(move || registrar::run(hv, id, key, name, ram, limits, tx, st));
        self.known.insert(
            d.key.clone(),
            Known {
                id,
                name: d.name.clone(),
                mapped: false,
                registrar_stop: stop,
            },
        );
        sent
    }

    /// Maps a domain's memory if it is not mapped yet.
    fn map(&mut self, key: &str) -> bool {
        let Some(k) = self.known.get_mut(key) else {
            return true;
        };
        if k.mapped {
            return true;
        }
        match self.hv.memory(key) {
            Ok(mem) => {
                k.mapped = true;
                self.out.send(Sample::Memory { id: k.id, mem }).is_ok()
            }
            Err(e) => {
                tracing::warn!("{}: cannot map guest memory yet: {e}", k.name);
                true
            }
        }
    }

    fn cpu(&mut self) -> bool {
        let mut batch = Vec::with_capacity(self.known.len());
        for (key, k) in &self.known {
            // Stamped at the middle of the call: a slow hypervisor call (or this thread
            // preempted around it) skews the sample by half the call, not the whole.
            let before = ns_since(self.clock);
            match self.hv.cpu_time_ns(key) {
                Ok(total_ns) => batch.push((
                    k.id,
                    CpuSample {
                        total_ns,
                        at_ns: before + ns_since(self.clock).saturating_sub(before) / 2,
                    },
                )),
                // The domain went away since the last listing, which says so next.
                Err(e @ resex_backend::BackendError::NoDomain(_)) => {
                    tracing::debug!("{}: CPU time: {e}", k.name);
                }
                Err(e) => {
                    if let Some(n) = self.log_cpu.hit() {
                        tracing::warn!("{}: CPU time: {e} [{n}]", k.name);
                    }
                }
            }
        }
        batch.sort_unstable_by_key(|s| s.0);
        self.out.send(Sample::Cpu(batch)).is_ok()
    }

    fn stop_registrars(&self) {
        for k in self.known.values() {
            k.registrar_stop.store(true, Ordering::Release);
        }
    }
}

/// Starts the sampler; it runs until `stop` or until the loop stops listening.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    hv: Arc<dyn Hypervisor>,
    lever: Arc<dyn RateLever>,
    limits: Limits,
    periods: Periods,
    clock: Instant,
    out: Post<Sample>,
    reg_tx: Post<RegEvent>,
    grants: BTreeMap<String, Grant>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("resexd-sampler".into())
        .spawn(move || {
            let mut s = Sampler {
                hv,
                lever,
                limits,
                clock,
                out,
                reg_tx,
                known: HashMap::new(),
                next_id: 0,
                log_list: LogLimiter::default(),
                log_cpu: LogLimiter::default(),
                grants,
            };
            let (mut next_disc, mut next_cpu) = (Instant::now(), Instant::now());
            while !stop.load(Ordering::Acquire) {
                let now = Instant::now();
                if now >= next_disc {
                    if !s.discover() {
                        break;
                    }
                    next_disc = now + periods.discovery;
                }
                if Instant::now() >= next_cpu {
                    if !s.cpu() {
                        break;
                    }
                    // Fixed rate; a slow backend skips the samples it missed.
                    next_cpu += periods.cpu;
                    if next_cpu < Instant::now() {
                        next_cpu = Instant::now() + periods.cpu;
                    }
                }
                let until = next_disc.min(next_cpu);
                let now = Instant::now();
                if until > now {
                    std::thread::sleep((until - now).min(Duration::from_millis(20)));
                }
            }
            s.stop_registrars();
        })
}
