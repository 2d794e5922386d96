//! Ring writers: the guest provider posting send WQEs, and the HCA producing CQEs.
//!
//! These are what the software HCA, the guest shim and the tests use to put real mlx5 bytes into
//! guest memory. Ordering: a CQE's body is written before its `op_own` byte, with a release
//! fence between, so a reader that loads `op_own` and then fences (acquire) sees the whole entry.

use crate::cqe::{Cqe, CqeSize, INITIAL_OP_OWN};
use crate::dbrec::write_sq_pi;
use crate::wqe::{WqeError, WqeSpec};
use crate::SEND_WQE_BB;
use resex_guestmem::{GuestAddress, GuestMemory, MemError, PageRing};
use std::sync::atomic::{fence, Ordering};

/// A ring write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Guest memory refused the access.
    #[error(transparent)]
    Mem(#[from] MemError),
    /// The WQE could not be built.
    #[error(transparent)]
    Wqe(#[from] WqeError),
    /// The send queue has no room for the WQE.
    #[error("send queue full: {need} basic blocks needed, {free} free")]
    SqFull {
        /// Basic blocks the WQE needs.
        need: u32,
        /// Basic blocks free.
        free: u32,
    },
    /// The ring geometry is not a power of two or does not match the pages.
    #[error("bad ring geometry: {0}")]
    Geometry(&'static str),
}

/// The guest side of a send queue: writes WQEs at the producer counter and publishes it in the
/// doorbell record (`dbrec[1]`), as rdma-core's mlx5 provider does.
#[derive(Debug)]
pub struct SqWriter {
    ring: PageRing,
    wqe_cnt: u32,
    dbrec: GuestAddress,
    /// Producer counter in basic blocks (wrapping; the index field is its low 16 bits).
    pi: u32,
    /// Consumer counter: basic blocks known completed.
    ci: u32,
}

impl SqWriter {
    /// A writer for an SQ of `wqe_cnt` basic blocks (a power of two) in `ring`, starting at
    /// producer counter `start`.
    pub fn new(
        ring: PageRing,
        wqe_cnt: u32,
        dbrec: GuestAddress,
        start: u32,
    ) -> Result<SqWriter, WriteError> {
        if !wqe_cnt.is_power_of_two() || u64::from(wqe_cnt) * SEND_WQE_BB != ring.len() {
            return Err(WriteError::Geometry(
                "SQ wqe_cnt must be a power of two matching the ring",
            ));
        }
        Ok(SqWriter {
            ring,
            wqe_cnt,
            dbrec,
            pi: start,
            ci: start,
        })
    }

    /// Producer counter (basic blocks posted so far, wrapping).
    pub fn pi(&self) -> u32 {
        self.pi
    }

    /// Free basic blocks.
    pub fn free(&self) -> u32 {
        self.wqe_cnt - self.pi.wrapping_sub(self.ci).min(self.wqe_cnt)
    }

    /// Marks every basic block before the WQE at index `wqe_index` (and that WQE, of `bbs`
    /// blocks) as completed: what the guest does when it polls a requester CQE.
    pub fn complete_through(&mut self, wqe_index: u16, bbs: u32) {
        let delta = u32::from(wqe_index.wrapping_sub(crate::index16(self.ci)));
        self.ci = self.ci.wrapping_add(delta + bbs);
    }

    /// Builds and writes one WQE at the producer counter (wrapping at the ring end); returns its
    /// index and size in basic blocks. Does not ring the doorbell.
    pub fn post<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        spec: &WqeSpec<'_>,
    ) -> Result<(u16, u32), WriteError> {
        let index = crate::index16(self.pi);
        let bytes = spec.build(index)?;
        let bbs = u32::try_from(bytes.len() as u64)
            .unwrap_or(u32::MAX)
            .div_ceil(64);
        if bbs > self.free() {
            return Err(WriteError::SqFull {
                need: bbs,
                free: self.free(),
            });
        }
        let slot = u64::from(self.pi & (self.wqe_cnt - 1)) * SEND_WQE_BB;
        self.ring.write(mem, slot, &bytes)?;
        self.pi = self.pi.wrapping_add(bbs);
        Ok((index, bbs))
    }

    /// Publishes the producer counter in the doorbell record (release-ordered after the WQEs).
    pub fn ring_doorbell<M: GuestMemory + ?Sized>(&self, mem: &M) -> Result<(), MemError> {
        fence(Ordering::Release);
        write_sq_pi(mem, self.dbrec, crate::index16(self.pi))
    }
}

/// The HCA side of a completion queue: writes CQEs at the producer index with the owner bit of
/// the current lap.
#[derive(Debug)]
pub struct CqWriter {
    ring: PageRing,
    log_cnt: u32,
    size: CqeSize,
    /// Producer index (24 bits, wrapping).
    pi: u32,
}

impl CqWriter {
    /// A writer for a CQ of `cqe_cnt` entries (a power of two, at most 2^24) of `size` bytes.
    pub fn new(
        ring: PageRing,
        cqe_cnt: u32,
        size: CqeSize,
        start: u32,
    ) -> Result<CqWriter, WriteError> {
        if !cqe_cnt.is_power_of_two()
            || cqe_cnt > 1 << 24
            || u64::from(cqe_cnt) * size.bytes() != ring.len()
        {
            return Err(WriteError::Geometry(
                "CQ cqe_cnt must be a power of two <= 2^24 matching the ring",
            ));
        }
        Ok(CqWriter {
            ring,
            log_cnt: cqe_cnt.trailing_zeros(),
            size,
            pi: start & 0x00ff_ffff,
        })
    }

    /// Number of entries.
    pub fn cqe_cnt(&self) -> u32 {
        1 << self.log_cnt
    }

    /// Producer index (24 bits).
    pub fn pi(&self) -> u32 {
        self.pi
    }

    /// Zeroes every entry and marks it INVALID with owner 0, as CQ creation does.
    pub fn init<M: GuestMemory + ?Sized>(&self, mem: &M) -> Result<(), MemError> {
        let mut entry = vec![0u8; usize::try_from(self.size.bytes()).unwrap_or(64)];
        if let Some(last) = entry.last_mut() {
            *last = INITIAL_OP_OWN;
        }
        for i in 0..u64::from(self.cqe_cnt()) {
            self.ring.write(mem, i * self.size.bytes(), &entry)?;
        }
        Ok(())
    }

    /// True when a CQE can be written without overwriting one the consumer (at `ci`) has not
    /// polled yet.
    pub fn has_room(&self, ci: u32) -> bool {
        (self.pi.wrapping_sub(ci) & 0x00ff_ffff) < self.cqe_cnt()
    }

    /// Writes `cqe` at the producer index with the lap's owner bit (the `owner` field of `cqe`
    /// is ignored) and advances. The caller checks [`CqWriter::has_room`] when it models a
    /// well-behaved HCA; the lap tests deliberately do not.
    pub fn push<M: GuestMemory + ?Sized>(&mut self, mem: &M, cqe: &Cqe) -> Result<(), MemError> {
        let mut c = *cqe;
        c.owner = (self.pi >> self.log_cnt) & 1 == 1;
        let bytes = c.encode();
        let base =
            u64::from(self.pi & (self.cqe_cnt() - 1)) * self.size.bytes() + self.size.cqe_offset();
        self.ring.write(mem, base, &bytes[..63])?;
        fence(Ordering::Release);
        self.ring.write(mem, base + 63, &bytes[63..])?;
        self.pi = (self.pi + 1) & 0x00ff_ffff;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::{cqe_op, send_op};
    use crate::cqe::is_valid_for;
    use crate::wqe::{parse_send_wqe, DataSeg};
    use resex_guestmem::VecMemory;

    #[test]
    fn wqe_that_wraps_the_ring_end_lands_at_block_zero() {
        let mem = VecMemory::new(4 * 4096);
        let ring = PageRing::new(&[8192], 0, 4 * 64, mem.size()).unwrap();
        let mut sq = SqWriter::new(ring.clone(), 4, GuestAddress(0), 3).unwrap();
        let sges = [DataSeg {
            byte_count: 10,
            lkey: 1,
            addr: 2,
        }; 5];
        let spec = WqeSpec {
            sges: &sges,
            ..WqeSpec::new(send_op::SEND, 9)
        };
        let (idx, bbs) = sq.post(&mem, &spec).unwrap();
        assert_eq!((idx, bbs), (3, 2));
        let mut b = vec![0u8; 6 * 16];
        ring.read(&mem, 3 * 64, &mut b).unwrap();
        let w = parse_send_wqe(&b).unwrap();
        assert_eq!(w.payload.len(), 50);
        sq.ring_doorbell(&mem).unwrap();
        assert_eq!(crate::dbrec::read_sq_pi(&mem, GuestAddress(0)).unwrap(), 5);
        assert_eq!(sq.post(&mem, &spec).unwrap(), (5, 2));
        assert!(matches!(
            sq.post(&mem, &spec),
            Err(WriteError::SqFull { need: 2, free: 0 })
        ));
    }

    #[test]
    fn sq_refuses_to_overwrite_uncompleted_blocks() {
        let mem = VecMemory::new(8192);
        let ring = PageRing::new(&[4096], 0, 2 * 64, mem.size()).unwrap();
        let mut sq = SqWriter::new(ring, 2, GuestAddress(0), 0).unwrap();
        let spec = WqeSpec::new(send_op::NOP, 1);
        sq.post(&mem, &spec).unwrap();
        sq.post(&mem, &spec).unwrap();
        assert!(matches!(
            sq.post(&mem, &spec),
            Err(WriteError::SqFull { need: 1, free: 0 })
        ));
        sq.complete_through(0, 1);
        assert_eq!(sq.free(), 1);
    }

    #[test]
    fn cq_writer_flips_owner_each_lap_and_keeps_entries_128_aligned() {
        let mem = VecMemory::new(4 * 4096);
        let ring = PageRing::new(&[4096], 0, 4 * 128, mem.size()).unwrap();
        let mut cq = CqWriter::new(ring.clone(), 4, CqeSize::B128, 0).unwrap();
        cq.init(&mem).unwrap();
        for i in 0..6u32 {
            let c = Cqe {
                opcode: cqe_op::REQ,
                wqe_counter: i as u16,
                ..Cqe::default()
            };
            cq.push(&mem, &c).unwrap();
            let slot = u64::from(i % 4) * 128;
            let op_own = ring.read_u8(&mem, slot + 127).unwrap();
            assert!(is_valid_for(op_own, i, 2), "entry {i}");
            assert_eq!(
                ring.read_u8(&mem, slot + 63).unwrap(),
                0,
                "first half of a 128B entry untouched"
            );
        }
        assert_eq!(cq.pi(), 6);
        assert!(cq.has_room(3));
        assert!(!cq.has_room(2), "a full ring has no room");
    }

    #[test]
    fn geometry_is_checked() {
        let ring = PageRing::new(&[4096], 0, 192, 8192).unwrap();
        assert!(SqWriter::new(ring.clone(), 3, GuestAddress(0), 0).is_err());
        assert!(CqWriter::new(ring, 3, CqeSize::B64, 0).is_err());
    }
}
