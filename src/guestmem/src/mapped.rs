//! Guest RAM that is one mapping in this process, read without a call through the
//! [`GuestMemory`](crate::GuestMemory) trait: the monitor's hot path.
//!
//! A [`Mapped`] view is handed out by a backend whose guest RAM is one contiguous mapping
//! ([`FileMemory`](crate::FileMemory), [`VecMemory`](crate::VecMemory)). It is `Copy`, borrows the
//! memory it views, and every read is bounds-checked against the RAM size and done by relaxed
//! atomic loads: the same rules as [`GuestMemory::read`](crate::GuestMemory::read), but inlined
//! into the caller, so a monitor that holds its memory as `&dyn GuestMemory` pays one dynamic
//! call per scan instead of one per read. Small fixed-size reads are one 8-byte load per word.

use crate::atomic_copy::{copy_out, load_u8};
use crate::{GuestAddress, MemError};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A read-only view of guest RAM mapped at one host address, for as long as `'a`.
#[derive(Clone, Copy, Debug)]
pub struct Mapped<'a> {
    /// Never null, so that `Option<Mapped>` is two words, returned in registers.
    base: NonNull<u8>,
    size: u64,
    _memory: PhantomData<&'a [u8]>,
}

impl<'a> Mapped<'a> {
    /// A view of `size` bytes at `base`.
    ///
    /// # Safety
    /// `base .. base + size` must be mapped and readable for all of `'a`, `base` must be 8-byte
    /// aligned, and `size` must fit in `usize`. The memory may be written concurrently by others
    /// (the guest) only by atomic accesses or by hardware (DMA, another process): the view reads
    /// it only by atomic loads.
    pub unsafe fn new(base: NonNull<u8>, size: u64) -> Mapped<'a> {
        Mapped {
            base,
            size,
            _memory: PhantomData,
        }
    }

    /// Size of guest RAM in bytes.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Host pointer of `[addr, addr + len)`, when that range is inside guest RAM.
    #[inline]
    fn at(&self, addr: u64, len: u64) -> Option<*const u8> {
        let end = addr.checked_add(len)?;
        if end > self.size {
            return None;
        }
        // size fits in usize (new's contract) and addr < size.
        let off = usize::try_from(addr).ok()?;
        Some(self.base.as_ptr().cast_const().wrapping_add(off))
    }

    /// Reads one byte; `None` outside guest RAM.
    #[inline]
    pub fn read_u8(&self, addr: u64) -> Option<u8> {
        let p = self.at(addr, 1)?;
        // SAFETY: `at` proved p is inside the mapping, which lives for 'a (new's contract).
        Some(unsafe { load_u8(p) })
    }

    /// Reads 4 bytes, in memory order (`to_ne_bytes` gives them back); `None` outside guest RAM.
    #[inline]
    pub fn read_u32(&self, addr: u64) -> Option<u32> {
        let p = self.at(addr, 4)?;
        if (p as usize).is_multiple_of(4) {
            // SAFETY: p..p+4 is inside the mapping (checked by `at`) and 4-aligned.
            return Some(unsafe { AtomicU32::from_ptr(p as *mut u32) }.load(Ordering::Relaxed));
        }
        let mut b = [0u8; 4];
        // SAFETY: p..p+4 is inside the mapping (checked by `at`).
        unsafe { copy_out(p, &mut b) };
        Some(u32::from_ne_bytes(b))
    }

    /// Reads `N` 8-byte words starting at `addr`, in memory order (`to_ne_bytes` of each gives
    /// its bytes back): one relaxed 8-byte load per word when `addr` is 8-aligned, a byte copy
    /// otherwise. `None` when any byte is outside guest RAM.
    #[inline]
    pub fn read_words<const N: usize>(&self, addr: u64) -> Option<[u64; N]> {
        let p = self.at(addr, 8 * N as u64)?;
        if (p as usize).is_multiple_of(8) {
            let mut out = [0u64; N];
            for (i, w) in out.iter_mut().enumerate() {
                // SAFETY: p + 8i .. p + 8i + 8 is inside the checked range and 8-aligned.
                *w = unsafe { AtomicU64::from_ptr(p.add(8 * i) as *mut u64) }
                    .load(Ordering::Relaxed);
            }
            return Some(out);
        }
        let mut b = [[0u8; 8]; N];
        // SAFETY: p .. p + 8N is inside the mapping (checked by `at`).
        unsafe { copy_out(p, b.as_flattened_mut()) };
        Some(b.map(u64::from_ne_bytes))
    }

    /// Copies `buf.len()` bytes at `addr` out of guest RAM.
    #[inline]
    pub fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        let Some(p) = self.at(addr.0, buf.len() as u64) else {
            return Err(MemError::OutOfRange {
                addr,
                len: buf.len(),
                size: self.size,
            });
        };
        // SAFETY: p .. p + len is inside the mapping (checked by `at`).
        unsafe { copy_out(p, buf) };
        Ok(())
    }

    /// A hint that `addr` will be read soon; ignored outside guest RAM. Never faults.
    #[inline]
    pub fn prefetch(&self, addr: u64) {
        if let Some(p) = self.at(addr, 1) {
            prefetch_ptr(p);
        }
    }
}

/// A hint that the host memory holding `*r` (the line where it starts) will be read soon: for
/// walking the host's own per-VM state ahead of use. Never faults.
#[inline]
pub fn prefetch_host<T: ?Sized>(r: &T) {
    prefetch_ptr((r as *const T).cast::<u8>());
}

/// Like [`prefetch_host`], for every cache line `*r` spans (at most [`MAX_PREFETCH_LINES`]: a
/// struct or a short slice, not a buffer). A struct that straddles two lines is brought in
/// whole. Never reads `*r` and never faults.
#[inline]
pub fn prefetch_host_lines<T: ?Sized>(r: &T) {
    let p = (r as *const T).cast::<u8>();
    let first = p as usize & !63;
    let end = (p as usize).saturating_add(std::mem::size_of_val(r).max(1));
    let lines = (end - first).div_ceil(64).min(MAX_PREFETCH_LINES);
    for k in 0..lines {
        prefetch_ptr(p.wrapping_add((first + 64 * k).wrapping_sub(p as usize)));
    }
}

/// The most lines one [`prefetch_host_lines`] asks for.
pub const MAX_PREFETCH_LINES: usize = 16;

#[inline]
fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint: it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use crate::{GuestAddress, GuestMemory, VecMemory};

    #[test]
    fn word_reads_match_byte_reads_aligned_or_not_and_stop_at_the_end() {
        let bytes: Vec<u8> = (0..128u32).map(|i| (i * 7 + 3) as u8).collect();
        let mem = VecMemory::from_bytes(&bytes);
        let view = mem.mapped().unwrap();
        assert_eq!(view.size(), 128);
        for addr in [0u64, 8, 13, 40, 103, 104] {
            let w: [u64; 3] = view.read_words(addr).unwrap();
            let a = addr as usize;
            let got: Vec<u8> = w.iter().flat_map(|x| x.to_ne_bytes()).collect();
            assert_eq!(got, bytes[a..a + 24], "at {addr}");
            assert_eq!(
                view.read_u32(addr).unwrap().to_ne_bytes(),
                bytes[a..a + 4],
                "at {addr}"
            );
            assert_eq!(view.read_u8(addr), Some(bytes[a]));
        }
        assert_eq!(view.read_words::<3>(105), None);
        assert_eq!(view.read_words::<1>(u64::MAX - 3), None);
        assert_eq!(view.read_u32(125), None);
        assert_eq!(view.read_u8(128), None);
        let mut b = [0u8; 5];
        view.read(GuestAddress(123), &mut b).unwrap();
        assert_eq!(b, bytes[123..]);
        assert!(view.read(GuestAddress(124), &mut b).is_err());
        view.prefetch(u64::MAX);
        view.prefetch(5);
    }
}
