//! The discovery loop's state: which processes have soft-RoCE queues, rescanned every interval,
//! so new queues are registered soon after their creation and a process's queues are
//! unregistered when it exits.
//!
//! Each scan reads every process's `maps` (cheap: the uverbs lines are the only ones kept) and
//! reads headers and page lists again only for a process whose uverbs mappings changed. The QP
//! table (RDMA netlink) is asked only then, too.
//!
//! **Where counting starts.** A queue present at the agent's first scan may be old: the host
//! counts it from its consumer index when it first sees it (`start` absent). A queue that
//! appears in a later scan was created less than one interval before: it is counted from index
//! 0, i.e. from its first work request, as long as it has not gone once round its ring before
//! the host attaches (the host counts a lap it sees as an overrun).

use super::rdma_nl::NetlinkError;
use super::{process_rings, uverbs_mappings, DiscoverError, Mapping};
use resex_proto::{RingKind, RingRegistration};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where QPNs come from: each process's QPNs ascending (the RDMA netlink in the agent).
pub type QpnSource = Box<dyn FnMut() -> Result<BTreeMap<u32, Vec<u32>>, NetlinkError> + Send>;

/// How often a process whose send queues could not be tied to QPs is asked about again.
const UNTIED_RETRIES: u32 = 10;
/// The most processes followed at once (bounded work per scan).
pub const MAX_PROCS: usize = 256;

/// What one process was found with, or left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcQueues {
    /// Its pid.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
    /// Its queues.
    pub queues: usize,
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
    rings: Vec<RingRegistration>,
    untied_tries: u32,
}

impl Proc {
    fn summary(&self, pid: u32) -> ProcQueues {
        ProcQueues {
            pid,
            comm: self.comm.clone(),
            queues: self.rings.len(),
            qps: self
                .rings
                .iter()
                .filter(|r| r.kind == RingKind::Sq)
                .filter_map(|r| r.qpn)
                .collect(),
        }
    }

    fn untied(&self) -> bool {
        self.rings
            .iter()
            .any(|r| r.kind == RingKind::Sq && r.qpn.is_none())
    }
}

/// The processes with queues, as of the last scan.
pub struct Watcher {
    proc_root: PathBuf,
    qpns: QpnSource,
    procs: BTreeMap<u32, Proc>,
    scans: u64,
    /// The QP table's last error, said once until it works again.
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
            .field("scans", &self.scans)
            .finish()
    }
}

impl Watcher {
    /// Watches the processes under `proc_root` (`/proc`), asking `qpns` for the QP table.
    pub fn new(proc_root: &Path, qpns: QpnSource) -> Self {
        Self {
            proc_root: proc_root.to_path_buf(),
            qpns,
            procs: BTreeMap::new(),
            scans: 0,
            netlink_said: false,
            unreadable: BTreeMap::new(),
        }
    }

    /// Every queue of every process, by pid.
    pub fn rings(&self) -> Vec<RingRegistration> {
        self.procs
            .values()
            .flat_map(|p| p.rings.iter().cloned())
            .collect()
    }

    /// Scans once: what appeared, changed or went away since the last scan.
    pub fn scan(&mut self) -> Changes {
        let seen = self.uverbs_processes();
        let mut changes = Changes::default();
        let gone: Vec<u32> = self
            .procs
            .keys()
            .filter(|p| !seen.contains_key(p))
            .copied()
            .collect();
        for pid in gone {
            if let Some(p) = self.procs.remove(&pid) {
                changes.gone.push(p.summary(pid));
            }
        }
        self.unreadable
            .retain(|p, maps| seen.get(p).is_some_and(|m| m == maps));
        let changed: Vec<(u32, Vec<Mapping>)> = seen
            .into_iter()
            .filter(|(pid, maps)| match self.procs.get(pid) {
                None => !self.unreadable.contains_key(pid),
                Some(p) => &p.maps != maps || (p.untied() && p.untied_tries < UNTIED_RETRIES),
            })
            .collect();
        if !changed.is_empty() {
            let table = self.qp_table();
            for (pid, maps) in changed {
                let qpns = table.get(&pid).map_or(&[][..], Vec::as_slice);
                if let Some(found) = self.read_process(pid, maps, qpns) {
                    changes.found.push(found);
                }
            }
        }
        self.scans += 1;
        changes
    }

    /// The pids with uverbs mappings, and those mappings (at most [`MAX_PROCS`] processes).
    fn uverbs_processes(&self) -> BTreeMap<u32, Vec<Mapping>> {
        let mut out = BTreeMap::new();
        let Ok(dir) = std::fs::read_dir(&self.proc_root) else {
            return out;
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            // A process that exits between the listing and the read has no maps: skipped.
            let Ok(maps) = std::fs::read_to_string(e.path().join("maps")) else {
                continue;
            };
            let m = uverbs_mappings(&maps);
            if !m.is_empty() && out.len() < MAX_PROCS {
                out.insert(pid, m);
            }
        }
        out
    }

    /// The QP table, or an empty one (said once) when the kernel cannot be asked.
    fn qp_table(&mut self) -> BTreeMap<u32, Vec<u32>> {
        match (self.qpns)() {
            Ok(t) => {
                self.netlink_said = false;
                t
            }
            Err(e) => {
                if !self.netlink_said {
                    tracing::warn!("{e}: queues are registered without their QPNs");
                    self.netlink_said = true;
                }
                BTreeMap::new()
            }
        }
    }

    /// Reads a process's queues again; what it has now, if it changed.
    fn read_process(&mut self, pid: u32, maps: Vec<Mapping>, qpns: &[u32]) -> Option<ProcQueues> {
        let mut rings = match process_rings(&self.proc_root, pid, qpns) {
            Ok(r) => r,
            Err(e) => {
                self.unreadable_once(pid, maps, &e);
                return None;
            }
        };
        let old = self.procs.remove(&pid);
        for r in &mut rings {
            r.start = match old
                .as_ref()
                .and_then(|o| o.rings.iter().find(|o| o.pages == r.pages))
            {
                // A queue already registered keeps where its counting started.
                Some(o) => o.start,
                // New since the last scan: counted from its first entry.
                None if self.scans > 0 => Some(0),
                None => None,
            };
        }
        let comm = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_default();
        let untied_tries = old.as_ref().map_or(0, |o| o.untied_tries + 1);
        let same = old.as_ref().is_some_and(|o| o.rings == rings);
        let p = Proc {
            comm,
            maps,
            rings,
            untied_tries,
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
