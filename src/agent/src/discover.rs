//! Finding soft-RoCE queues without the application's help (issue 34, item 2: the part that
//! reads a process).
//!
//! rxe's queues are kernel buffers that the provider maps into the process from
//! `/dev/infiniband/uverbs*`. Each mapping starts with the queue's own header
//! (`struct rxe_queue_buf`: `log2_elem_size` at byte 0, `index_mask` at byte 4), and the mapping
//! is exactly the header and its slots, rounded up to pages. The agent (root in the guest) reads
//! `/proc/PID/maps` for those mappings, each header through `/proc/PID/mem`, and each page's
//! guest-physical address from `/proc/PID/pagemap`.
//!
//! **What each queue is.** The kernel gives each queue its mmap offset (the mapping's `pgoff`)
//! from one counter per device, in creation order: a CQ at `ibv_create_cq`, and for a QP its send
//! queue and then its receive queue (`rxe_qp_from_init`: `rxe_qp_init_req`, then
//! `rxe_qp_init_resp`). A send queue's slot is at least 256 bytes (a 208-byte WQE and one gather
//! entry, rounded up to a power of two); a completion's is 128 on x86-64. So, per device in
//! `pgoff` order: a queue of 256-byte slots or more is a send queue and the queue after it is
//! its receive queue; a 128-byte one otherwise is a CQ, checked against the kernel's count of
//! the process's CQs. Shared receive queues break these rules: [`classify`] documents what it
//! then does (it registers less, never a queue as what it is not).

pub mod fit;
#[doc(hidden)]
pub mod fixture;
pub mod rdma_nl;
pub mod serve;
pub mod watch;

use resex_proto::{RingFormat, RingKind, RingRegistration};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The device files whose mappings are queues.
pub const UVERBS_PREFIX: &str = "/dev/infiniband/uverbs";

/// `struct rxe_queue_buf`: `log2_elem_size` and `index_mask`, the first two words.
const LOG2_ELEM_SIZE: usize = 0;
const INDEX_MASK: usize = 4;
/// The header's bytes (the first slot's offset).
const HEADER_BYTES: u64 = 384;
/// The smallest send-queue slot: `sizeof(struct rxe_send_wqe)` (208) and one `rxe_sge` (16),
/// rounded up to a power of two.
pub const MIN_SQ_ELEM: u32 = 256;
const PAGE: u64 = 4096;
/// The largest queue taken (256 MiB, the host's page limit per registration).
const MAX_QUEUE_BYTES: u64 = 1 << 28;

/// A mapping of a uverbs device in a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// First virtual address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// The mmap offset the kernel gave the queue (its creation order on its device).
    pub pgoff: u64,
    /// The device (`N` of `/dev/infiniband/uverbsN`).
    pub dev: u32,
}

impl Mapping {
    /// The queue's id while it lives: its device and mmap offset (the kernel's counter per
    /// device never gives an offset twice).
    pub fn key(&self) -> u64 {
        (u64::from(self.dev) << 48) | (self.pgoff & ((1 << 48) - 1))
    }
}

/// The uverbs mappings listed in a `/proc/PID/maps` text, by device and then `pgoff`. Lines
/// that do not parse are skipped (the file is the kernel's, but the list must not trust its
/// length).
pub fn uverbs_mappings(maps: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = maps.lines().filter_map(parse_line).collect();
    out.sort_by_key(|m| (m.dev, m.pgoff));
    out
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut f = line.split_whitespace();
    let range = f.next()?;
    let _perms = f.next()?;
    let pgoff = f.next()?;
    let (_dev, _inode) = (f.next()?, f.next()?);
    let path = f.next()?;
    if !path.starts_with(UVERBS_PREFIX) {
        return None;
    }
    let dev: u32 = path[UVERBS_PREFIX.len()..].parse().ok()?;
    if dev >= 1 << 16 {
        return None; // the key holds 16 bits of device
    }
    let (a, b) = range.split_once('-')?;
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let (start, end) = (hex(a)?, hex(b)?);
    (end > start).then_some(Mapping {
        start,
        end,
        dev,
        pgoff: hex(pgoff)?,
    })
}

/// A queue as its header describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    /// Where it is mapped.
    pub map: Mapping,
    /// Slots (`index_mask + 1`).
    pub slots: u32,
    /// Bytes of one slot.
    pub elem_size: u32,
}

/// Why a process could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// A `/proc` file could not be read (the process exited, or no root).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An address range that wraps or names no page.
    #[error("address {0:#x}: the range wraps or names no page")]
    BadAddress(u64),
    /// `/proc/PID/pagemap` shows no frame numbers (the agent is not root).
    #[error("{0}: no frame numbers: reading guest-physical addresses needs root (CAP_SYS_ADMIN)")]
    NoFrames(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DiscoverError + '_ {
    move |source| DiscoverError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The header of the queue mapped at `m`, checked against the mapping: `None` when the words
/// cannot be a queue's or the queue is not the mapping's size.
pub fn read_queue(mem: &std::fs::File, m: Mapping) -> Option<Queue> {
    let mut h = [0u8; 8];
    mem.read_exact_at(&mut h, m.start).ok()?;
    let word = |at: usize| u32::from_ne_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let (log2, mask) = (word(LOG2_ELEM_SIZE), word(INDEX_MASK));
    let slots = mask.checked_add(1)?;
    if !slots.is_power_of_two() || slots > 1 << 20 || !(4..=16).contains(&log2) {
        return None;
    }
    let bytes = HEADER_BYTES + (u64::from(slots) << log2);
    // At most what a registration may name (65 536 pages): the page list below is this long.
    if bytes > MAX_QUEUE_BYTES {
        return None;
    }
    (bytes.div_ceil(PAGE) * PAGE == m.end - m.start).then_some(Queue {
        map: m,
        slots,
        elem_size: 1 << log2,
    })
}

/// What the kernel lists of a process's RDMA resources (its RDMA netlink), when it can be asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    /// Its QPNs in creation order.
    pub qpns: Vec<u32>,
    /// Its CQs (None: not known).
    pub cqs: Option<usize>,
    /// Its shared receive queues (None: not known).
    pub srqs: Option<usize>,
}

/// `sizeof(struct rxe_cqe)` rounded up to a power of two on x86-64 (the kernel's `ib_wc`).
pub const CQ_ELEM: u32 = 128;

/// What each queue is (`None`: not told apart, not registered), in the order given (by device,
/// then creation order; see the module's documentation), and the QPN of each send and receive
/// queue.
///
/// - Per device, a queue of at least [`MIN_SQ_ELEM`]-byte slots is a send queue and the next
///   one its receive queue; a queue of [`CQ_ELEM`]-byte slots otherwise is a CQ.
/// - A process with shared receive queues breaks both rules (a QP on one has no receive queue
///   of its own; a shared receive queue of one gather entry has 64-byte slots, of three or four
///   128, of six or more 256): then only its send queues are registered, and only when there
///   are as many as its QPs (otherwise nothing of it).
/// - When the kernel's CQ count is known and the 128-byte queues left do not match it, they are
///   not registered either: completions are lost, never invented from another queue's bytes.
/// - The `k`-th send queue is tied to the `k`-th QPN when the process uses one device and has
///   as many QPs as send queues; otherwise no queue is tied (completions still name theirs).
pub fn classify(queues: &[Queue], owned: &Owned) -> Vec<Option<(RingKind, Option<u32>)>> {
    let srq = owned.srqs.unwrap_or(0) > 0;
    let mut kinds: Vec<Option<RingKind>> = Vec::with_capacity(queues.len());
    let mut i = 0;
    while i < queues.len() {
        let q = &queues[i];
        if q.elem_size >= MIN_SQ_ELEM {
            kinds.push(Some(RingKind::Sq));
            let same_dev = queues.get(i + 1).is_some_and(|n| n.map.dev == q.map.dev);
            if same_dev && !srq {
                kinds.push(Some(RingKind::Rq));
                i += 1;
            }
        } else {
            kinds.push((q.elem_size == CQ_ELEM && !srq).then_some(RingKind::Cq));
        }
        i += 1;
    }
    let cqs = kinds.iter().filter(|k| **k == Some(RingKind::Cq)).count();
    if owned.cqs.is_some_and(|n| n != cqs) {
        for k in &mut kinds {
            if *k == Some(RingKind::Cq) {
                *k = None;
            }
        }
    }
    let sends = kinds.iter().filter(|k| **k == Some(RingKind::Sq)).count();
    // Beside shared receive queues (one of six or more gather entries has 256-byte slots too),
    // send queues are taken only as many as the process's QPs.
    if srq && sends != owned.qpns.len() {
        return vec![None; queues.len()];
    }
    let one_dev = queues.windows(2).all(|w| w[0].map.dev == w[1].map.dev);
    let tie = one_dev && sends == owned.qpns.len();
    let mut next = owned.qpns.iter().copied().filter(|_| tie);
    let mut qpn = None;
    kinds
        .into_iter()
        .map(|k| {
            let k = k?;
            match k {
                RingKind::Sq => qpn = next.next(),
                RingKind::Cq => return Some((k, None)),
                RingKind::Rq => {}
            }
            Some((k, qpn))
        })
        .collect()
}

/// The guest-physical address of each page of `m`, from the process's pagemap.
pub fn guest_pages(
    pagemap: &std::fs::File,
    path: &Path,
    m: Mapping,
) -> Result<Vec<u64>, DiscoverError> {
    let pages = ((m.end - m.start) / PAGE) as usize;
    let mut entries = vec![0u8; pages * 8];
    pagemap
        .read_exact_at(&mut entries, m.start / PAGE * 8)
        .map_err(io(path))?;
    let mut out = Vec::with_capacity(pages);
    for pfn in resex_guestmem::pagemap_frames(&entries) {
        match pfn {
            Some(0) => return Err(DiscoverError::NoFrames(path.to_path_buf())),
            Some(p) => out.push(p * PAGE),
            // A queue's pages are all mapped at mmap time; one that is not is not a queue.
            None => return Err(DiscoverError::NoFrames(path.to_path_buf())),
        }
    }
    Ok(out)
}

/// The most bytes of a `maps` file read (a process with more mappings is read in part: its
/// queues past that are not found).
pub const MAX_MAPS_BYTES: u64 = 8 << 20;

/// A process's `maps`, at most [`MAX_MAPS_BYTES`] of it.
pub fn read_maps(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)?
        .take(MAX_MAPS_BYTES)
        .read_to_string(&mut s)?;
    Ok(s)
}

/// Every soft-RoCE queue of process `pid` under `proc_root` (`/proc` in a guest) that
/// [`classify`] tells apart, as the registration's rings, each with its key.
pub fn process_rings(
    proc_root: &Path,
    pid: u32,
    owned: &Owned,
) -> Result<Vec<RingRegistration>, DiscoverError> {
    let dir = proc_root.join(pid.to_string());
    let maps_path = dir.join("maps");
    let maps = read_maps(&maps_path).map_err(io(&maps_path))?;
    let mappings = uverbs_mappings(&maps);
    if mappings.is_empty() {
        return Ok(Vec::new());
    }
    let mem_path = dir.join("mem");
    let mem = std::fs::File::open(&mem_path).map_err(io(&mem_path))?;
    let queues: Vec<Queue> = mappings
        .into_iter()
        .filter_map(|m| read_queue(&mem, m))
        .collect();
    let pagemap_path = dir.join("pagemap");
    let pagemap = std::fs::File::open(&pagemap_path).map_err(io(&pagemap_path))?;
    let mut rings = Vec::with_capacity(queues.len());
    for (q, c) in queues.iter().zip(classify(&queues, owned)) {
        let Some((kind, qpn)) = c else {
            continue;
        };
        rings.push(RingRegistration {
            format: RingFormat::Rxe,
            kind,
            qpn,
            pages: guest_pages(&pagemap, &pagemap_path, q.map)?,
            offset: 0,
            slots: q.slots,
            elem_size: q.elem_size,
            start: None,
            key: Some(q.map.key()),
        });
    }
    Ok(rings)
}

#[cfg(test)]
mod tests;
