//! Guest-side memory for a guest with no RAM file (inside a real VM): an anonymous mapping,
//! locked and touched, whose pages' guest-physical addresses are read from
//! `/proc/self/pagemap` (root in the guest: without CAP_SYS_ADMIN the kernel shows no frame
//! numbers). The shim works in the mapping's own offsets and tells the device and the host
//! monitor the guest-physical page of each (`PinnedMemory::gpa`).
//!
//! mlock keeps the pages resident; it does not forbid the kernel's compaction from moving them,
//! which a real driver prevents with long-term pins. A test guest does not compact; a production
//! guest would need a kernel driver (or hugepages) for the same guarantee.

use crate::atomic_copy::{copy_in, copy_out};
use crate::{check_range, GuestAddress, GuestMemory, MemError};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

const PAGE: u64 = 4096;
const PRESENT: u64 = 1 << 63;
const PFN_MASK: u64 = (1 << 55) - 1;

/// Locked memory with known guest-physical pages.
pub struct PinnedMemory {
    map: memmap2::MmapMut,
    gpas: Vec<u64>,
}

impl std::fmt::Debug for PinnedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedMemory({} pages)", self.gpas.len())
    }
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> MemError + '_ {
    move |source| MemError::Map {
        path: PathBuf::from(what),
        source,
    }
}

/// The physical frame of each page entry of `/proc/self/pagemap` (`None`: not present).
pub fn pfns(entries: &[u8]) -> Vec<Option<u64>> {
    entries
        .chunks_exact(8)
        .map(|c| {
            let v = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            (v & PRESENT != 0).then_some(v & PFN_MASK)
        })
        .collect()
}

impl PinnedMemory {
    /// Maps `size` bytes (rounded up to pages), locks and touches them, and reads their
    /// guest-physical addresses.
    pub fn new(size: u64) -> Result<Self, MemError> {
        let size = size.max(PAGE).div_ceil(PAGE) * PAGE;
        let len = usize::try_from(size).map_err(|_| MemError::BadSize {
            path: PathBuf::from("anonymous"),
            size,
        })?;
        let mut map = memmap2::MmapMut::map_anon(len).map_err(io("anonymous mapping"))?;
        map.lock().map_err(io("mlock (RLIMIT_MEMLOCK?)"))?;
        for p in map.chunks_mut(4096) {
            p[0] = 0; // touch: the page must exist to have a frame
        }
        let base = map.as_ptr() as u64;
        let pages = len / 4096;
        let mut entries = vec![0u8; pages * 8];
        let f = std::fs::File::open("/proc/self/pagemap").map_err(io("/proc/self/pagemap"))?;
        f.read_exact_at(&mut entries, base / PAGE * 8)
            .map_err(io("/proc/self/pagemap"))?;
        let mut gpas = Vec::with_capacity(pages);
        for (i, pfn) in pfns(&entries).into_iter().enumerate() {
            match pfn {
                Some(0) => {
                    return Err(MemError::Unmapped {
                        gfn: 0,
                        why: "/proc/self/pagemap shows no frame numbers: reading guest-physical \
                              addresses needs root (CAP_SYS_ADMIN)"
                            .into(),
                    })
                }
                Some(p) => gpas.push(p * PAGE),
                None => {
                    return Err(MemError::Unmapped {
                        gfn: i as u64,
                        why: "a locked page is not present".into(),
                    })
                }
            }
        }
        Ok(Self { map, gpas })
    }

    /// The guest-physical address of byte `off` of the mapping.
    pub fn gpa(&self, off: u64) -> Option<u64> {
        let page = usize::try_from(off / PAGE).ok()?;
        self.gpas.get(page).map(|g| g + off % PAGE)
    }

    /// Every page's guest-physical address, in order.
    pub fn pages(&self) -> &[u64] {
        &self.gpas
    }
}

impl GuestMemory for PinnedMemory {
    fn size(&self) -> u64 {
        self.map.len() as u64
    }

    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        let off = check_range(addr, buf.len(), self.size())?;
        // SAFETY: check_range proved off + len <= the mapping's length; the mapping lives as
        // long as self.
        unsafe { copy_out(self.map.as_ptr().add(off), buf) };
        Ok(())
    }

    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        let off = check_range(addr, data.len(), self.size())?;
        // SAFETY: as in read; the mapping is writable, and written only by atomic copies (the
        // device, in another process or the hypervisor, may write it concurrently).
        unsafe { copy_in(data, self.map.as_ptr().add(off) as *mut u8) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pagemap_entries_decode() {
        let mut e = Vec::new();
        e.extend_from_slice(&(PRESENT | 0x1234).to_le_bytes());
        e.extend_from_slice(&0u64.to_le_bytes());
        e.extend_from_slice(&(PRESENT | (1 << 61) | 7).to_le_bytes());
        assert_eq!(pfns(&e), vec![Some(0x1234), None, Some(7)]);
    }

    #[test]
    fn pages_get_distinct_frames_as_root_or_a_clear_error() {
        match PinnedMemory::new(64 << 10) {
            Ok(m) => {
                assert_eq!(m.pages().len(), 16);
                let mut f = m.pages().to_vec();
                f.sort_unstable();
                f.dedup();
                assert_eq!(f.len(), 16, "every page its own frame");
                assert!(m.pages().iter().all(|g| g % PAGE == 0 && *g > 0));
                assert_eq!(m.gpa(4096 + 5), Some(m.pages()[1] + 5));
                assert_eq!(m.gpa(64 << 10), None);
                m.write(GuestAddress(4090), b"0123456789").unwrap();
                let mut b = [0u8; 10];
                m.read(GuestAddress(4090), &mut b).unwrap();
                assert_eq!(&b, b"0123456789");
                assert!(m.read(GuestAddress(65530), &mut b).is_err());
            }
            Err(e) => {
                let s = e.to_string();
                assert!(s.contains("CAP_SYS_ADMIN") || s.contains("mlock"), "{s}");
            }
        }
    }
}
