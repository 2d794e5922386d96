//! Doorbell records: the CQ's consumer index and the SQ's producer counter, in guest memory.

use resex_guestmem::{GuestAddress, GuestMemory, MemError};

/// CQ doorbell record word 0: `be32(consumer_index & 0xffffff)`.
pub fn read_cq_ci<M: GuestMemory + ?Sized>(mem: &M, dbrec: GuestAddress) -> Result<u32, MemError> {
    Ok(mem.read_be32(dbrec)? & 0x00ff_ffff)
}

/// Writes the CQ consumer index (what the guest's poll_cq does).
pub fn write_cq_ci<M: GuestMemory + ?Sized>(
    mem: &M,
    dbrec: GuestAddress,
    ci: u32,
) -> Result<(), MemError> {
    mem.write_be32(dbrec, ci & 0x00ff_ffff)
}

/// Offset of the send counter in a QP doorbell record (`dbrec[1]`; `dbrec[0]` is the RQ's).
pub const SQ_DBREC_OFFSET: u64 = 4;

/// QP doorbell record word 1: `be32(producer_bb_count & 0xffff)`.
pub fn read_sq_pi<M: GuestMemory + ?Sized>(mem: &M, dbrec: GuestAddress) -> Result<u16, MemError> {
    let v = mem.read_be32(GuestAddress(dbrec.0.wrapping_add(SQ_DBREC_OFFSET)))?;
    Ok(u16::from_be_bytes([v.to_be_bytes()[2], v.to_be_bytes()[3]]))
}

/// Writes the SQ producer counter (what the guest's post_send does before ringing the bell).
pub fn write_sq_pi<M: GuestMemory + ?Sized>(
    mem: &M,
    dbrec: GuestAddress,
    pi: u16,
) -> Result<(), MemError> {
    mem.write_be32(
        GuestAddress(dbrec.0.wrapping_add(SQ_DBREC_OFFSET)),
        u32::from(pi),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_guestmem::VecMemory;

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
    }
}
