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
//! entry, rounded up to a power of two); a completion's is smaller (128 on x86-64). So, in
//! `pgoff` order: a queue of 256-byte slots or more is a send queue and the queue after it is
//! its receive queue; any other queue is a CQ. QPs on a shared receive queue (no receive queue of
//! their own) are not told apart by this rule: [`classify`] documents what it then does.

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
    /// The mmap offset the kernel gave the queue (its creation order).
    pub pgoff: u64,
}

/// The uverbs mappings listed in a `/proc/PID/maps` text, in `pgoff` order. Lines that do not
/// parse are skipped (the file is the kernel's, but the list must not trust its length).
pub fn uverbs_mappings(maps: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = maps.lines().filter_map(parse_line).collect();
    out.sort_by_key(|m| m.pgoff);
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
    let (a, b) = range.split_once('-')?;
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let (start, end) = (hex(a)?, hex(b)?);
    (end > start).then_some(Mapping {
        start,
        end,
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

/// What each queue is, in `pgoff` order (see the module's documentation), and the QPN of each
/// send and receive queue: the `k`-th send queue is the process's `k`-th QP of `qpns` (its QPs
/// in creation order, e.g. from the kernel's RDMA netlink), when there are as many QPs as send
/// queues; otherwise no queue is tied to a QP (completions still name theirs).
///
/// A QP on a shared receive queue has no receive queue of its own, so the queue after its send
/// queue is taken as its receive queue whatever it is: a CQ created right after such a QP is
/// then watched as a receive queue, which counts nothing (its completions are lost, never
/// invented).
pub fn classify(queues: &[Queue], qpns: &[u32]) -> Vec<(RingKind, Option<u32>)> {
    let mut kinds = Vec::with_capacity(queues.len());
    let mut i = 0;
    while i < queues.len() {
        if queues[i].elem_size >= MIN_SQ_ELEM {
            kinds.push(RingKind::Sq);
            if i + 1 < queues.len() {
                kinds.push(RingKind::Rq);
                i += 1;
            }
        } else {
            kinds.push(RingKind::Cq);
        }
        i += 1;
    }
    let sends = kinds.iter().filter(|&&k| k == RingKind::Sq).count();
    let mut next = qpns.iter().copied().filter(|_| sends == qpns.len());
    let mut qpn = None;
    kinds
        .into_iter()
        .map(|k| {
            match k {
                RingKind::Sq => qpn = next.next(),
                RingKind::Cq => return (k, None),
                RingKind::Rq => {}
            }
            (k, qpn)
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

/// Every soft-RoCE queue of process `pid` under `proc_root` (`/proc` in a guest), as the
/// registration's rings, with the QPNs of its QPs in creation order (`qpns`, possibly empty).
pub fn process_rings(
    proc_root: &Path,
    pid: u32,
    qpns: &[u32],
) -> Result<Vec<RingRegistration>, DiscoverError> {
    let dir = proc_root.join(pid.to_string());
    let maps_path = dir.join("maps");
    let maps = std::fs::read_to_string(&maps_path).map_err(io(&maps_path))?;
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
    for (q, (kind, qpn)) in queues.iter().zip(classify(&queues, qpns)) {
        rings.push(RingRegistration {
            format: RingFormat::Rxe,
            kind,
            qpn,
            pages: guest_pages(&pagemap, &pagemap_path, q.map)?,
            offset: 0,
            slots: q.slots,
            elem_size: q.elem_size,
            start: None,
        });
    }
    Ok(rings)
}

#[cfg(test)]
mod tests;
