//! A ring buffer in guest memory: virtually contiguous, physically a list of 4 KiB pages.

use crate::{GuestAddress, GuestMemory, MemError, RingError};

/// Size of a guest page.
pub const PAGE_SIZE: u64 = 4096;

/// A buffer of `len` bytes whose byte `k` lives at guest-physical
/// `pages[(offset + k) / 4096] + (offset + k) % 4096`.
///
/// Built only through [`PageRing::new`], which validates every page against the guest's RAM
/// size, so every address it yields is inside RAM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRing {
    pages: Box<[u64]>,
    offset: u64,
    len: u64,
}

impl PageRing {
    /// Validates a page list: pages 4 KiB aligned, inside `[0, ram_size)`, exactly as many as
    /// `offset + len` bytes need; `offset < 4096`; `len > 0`.
    pub fn new(pages: &[u64], offset: u64, len: u64, ram_size: u64) -> Result<PageRing, RingError> {
        if len == 0 {
            return Err(RingError::Empty);
        }
        if offset >= PAGE_SIZE {
            return Err(RingError::BadOffset { offset });
        }
        let need = (offset + len).div_ceil(PAGE_SIZE);
        let have = pages.len();
        if (have as u64) < need {
            return Err(RingError::TooFewPages {
                have,
                need,
                bytes: len,
                offset,
            });
        }
        if (have as u64) > need {
            return Err(RingError::TooManyPages { have, need });
        }
        for (index, &gpa) in pages.iter().enumerate() {
            if gpa % PAGE_SIZE != 0 {
                return Err(RingError::PageNotAligned { index, gpa });
            }
            if gpa.checked_add(PAGE_SIZE).is_none_or(|end| end > ram_size) {
                return Err(RingError::PageOutsideRam {
                    index,
                    gpa,
                    ram_size,
                });
            }
        }
        Ok(PageRing {
            pages: pages.into(),
            offset,
            len,
        })
    }

    /// Length of the ring in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: a ring has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The page list.
    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// Offset of the ring's first byte inside its first page.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// `k` modulo the ring length, without a division in the common case `k < len`.
    #[inline]
    fn wrap(&self, k: u64) -> u64 {
        if k < self.len {
            k
        } else {
            k % self.len
        }
    }

    /// Guest-physical address of ring byte `k` (taken modulo the ring length).
    #[inline]
    pub fn gpa(&self, k: u64) -> GuestAddress {
        let v = self.offset + self.wrap(k);
        let page = self.pages[usize::try_from(v / PAGE_SIZE).unwrap_or(usize::MAX)];
        GuestAddress(page + v % PAGE_SIZE)
    }

    /// Guest-physical address of ring byte `k` when `k < len` is already known: no modulo.
    #[inline]
    fn gpa_in(&self, k: u64) -> GuestAddress {
        let v = self.offset + k;
        let page = self
            .pages
            .get(usize::try_from(v >> 12).unwrap_or(usize::MAX));
        GuestAddress(page.copied().unwrap_or(u64::MAX) + (v & (PAGE_SIZE - 1)))
    }

    /// Reads one byte at ring offset `k` (modulo the ring length).
    #[inline]
    pub fn read_u8<M: GuestMemory + ?Sized>(&self, mem: &M, k: u64) -> Result<u8, MemError> {
        mem.read_u8(self.gpa_in(self.wrap(k)))
    }

    /// Reads `buf.len()` bytes starting at ring offset `k`, wrapping from the ring's end to its
    /// start, split at page boundaries.
    #[inline]
    pub fn read<M: GuestMemory + ?Sized>(
        &self,
        mem: &M,
        k: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError> {
        let pos = self.wrap(k);
        // The common case on the monitor's hot path: one entry inside one page.
        let n = buf.len() as u64;
        let in_page = PAGE_SIZE - ((self.offset + pos) & (PAGE_SIZE - 1));
        if n <= in_page && pos + n <= self.len {
            return mem.read(self.gpa_in(pos), buf);
        }
        self.read_split(mem, pos, buf)
    }

    /// [`Self::read`] across page boundaries or the ring's end.
    fn read_split<M: GuestMemory + ?Sized>(
        &self,
        mem: &M,
        pos: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError> {
        let mut pos = pos;
        let mut done = 0;
        while done < buf.len() {
            let chunk = self.chunk_len(pos, buf.len() - done);
            mem.read(self.gpa_in(pos), &mut buf[done..done + chunk])?;
            done += chunk;
            pos = self.wrap(pos + chunk as u64);
        }
        Ok(())
    }

    /// Writes `data` starting at ring offset `k`, wrapping like [`PageRing::read`].
    pub fn write<M: GuestMemory + ?Sized>(
        &self,
        mem: &M,
        k: u64,
        data: &[u8],
    ) -> Result<(), MemError> {
        let mut pos = self.wrap(k);
        let mut done = 0;
        while done < data.len() {
            let chunk = self.chunk_len(pos, data.len() - done);
            mem.write(self.gpa_in(pos), &data[done..done + chunk])?;
            done += chunk;
            pos = self.wrap(pos + chunk as u64);
        }
        Ok(())
    }

    /// How many bytes from ring offset `pos` can be accessed in one go: up to the page end, the
    /// ring end, and `want`.
    fn chunk_len(&self, pos: u64, want: usize) -> usize {
        let in_page = PAGE_SIZE - (self.offset + pos) % PAGE_SIZE;
        let in_ring = self.len - pos;
        let n = in_page.min(in_ring).min(want as u64);
        // n <= want, so it fits.
        usize::try_from(n).unwrap_or(want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VecMemory;

    #[test]
    fn rejects_page_outside_guest_ram() {
        let e = PageRing::new(&[0, 8192], 0, 8192, 8192).unwrap_err();
        assert_eq!(
            e,
            RingError::PageOutsideRam {
                index: 1,
                gpa: 8192,
                ram_size: 8192
            }
        );
        assert!(e.to_string().contains("outside guest RAM"));
        assert!(PageRing::new(&[!4095], 0, 64, u64::MAX).is_err());
    }

    #[test]
    fn rejects_misaligned_short_and_padded_page_lists() {
        assert!(matches!(
            PageRing::new(&[100], 0, 64, 1 << 20),
            Err(RingError::PageNotAligned { index: 0, gpa: 100 })
        ));
        assert!(matches!(
            PageRing::new(&[4096], 64, 4096, 1 << 20),
            Err(RingError::TooFewPages {
                have: 1,
                need: 2,
                ..
            })
        ));
        assert!(matches!(
            PageRing::new(&[4096, 8192], 0, 4096, 1 << 20),
            Err(RingError::TooManyPages { have: 2, need: 1 })
        ));
        assert!(matches!(
            PageRing::new(&[4096], 4096, 1, 1 << 20),
            Err(RingError::BadOffset { .. })
        ));
        assert!(matches!(
            PageRing::new(&[4096], 0, 0, 1 << 20),
            Err(RingError::Empty)
        ));
    }

    #[test]
    fn scattered_pages_read_as_one_contiguous_wrapping_buffer() {
        let mem = VecMemory::new(64 * 1024);
        // Ring of 8 KiB at offset 512 over three scattered pages, in reverse physical order.
        let ring = PageRing::new(&[40960, 20480, 4096], 512, 8192, mem.size()).unwrap();
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        ring.write(&mem, 0, &data).unwrap();
        assert_eq!(ring.gpa(0), GuestAddress(40960 + 512));
        assert_eq!(ring.gpa(3584), GuestAddress(20480));
        assert_eq!(ring.gpa(8191), GuestAddress(4096 + 511));
        let mut back = vec![0u8; 8192];
        ring.read(&mem, 0, &mut back).unwrap();
        assert_eq!(back, data);
        // A read that runs off the end wraps to the start.
        let mut wrap = [0u8; 16];
        ring.read(&mem, 8184, &mut wrap).unwrap();
        assert_eq!(&wrap[..8], &data[8184..]);
        assert_eq!(&wrap[8..], &data[..8]);
        assert_eq!(ring.read_u8(&mem, 8192 + 5).unwrap(), data[5]);
    }
}
