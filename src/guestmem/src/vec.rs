//! Plain process memory posing as guest RAM: for tests, benchmarks and the lab.

use crate::atomic_copy::{copy_in, copy_out, load_u8};
use crate::{check_range, GuestAddress, GuestMemory, Mapped, MemError};
use std::sync::atomic::AtomicU64;

/// Guest RAM held in an ordinary heap allocation (zero-filled, 8-byte aligned).
pub struct VecMemory {
    words: Box<[AtomicU64]>,
    size: u64,
}

impl VecMemory {
    /// Allocates `size` bytes of zeroed guest RAM. The allocation is zeroed by the allocator
    /// (calloc: fresh pages from the kernel are not touched), so untouched guest RAM costs no
    /// resident memory: the lab's 1 024 guests of a few MiB each rely on it. (Collecting
    /// `AtomicU64::new(0)`s wrote every page when the optimiser did not turn it into calloc:
    /// 3.5 GiB instead of 449 MiB.)
    pub fn new(size: usize) -> VecMemory {
        let zeros: Box<[u64]> = vec![0u64; size.div_ceil(8)].into_boxed_slice();
        // SAFETY: AtomicU64 has the same size, alignment and bit validity as u64 (std
        // documents it), so a boxed slice of u64 is a valid boxed slice of AtomicU64 of the
        // same length; the pointer comes from Box::into_raw and is owned by the new Box.
        let words = unsafe { Box::from_raw(Box::into_raw(zeros) as *mut [AtomicU64]) };
        VecMemory {
            words,
            size: size as u64,
        }
    }

    /// Guest RAM holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> VecMemory {
        let m = VecMemory::new(bytes.len());
        // The range is the whole memory, so this cannot fail.
        let _ = m.write(GuestAddress(0), bytes);
        m
    }

    /// A copy of the whole memory.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.words.len() * 8];
        // SAFETY: the allocation is words.len() * 8 bytes long and lives as long as self.
        unsafe { copy_out(self.base(), &mut v) };
        v.truncate(usize::try_from(self.size).unwrap_or(usize::MAX));
        v
    }

    fn base(&self) -> *mut u8 {
        self.words.as_ptr() as *mut u8
    }

    /// The host address of byte 0 (for handing the memory to a device, e.g. `ibv_reg_mr`).
    /// It stays valid, and never moves, for as long as this `VecMemory` lives.
    pub fn host_address(&self) -> u64 {
        self.base() as u64
    }
}

impl GuestMemory for VecMemory {
    fn size(&self) -> u64 {
        self.size
    }

    #[inline]
    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        let off = check_range(addr, buf.len(), self.size)?;
        // SAFETY: check_range proved off..off+len lies inside the allocation.
        unsafe { copy_out(self.base().add(off), buf) };
        Ok(())
    }

    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        let off = check_range(addr, data.len(), self.size)?;
        // SAFETY: check_range proved off..off+len lies inside the allocation; writes go
        // through atomics, so shared access is sound.
        unsafe { copy_in(data, self.base().add(off)) };
        Ok(())
    }

    #[inline]
    fn read_u8(&self, addr: GuestAddress) -> Result<u8, MemError> {
        let off = check_range(addr, 1, self.size)?;
        // SAFETY: off is inside the allocation.
        Ok(unsafe { load_u8(self.base().add(off)) })
    }

    #[inline]
    fn mapped(&self) -> Option<Mapped<'_>> {
        let base = std::ptr::NonNull::new(self.base())?;
        // SAFETY: the allocation holds at least `size` bytes (words.len() * 8 >= size; a Box
        // never exceeds isize::MAX bytes, so size fits in usize), is 8-aligned, and lives as
        // long as the borrow of self; it is written only by atomic stores.
        Some(unsafe { Mapped::new(base, self.size) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_unaligned_spans() {
        let m = VecMemory::new(100);
        let data: Vec<u8> = (0..37).collect();
        m.write(GuestAddress(5), &data).unwrap();
        let mut back = vec![0u8; 37];
        m.read(GuestAddress(5), &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(m.read_u8(GuestAddress(6)).unwrap(), 1);
    }

    #[test]
    fn every_offset_and_length_writes_exactly_its_span() {
        let m = VecMemory::new(64);
        for off in 0..17u64 {
            for len in 0..40usize {
                let fill = vec![0xeeu8; 64];
                m.write(GuestAddress(0), &fill).unwrap();
                let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7)).collect();
                m.write(GuestAddress(off), &data).unwrap();
                let mut all = vec![0u8; 64];
                m.read(GuestAddress(0), &mut all).unwrap();
                let o = off as usize;
                assert!(all[..o].iter().all(|&b| b == 0xee), "{off} {len}");
                assert_eq!(&all[o..o + len], &data[..], "{off} {len}");
                assert!(all[o + len..].iter().all(|&b| b == 0xee), "{off} {len}");
            }
        }
    }

    #[test]
    fn rejects_access_past_the_end() {
        let m = VecMemory::new(64);
        let mut b = [0u8; 8];
        assert!(m.read(GuestAddress(60), &mut b).is_err());
        assert!(m.read(GuestAddress(u64::MAX - 2), &mut b).is_err());
        assert!(m.write(GuestAddress(64), &[1]).is_err());
        assert!(m.read(GuestAddress(56), &mut b).is_ok());
    }
}
