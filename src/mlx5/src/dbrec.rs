//! Doorbell records: the CQ's consumer index and the QP's send and receive counters, in guest
//! memory.
//!
//! A doorbell record is 8 bytes, 8-byte aligned (softhca and the monitor refuse any other):
//! `dbrec[0]` and `dbrec[1]`, two big-endian words. The device and the guest race on them, so
//! each word must change at once, as the 32-bit store of rdma-core's provider does on hardware.
//! [`GuestMemory`] copies promise no atomicity below an aligned 8-byte word (a 4-byte copy is
//! done byte by byte: a reader could see the producer counter 0x01ff -> 0x0200 as 0x02ff or
//! 0x0100, a doorbell "beyond the ring" or "behind" it). So every access here is one copy of
//! the whole aligned record: one 8-byte load to read a word, and a read-modify-write of the
//! record, one 8-byte store, to write one. The guest must not write the two words of a record
//! from two threads at once (the shim writes a QP's under the QP's lock; a CQ's only its
//! poller writes).

use resex_guestmem::{GuestAddress, GuestMemory, MemError};

/// Offset of the send counter in a QP doorbell record (`dbrec[1]`; `dbrec[0]` is the RQ's).
pub const SQ_DBREC_OFFSET: u64 = 4;

/// The whole record, read in one access.
fn read_record<M: GuestMemory + ?Sized>(mem: &M, dbrec: GuestAddress) -> Result<[u8; 8], MemError> {
    let mut b = [0u8; 8];
    mem.read(dbrec, &mut b)?;
    Ok(b)
}

/// Word `i` (0 or 1) of the record, big-endian.
fn read_word<M: GuestMemory + ?Sized>(
    mem: &M,
    dbrec: GuestAddress,
    i: usize,
) -> Result<u32, MemError> {
    let b = read_record(mem, dbrec)?;
    Ok(u32::from_be_bytes([
        b[4 * i],
        b[4 * i + 1],
        b[4 * i + 2],
        b[4 * i + 3],
    ]))
}

/// Replaces word `i` (0 or 1) of the record, keeping the other: one load, one store of the
/// whole record.
fn write_word<M: GuestMemory + ?Sized>(
    mem: &M,
    dbrec: GuestAddress,
    i: usize,
    v: u32,
) -> Result<(), MemError> {
    let mut b = read_record(mem, dbrec)?;
    b[4 * i..4 * i + 4].copy_from_slice(&v.to_be_bytes());
    mem.write(dbrec, &b)
}

/// CQ doorbell record word 0: `be32(consumer_index & 0xffffff)`.
pub fn read_cq_ci<M: GuestMemory + ?Sized>(mem: &M, dbrec: GuestAddress) -> Result<u32, MemError> {
    Ok(read_word(mem, dbrec, 0)? & 0x00ff_ffff)
}

/// Writes the CQ consumer index (what the guest's poll_cq does); the arm word is kept.
pub fn write_cq_ci<M: GuestMemory + ?Sized>(
    mem: &M,
    dbrec: GuestAddress,
    ci: u32,
) -> Result<(), MemError> {
    write_word(mem, dbrec, 0, ci & 0x00ff_ffff)
}

/// QP doorbell record word 1: `be32(producer_bb_count & 0xffff)`.
pub fn read_sq_pi<M: GuestMemory + ?Sized>(mem: &M, dbrec: GuestAddress) -> Result<u16, MemError> {
    let v = read_word(mem, dbrec, 1)?;
    Ok(u16::from_be_bytes([v.to_be_bytes()[2], v.to_be_bytes()[3]]))
}

/// Writes the SQ producer counter (what the guest's post_send does before ringing the bell);
/// the receive counter is kept.
pub fn write_sq_pi<M: GuestMemory + ?Sized>(
    mem: &M,
    dbrec: GuestAddress,
    pi: u16,
) -> Result<(), MemError> {
    write_word(mem, dbrec, 1, u32::from(pi))
}

/// QP doorbell record word 0: `be32(rq_head & 0xffff)`, receive WQEs posted so far.
pub fn read_rq_pi<M: GuestMemory + ?Sized>(mem: &M, dbrec: GuestAddress) -> Result<u16, MemError> {
    let v = read_word(mem, dbrec, 0)?;
    Ok(u16::from_be_bytes([v.to_be_bytes()[2], v.to_be_bytes()[3]]))
}

/// Writes the RQ producer counter (what the guest's post_recv does); the send counter is kept.
pub fn write_rq_pi<M: GuestMemory + ?Sized>(
    mem: &M,
    dbrec: GuestAddress,
    head: u16,
) -> Result<(), MemError> {
    write_word(mem, dbrec, 0, u32::from(head))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index16;
    use proptest::prelude::*;
    use resex_guestmem::VecMemory;
    use std::sync::atomic::{fence, AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    #[test]
    fn doorbell_words_are_big_endian_and_masked() {
        let m = VecMemory::new(64);
        write_cq_ci(&m, GuestAddress(8), 0x0123_4567).unwrap();
        assert_eq!(m.to_vec()[8..12], [0x00, 0x23, 0x45, 0x67]);
        assert_eq!(read_cq_ci(&m, GuestAddress(8)).unwrap(), 0x23_4567);
        write_sq_pi(&m, GuestAddress(16), 0xabcd).unwrap();
        assert_eq!(m.to_vec()[20..24], [0, 0, 0xab, 0xcd]);
        assert_eq!(read_sq_pi(&m, GuestAddress(16)).unwrap(), 0xabcd);
        assert!(read_cq_ci(&m, GuestAddress(62)).is_err());
        write_rq_pi(&m, GuestAddress(16), 0x1234).unwrap();
        assert_eq!(m.to_vec()[16..20], [0, 0, 0x12, 0x34]);
        assert_eq!(read_rq_pi(&m, GuestAddress(16)).unwrap(), 0x1234);
        assert_eq!(
            read_sq_pi(&m, GuestAddress(16)).unwrap(),
            0xabcd,
            "RQ write kept SQ"
        );
    }

    /// Guest memory that records every access (address, length).
    struct Recording {
        mem: VecMemory,
        log: Mutex<Vec<(u64, usize)>>,
    }

    impl Recording {
        fn new() -> Self {
            Self {
                mem: VecMemory::new(256),
                log: Mutex::new(Vec::new()),
            }
        }
        fn take(&self) -> Vec<(u64, usize)> {
            std::mem::take(&mut *self.log.lock().unwrap())
        }
    }

    impl GuestMemory for Recording {
        fn size(&self) -> u64 {
            self.mem.size()
        }
        fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
            self.log.lock().unwrap().push((addr.0, buf.len()));
            self.mem.read(addr, buf)
        }
        fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
            self.log.lock().unwrap().push((addr.0, data.len()));
            self.mem.write(addr, data)
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Sq(u16),
        Rq(u16),
        Ci(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u16>().prop_map(Op::Sq),
            any::<u16>().prop_map(Op::Rq),
            any::<u32>().prop_map(Op::Ci),
        ]
    }

    proptest! {
        /// Every access to a doorbell record is one copy of the whole aligned 8-byte record
        /// (the only copy guest memory makes at once: a 4-byte copy is made byte by byte and
        /// a racing reader could see half a counter), and a word written is read back with
        /// the other word kept.
        #[test]
        fn every_access_is_the_whole_record(ops in proptest::collection::vec(op(), 1..40)) {
            let m = Recording::new();
            let (qp, cq) = (GuestAddress(64), GuestAddress(128));
            let (mut sq, mut rq, mut ci) = (0u16, 0u16, 0u32);
            for o in ops {
                match o {
                    Op::Sq(v) => { write_sq_pi(&m, qp, v).unwrap(); sq = v; }
                    Op::Rq(v) => { write_rq_pi(&m, qp, v).unwrap(); rq = v; }
                    Op::Ci(v) => { write_cq_ci(&m, cq, v).unwrap(); ci = v & 0x00ff_ffff; }
                }
                prop_assert_eq!(read_sq_pi(&m, qp).unwrap(), sq);
                prop_assert_eq!(read_rq_pi(&m, qp).unwrap(), rq);
                prop_assert_eq!(read_cq_ci(&m, cq).unwrap(), ci);
                for (addr, len) in m.take() {
                    prop_assert!(
                        (addr == qp.0 || addr == cq.0) && len == 8,
                        "access of {} bytes at {:#x} after {:?}", len, addr, o
                    );
                }
            }
        }
    }

    /// The symptom itself: a host thread polling the send counter while the guest rings the
    /// doorbell must never see it go backwards or jump ahead of what was posted (a torn read
    /// of 0x01ff -> 0x0200 gave 0x0100 or 0x02ff: softhca's "SQ doorbell beyond the ring").
    fn race(m: Arc<dyn GuestMemory>) {
        const WRITES: u32 = 1 << 22;
        let db = GuestAddress(8);
        // The last counter written (a write of k is done once `posted` says k).
        let posted = Arc::new(AtomicU32::new(0));
        let writer = {
            let (m, posted) = (m.clone(), posted.clone());
            std::thread::spawn(move || {
                for pi in 1..=WRITES {
                    fence(Ordering::Release);
                    write_sq_pi(&*m, db, index16(pi)).unwrap();
                    posted.store(pi, Ordering::Release);
                }
            })
        };
        let mut torn = Vec::new();
        loop {
            let before = posted.load(Ordering::Acquire);
            if before == WRITES {
                break;
            }
            let pi = read_sq_pi(&*m, db).unwrap();
            fence(Ordering::Acquire);
            // The write read was of a k in [before, after + 1].
            let after = posted.load(Ordering::Acquire);
            let span = after + 1 - before;
            if span < 0x8000 && u32::from(pi.wrapping_sub(index16(before))) > span {
                torn.push((before, pi, after));
            }
        }
        writer.join().unwrap();
        assert!(
            torn.is_empty(),
            "{} torn send counters (posted before, read, posted after): {:x?}",
            torn.len(),
            &torn[..torn.len().min(8)]
        );
    }

    /// The same over plain memory and over a RAM file (the embedded host's guests).
    #[test]
    fn a_racing_reader_never_sees_a_torn_send_counter() {
        race(Arc::new(VecMemory::new(64)));
        let dir = tempfile::tempdir().unwrap();
        let ram = resex_guestmem::FileMemory::create(&dir.path().join("ram"), 4096).unwrap();
        race(Arc::new(ram));
    }
}
