//! A region of shared memory mapped by someone else (Xen's foreign-memory mappings), accessed
//! only by copy with relaxed atomics, like every other guest memory.

use crate::atomic_copy::{copy_in, copy_out};

/// `len` bytes of mapped, writable shared memory at `ptr`, owned by whoever mapped it (who keeps
/// it mapped as long as the region lives, and unmaps it after).
#[derive(Debug)]
pub struct RawRegion {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is only ever accessed by atomic copies (no references are handed out), so
// sharing the pointer between threads is no data race; its owner keeps the mapping alive.
unsafe impl Send for RawRegion {}
// SAFETY: as for Send: every access is an atomic copy.
unsafe impl Sync for RawRegion {}

impl RawRegion {
    /// A region over `ptr .. ptr + len`.
    ///
    /// # Safety
    /// The range must stay mapped, readable and writable for the region's whole life.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        Self { ptr, len }
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies out `buf.len()` bytes at `off`; false (nothing read) when out of bounds.
    pub fn read(&self, off: usize, buf: &mut [u8]) -> bool {
        if off.checked_add(buf.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        // SAFETY: off + len <= self.len, inside the range `new`'s caller vouched for.
        unsafe { copy_out(self.ptr.add(off), buf) };
        true
    }

    /// Copies `data` in at `off`; false (nothing written) when out of bounds.
    pub fn write(&self, off: usize, data: &[u8]) -> bool {
        if off.checked_add(data.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        // SAFETY: off + len <= self.len, inside the writable range `new`'s caller vouched for.
        unsafe { copy_in(data, self.ptr.add(off)) };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_stay_in_bounds() {
        let mut backing = vec![0u8; 64];
        // SAFETY: `backing` outlives the region and is not otherwise touched meanwhile.
        let r = unsafe { RawRegion::new(backing.as_mut_ptr(), backing.len()) };
        assert!(r.write(3, b"hello"));
        let mut b = [0u8; 5];
        assert!(r.read(3, &mut b));
        assert_eq!(&b, b"hello");
        assert!(!r.read(60, &mut b) && !r.write(usize::MAX, b"x"));
        assert_eq!(&backing[3..8], b"hello");
    }
}
