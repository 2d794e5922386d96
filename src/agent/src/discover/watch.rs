//! The discovery loop's state: which processes have soft-RoCE queues, rescanned every interval,
//! so new queues are registered soon after their creation and a process's queues are
//! unregistered when it exits.
//!
//! **Bounded work.** Each scan asks the kernel's RDMA netlink which processes own RDMA
//! resources ([`Resources`]), and reads the `maps` of those whose resources changed (new QPs,
//! CQs or shared receive queues, or none left), at most [`MAX_PROCS`] processes and
//! [`super::MAX_MAPS_BYTES`] of each; every [`SWEEP_EVERY`] scans it looks at every process
//! (the kernel does not list a resource whose creating thread has exited). The kernel gives a
//! resource the id of the thread that created it: each is charged to that thread's process
//! (`Tgid` in `/proc/TID/status`). Without RDMA netlink (no `ib_core`, so no RDMA device
//! either) every process's `maps` is read at every scan. A process is read further (headers,
//! page lists) only when its mappings or its resources changed.
//!
//! **Where counting starts.** The kernel numbers each device's queues in creation order (the
//! mmap offset). The first scan records the highest offset it saw per device: a queue at or
//! below it may be old, and the host counts it from its consumer index when it first sees it;
//! a queue above it was made since, and is counted from its first entry (`start: 0`), exact as
//! long as the host attaches before it has gone once round its ring (the host counts a lap it
//! sees as an overrun). A forked child's queues are its parent's, old offsets: never counted
//! from 0 again.
//!
//! **One queue, one registration.** A queue mapped by several processes (after `fork()`) is
//! registered once, for the lowest pid: the host refuses a registration in which two rings
//! overlap.

use super::rdma_nl::{NetlinkError, Resources};
use super::{process_rings, read_maps, uverbs_mappings, DiscoverError, Mapping, Owned};
use resex_proto::{RingKind, RingRegistration};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where the resource table comes from (the RDMA netlink in the agent).
pub type ResourceSource = Box<dyn FnMut() -> Result<Resources, NetlinkError> + Send>;

/// The most processes followed at once (bounded work per scan).
pub const MAX_PROCS: usize = 256;

/// Every this many scans (1 s at 50 ms) every process is looked at, not only those whose RDMA
/// resources changed.
pub const SWEEP_EVERY: u64 = 20;

/// What one process was found with, or left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcQueues {
    /// Its pid.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
    /// Its queues registered.
    pub queues: usize,
    /// Its queues found but not told apart (not registered).
    pub skipped: usize,
    /// The QPNs its send queues were tied to.
    pub qps: Vec<u32>,
}

/// What a scan changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Processes whose queues are new or changed (their current queues).
    pub found: Vec<ProcQueues>,
    /// Processes that exited or closed their queues (what they had).
    pub gone: Vec<ProcQueues>,
}

impl Changes {
    /// Whether the registration must be sent again.
    pub fn any(&self) -> bool {
        !self.found.is_empty() || !self.gone.is_empty()
    }
}

#[derive(Debug)]
struct Proc {
    comm: String,
    maps: Vec<Mapping>,
    owned: Owned,
    rings: Vec<RingRegistration>,
}

impl Proc {
    fn summary(&self, pid: u32) -> ProcQueues {
        ProcQueues {
            pid,
            comm: self.comm.clone(),
            queues: self.rings.len(),
            skipped: self.maps.len().saturating_sub(self.rings.len()),
            qps: self
                .rings
                .iter()
                .filter(|r| r.kind == RingKind::Sq)
                .filter_map(|r| r.qpn)
                .collect(),
        }
    }
}

/// The processes with queues, as of the last scan.
pub struct Watcher {
    proc_root: PathBuf,
    source: ResourceSource,
    procs: BTreeMap<u32, Proc>,
    /// The highest mmap offset per device at the first scan (None before it).
    horizon: Option<BTreeMap<u32, u64>>,
    /// Scans made.
    scans: u64,
    /// The resource table's last error, said once until it works again.
    netlink_said: bool,
    /// Processes that could not be read, with the mappings they had then (said once each;
    /// tried again when their mappings change).
    unreadable: BTreeMap<u32, Vec<Mapping>>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("proc_root", &self.proc_root)
            .field("procs", &self.procs.len())
            .finish_non_exhaustive()
    }
}

impl Watcher {
    /// Watches the processes under `proc_root` (`/proc`), asking `source` for the resources.
    pub fn new(proc_root: &Path, source: ResourceSource) -> Self {
        Self {
            proc_root: proc_root.to_path_buf(),
            source,
            procs: BTreeMap::new(),
            horizon: None,
            scans: 0,
            netlink_said: false,
            unreadable: BTreeMap::new(),
        }
    }

    /// Every queue of every process, by pid; a queue mapped by several only once.
    pub fn rings(&self) -> Vec<RingRegistration> {
        let mut seen = BTreeSet::new();
        self.procs
            .values()
            .flat_map(|p| p.rings.iter())
            .filter(|r| {
                r.key
                    .is_none_or(|k| seen.insert((k, r.pages.first().copied())))
            })
            .cloned()
            .collect()
    }

    /// Scans once: what appeared, changed or went away since the last scan.
    pub fn scan(&mut self) -> Changes {
        self.scans += 1;
        let table = self.table();
        let owned = table.as_ref().map(|t| self.by_process(t));
        let candidates = self.candidates(owned.as_ref());
        let seen = self.mappings(candidates.iter().copied().collect());
        let mut changes = Changes::default();
        let gone: Vec<u32> = self
            .procs
            .keys()
            .filter(|p| candidates.contains(p) && !seen.contains_key(p))
            .copied()
            .collect();
        for pid in gone {
            if let Some(p) = self.procs.remove(&pid) {
                changes.gone.push(p.summary(pid));
            }
        }
        self.unreadable
            .retain(|p, maps| !candidates.contains(p) || seen.get(p).is_some_and(|m| m == maps));
        let first = self.horizon.is_none();
        for (pid, maps) in seen {
            let o = owned
                .as_ref()
                .and_then(|o| o.get(&pid).cloned())
                .unwrap_or_default();
            let changed = match self.procs.get(&pid) {
                None => !self.unreadable.contains_key(&pid),
                Some(p) => p.maps != maps || p.owned != o,
            };
            if changed {
                changes.found.extend(self.read_process(pid, maps, o));
            }
        }
        if first {
            self.horizon = Some(self.highest_offsets());
        }
        changes
    }

    /// The processes whose `maps` this scan reads: those whose resources changed (new ones,
    /// and followed ones whose resources changed or went), or, every [`SWEEP_EVERY`] scans and
    /// without RDMA netlink, every process (the kernel does not list a resource whose creating
    /// thread has exited; a forked child owns none).
    fn candidates(&self, owned: Option<&BTreeMap<u32, Owned>>) -> BTreeSet<u32> {
        let sweep = owned.is_none() || self.scans % SWEEP_EVERY == 1;
        let mut out: BTreeSet<u32> = if sweep {
            self.all_pids()
                .into_iter()
                .chain(self.procs.keys().copied())
                .collect()
        } else {
            BTreeSet::new()
        };
        if let Some(o) = owned {
            let none = Owned::default();
            for (pid, p) in &self.procs {
                if o.get(pid).unwrap_or(&none) != &p.owned {
                    out.insert(*pid);
                }
            }
            out.extend(o.keys().filter(|p| !self.procs.contains_key(p)));
        }
        out
    }

    /// The resource table, or `None` (said once) when the kernel cannot be asked.
    fn table(&mut self) -> Option<Resources> {
        match (self.source)() {
            Ok(t) => {
                self.netlink_said = false;
                Some(t)
            }
            Err(e) => {
                if !self.netlink_said {
                    tracing::warn!("{e}: every process is looked at, queues registered untied");
                    self.netlink_said = true;
                }
                None
            }
        }
    }

    /// The table by process: a thread's resources are its process's (`Tgid`).
    fn by_process(&self, t: &Resources) -> BTreeMap<u32, Owned> {
        let mut out: BTreeMap<u32, Owned> = BTreeMap::new();
        let tgid = |tid: u32| self.tgid(tid).unwrap_or(tid);
        for (&tid, qpns) in &t.qps {
            out.entry(tgid(tid)).or_default().qpns.extend(qpns);
        }
        for (&tid, &n) in &t.cqs {
            *out.entry(tgid(tid)).or_default().cqs.get_or_insert(0) += n;
        }
        for o in out.values_mut() {
            o.qpns.sort_unstable();
            o.cqs.get_or_insert(0);
        }
        if let Some(srqs) = &t.srqs {
            for o in out.values_mut() {
                o.srqs = Some(0);
            }
            for (&tid, &n) in srqs {
                *out.entry(tgid(tid)).or_default().srqs.get_or_insert(0) += n;
            }
        }
        out
    }

    /// The process a thread belongs to (`Tgid:` in `/proc/TID/status`).
    fn tgid(&self, tid: u32) -> Option<u32> {
        let status = std::fs::read_to_string(self.proc_root.join(tid.to_string()).join("status"));
        status
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse().ok())
    }

    fn all_pids(&self) -> Vec<u32> {
        let Ok(dir) = std::fs::read_dir(&self.proc_root) else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
            .collect()
    }

    /// The uverbs mappings of `pids` that have some, the processes already followed first
    /// (a newcomer never displaces one), at most [`MAX_PROCS`] of them.
    fn mappings(&self, mut pids: Vec<u32>) -> BTreeMap<u32, Vec<Mapping>> {
        pids.sort_by_key(|p| (!self.procs.contains_key(p), *p));
        pids.dedup();
        let mut out = BTreeMap::new();
        for pid in pids {
            if out.len() >= MAX_PROCS {
                break;
            }
            // A process that exits between the listing and the read has no maps: skipped.
            let Ok(maps) = read_maps(&self.proc_root.join(pid.to_string()).join("maps")) else {
                continue;
            };
            let m = uverbs_mappings(&maps);
            if !m.is_empty() {
                out.insert(pid, m);
            }
        }
        out
    }

    fn highest_offsets(&self) -> BTreeMap<u32, u64> {
        let mut h = BTreeMap::new();
        for m in self.procs.values().flat_map(|p| &p.maps) {
            let e = h.entry(m.dev).or_insert(0);
            *e = (*e).max(m.pgoff);
        }
        for m in self.unreadable.values().flatten() {
            let e = h.entry(m.dev).or_insert(0);
            *e = (*e).max(m.pgoff);
        }
        h
    }

    /// Whether a queue was made after the first scan.
    fn new_since_first_scan(&self, key: Option<u64>) -> bool {
        let (Some(h), Some(k)) = (&self.horizon, key) else {
            return false;
        };
        let (dev, pgoff) = (
            u32::try_from(k >> 48).unwrap_or(u32::MAX),
            k & ((1 << 48) - 1),
        );
        h.get(&dev).is_none_or(|&top| pgoff > top)
    }

    /// Reads a process's queues again; what it has now, if that changed.
    fn read_process(&mut self, pid: u32, maps: Vec<Mapping>, owned: Owned) -> Option<ProcQueues> {
        let mut rings = match process_rings(&self.proc_root, pid, &owned) {
            Ok(r) => r,
            Err(e) => {
                self.unreadable_once(pid, maps, &e);
                return None;
            }
        };
        for r in &mut rings {
            r.start = self.new_since_first_scan(r.key).then_some(0);
        }
        let old = self.procs.remove(&pid);
        let comm = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_default();
        let same = old.as_ref().is_some_and(|o| o.rings == rings);
        let p = Proc {
            comm,
            maps,
            owned,
            rings,
        };
        let summary = p.summary(pid);
        self.procs.insert(pid, p);
        (!same).then_some(summary)
    }

    fn unreadable_once(&mut self, pid: u32, maps: Vec<Mapping>, e: &DiscoverError) {
        if self.unreadable.insert(pid, maps).is_none() {
            tracing::warn!("process {pid}: its queues cannot be read: {e}");
        }
    }
}
