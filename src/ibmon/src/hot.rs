//! What a scan touches, packed: each ring's geometry and where its bytes are (a range of the
//! VM's one page table), and the reader the scan goes through.
//!
//! The [`Layout`](crate::Layout) keeps the registration's shape (a `PageRing` per ring, each its
//! own allocation); a scan reads only the packed copies here, so one VM's scan touches a few
//! contiguous arrays instead of chasing a pointer per ring. Every address is still checked: a
//! ring byte `k < len` maps through the page table (validated against RAM at registration), and
//! every read is bounds-checked by the memory.

use resex_guestmem::{GuestAddress, GuestMemory, Mapped, PageRing, PAGE_SIZE};

/// Guest memory as the scan reads it: copy-out reads at guest-physical addresses, `None` when
/// the range is not readable. Implemented by the inlined [`Mapped`] view (RAM that is one
/// mapping) and by [`ViaTrait`] (any other [`GuestMemory`]).
pub(crate) trait Ram {
    /// One byte.
    fn u8(&self, gpa: u64) -> Option<u8>;
    /// Four bytes in memory order (`to_ne_bytes` gives them back).
    fn u32_ne(&self, gpa: u64) -> Option<u32>;
    /// `N` 8-byte words in memory order.
    fn words<const N: usize>(&self, gpa: u64) -> Option<[u64; N]>;
    /// `buf.len()` bytes.
    fn bytes(&self, gpa: u64, buf: &mut [u8]) -> Option<()>;
    /// A cache hint.
    fn prefetch(&self, gpa: u64);
}

impl Ram for Mapped<'_> {
    #[inline]
    fn u8(&self, gpa: u64) -> Option<u8> {
        self.read_u8(gpa)
    }
    #[inline]
    fn u32_ne(&self, gpa: u64) -> Option<u32> {
        self.read_u32(gpa)
    }
    #[inline]
    fn words<const N: usize>(&self, gpa: u64) -> Option<[u64; N]> {
        self.read_words(gpa)
    }
    #[inline]
    fn bytes(&self, gpa: u64, buf: &mut [u8]) -> Option<()> {
        self.read(GuestAddress(gpa), buf).ok()
    }
    #[inline]
    fn prefetch(&self, gpa: u64) {
        Mapped::prefetch(self, gpa);
    }
}

/// Any [`GuestMemory`], one trait call per read.
pub(crate) struct ViaTrait<'a, M: ?Sized>(pub &'a M);

impl<M: GuestMemory + ?Sized> Ram for ViaTrait<'_, M> {
    #[inline]
    fn u8(&self, gpa: u64) -> Option<u8> {
        self.0.read_u8(GuestAddress(gpa)).ok()
    }
    #[inline]
    fn u32_ne(&self, gpa: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.0.read(GuestAddress(gpa), &mut b).ok()?;
        Some(u32::from_ne_bytes(b))
    }
    #[inline]
    fn words<const N: usize>(&self, gpa: u64) -> Option<[u64; N]> {
        let mut b = [[0u8; 8]; N];
        self.0.read(GuestAddress(gpa), b.as_flattened_mut()).ok()?;
        Some(b.map(u64::from_ne_bytes))
    }
    #[inline]
    fn bytes(&self, gpa: u64, buf: &mut [u8]) -> Option<()> {
        self.0.read(GuestAddress(gpa), buf).ok()
    }
    #[inline]
    fn prefetch(&self, gpa: u64) {
        self.0.prefetch(GuestAddress(gpa));
    }
}

/// Where a ring's bytes are: pages `first ..` of the VM's page table, byte 0 at `offset` in the
/// first; `len` bytes (a power of two: entries x entry size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingAt {
    first: usize,
    offset: u64,
    len: u64,
    /// `offset` is a multiple of 64 (and `len` is, for every ring the monitor reads).
    aligned: bool,
}

impl RingAt {
    /// Appends `ring`'s pages to `table` and returns where they are.
    pub(crate) fn push(ring: &PageRing, table: &mut Vec<u64>) -> RingAt {
        let first = table.len();
        table.extend_from_slice(ring.pages());
        RingAt {
            first,
            offset: ring.offset(),
            len: ring.len(),
            aligned: ring.offset().is_multiple_of(64) && ring.len().is_multiple_of(64),
        }
    }

    /// Guest-physical address of the `n <= 64` bytes at ring byte `k`, the start of a 64-byte
    /// entry (`k` a multiple of 64 below `len`: a CQE, a send queue basic block). When the ring
    /// starts 64-byte aligned, as rdma-core allocates rings, an entry never crosses a page, so
    /// only the page is looked up; otherwise as [`Self::span`].
    #[inline(always)]
    pub(crate) fn entry(&self, pages: &[u64], k: u64, n: u64) -> Option<u64> {
        debug_assert!(k.is_multiple_of(64) && k < self.len && n <= 64);
        if self.aligned {
            let v = self.offset + k;
            let i = self.first + usize::try_from(v >> 12).ok()?;
            return Some(pages.get(i)? + (v & (PAGE_SIZE - 1)));
        }
        self.span(pages, k, n)
    }

    /// Guest-physical address of ring byte `k` when `[k, k + n)` lies in one page and inside
    /// the ring; `None` otherwise (the caller then takes [`Self::read_split`]).
    #[inline(always)]
    pub(crate) fn span(&self, pages: &[u64], k: u64, n: u64) -> Option<u64> {
        let v = self.offset + k;
        let in_page = v & (PAGE_SIZE - 1);
        if in_page + n > PAGE_SIZE || k.checked_add(n)? > self.len {
            return None;
        }
        let i = self.first + usize::try_from(v >> 12).ok()?;
        Some(pages.get(i)? + in_page)
    }

    /// A cache hint for ring byte `k` (`k < len`, as the cursors' masked offsets are; another
    /// `k` asks for nothing).
    #[inline]
    pub(crate) fn prefetch<R: Ram>(&self, r: &R, pages: &[u64], k: u64) {
        if let Some(g) = self.span(pages, k, 1) {
            r.prefetch(g);
        }
    }

    /// Reads `buf.len()` bytes from ring byte `k` on, split at page boundaries and wrapping at
    /// the ring's end: the general path, for reads that [`Self::span`] refuses.
    #[cold]
    pub(crate) fn read_split<R: Ram>(
        &self,
        r: &R,
        pages: &[u64],
        k: u64,
        buf: &mut [u8],
    ) -> Option<()> {
        let mut pos = k % self.len;
        let mut done = 0;
        while done < buf.len() {
            let v = self.offset + pos;
            let in_page = PAGE_SIZE - (v & (PAGE_SIZE - 1));
            let want = (buf.len() - done) as u64;
            let n = in_page.min(self.len - pos).min(want);
            let g = self.span(pages, pos, n)?;
            // n <= want, a usize.
            let n = usize::try_from(n).ok()?;
            r.bytes(g, &mut buf[done..done + n])?;
            done += n;
            pos = (pos + n as u64) % self.len;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_guestmem::VecMemory;

    #[test]
    fn ring_reads_match_page_ring_reads_across_pages_and_the_wrap() {
        let mem = VecMemory::new(64 * 1024);
        let ring = PageRing::new(&[40960, 20480, 4096], 512, 8192, mem.size()).unwrap();
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        ring.write(&mem, 0, &data).unwrap();
        let mut table = vec![7u64];
        let at = RingAt::push(&ring, &mut table);
        let view = mem.mapped().unwrap();
        for k in [0u64, 8, 3576, 3584, 8184, 8190] {
            let mut want = [0u8; 16];
            ring.read(&mem, k, &mut want).unwrap();
            let mut got = [0u8; 16];
            at.read_split(&view, &table, k, &mut got).unwrap();
            assert_eq!(got, want, "split at {k}");
            at.read_split(&ViaTrait(&mem), &table, k, &mut got).unwrap();
            assert_eq!(got, want, "via the trait at {k}");
            match at.span(&table, k, 16) {
                Some(g) => {
                    assert_eq!(g, ring.gpa(k).0);
                    let w: [u64; 2] = view.words(g).unwrap();
                    assert_eq!(w.map(u64::to_ne_bytes).as_flattened(), want);
                }
                None => assert!(k == 3576 || k >= 8184, "only reads across a boundary split"),
            }
        }
    }
}
