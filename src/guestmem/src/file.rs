//! A guest RAM file mapped shared: file offset = guest-physical address.

use crate::atomic_copy::{copy_in, copy_out, load_u8};
use crate::{check_range, GuestAddress, GuestMemory, Mapped, MemError};
use memmap2::{MmapOptions, MmapRaw};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

/// Guest RAM backed by a file (QEMU `memory-backend-file,share=on`, libvirt file-backed memory,
/// the embedded host's RAM files under /dev/shm), mapped once, shared with the guest.
///
/// Below 4 GiB the file offset is the guest-physical address. (QEMU places RAM above 4 GiB
/// after the PCI hole; such guests are read only below it.)
pub struct FileMemory {
    map: MmapRaw,
    size: u64,
    path: PathBuf,
    writable: bool,
}

impl FileMemory {
    /// Maps `path` read-write and shared (the monitor never writes rings, but the software HCA
    /// and the mailbox protocol do).
    pub fn open(path: &Path) -> Result<FileMemory, MemError> {
        Self::open_with(path, true)
    }

    /// Maps `path` read-only.
    pub fn open_read_only(path: &Path) -> Result<FileMemory, MemError> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, writable: bool) -> Result<FileMemory, MemError> {
        let map_err = |source| MemError::Map {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(map_err)?;
        let size = file.metadata().map_err(map_err)?.len();
        if size == 0 || usize::try_from(size).is_err() {
            return Err(MemError::BadSize {
                path: path.to_path_buf(),
                size,
            });
        }
        let map = if writable {
            MmapOptions::new().map_raw(&file)
        } else {
            MmapOptions::new().map_raw_read_only(&file)
        }
        .map_err(map_err)?;
        Ok(FileMemory {
            map,
            size,
            path: path.to_path_buf(),
            writable,
        })
    }

    /// Creates (or truncates) a zero-filled RAM file of `size` bytes and maps it.
    pub fn create(path: &Path, size: u64) -> Result<FileMemory, MemError> {
        let map_err = |source| MemError::Map {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(map_err)?;
        file.set_len(size).map_err(map_err)?;
        drop(file);
        Self::open(path)
    }

    /// Address of the mapping in this process (for readers that go through another process's
    /// view of the same file, such as a `process_vm_readv` baseline).
    pub fn base_address(&self) -> usize {
        self.map.as_ptr() as usize
    }

    /// The RAM file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl GuestMemory for FileMemory {
    fn size(&self) -> u64 {
        self.size
    }

    #[inline]
    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        let off = check_range(addr, buf.len(), self.size)?;
        // SAFETY: the map is `size` bytes long and lives as long as self; check_range proved
        // off..off+len is inside it. Reads are atomic copies, so a racing guest is fine.
        unsafe { copy_out(self.map.as_ptr().add(off), buf) };
        Ok(())
    }

    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        if !self.writable {
            return Err(MemError::ReadOnly {
                path: self.path.clone(),
            });
        }
        let off = check_range(addr, data.len(), self.size)?;
        // SAFETY: as in read; the map is writable (checked above).
        unsafe { copy_in(data, self.map.as_mut_ptr().add(off)) };
        Ok(())
    }

    #[inline]
    fn prefetch(&self, addr: GuestAddress) {
        #[cfg(target_arch = "x86_64")]
        if addr.0 < self.size {
            let p = self
                .map
                .as_ptr()
                .wrapping_add(usize::try_from(addr.0).unwrap_or(0));
            // SAFETY: prefetch is a hint that never faults; the address is inside the map.
            unsafe {
                std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = addr;
    }

    #[inline]
    fn read_u8(&self, addr: GuestAddress) -> Result<u8, MemError> {
        let off = check_range(addr, 1, self.size)?;
        // SAFETY: off is inside the map.
        Ok(unsafe { load_u8(self.map.as_ptr().add(off)) })
    }

    #[inline]
    fn mapped(&self) -> Option<Mapped<'_>> {
        let base = std::ptr::NonNull::new(self.map.as_mut_ptr())?;
        // SAFETY: the map is `size` bytes (which fits in usize: checked at open), page-aligned,
        // and lives as long as the borrow of self; the guest writes it only as hardware would.
        Some(unsafe { Mapped::new(base, self.size) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_is_a_hint_that_ignores_addresses_outside_ram() {
        let dir = tempfile::tempdir().unwrap();
        let mem = FileMemory::create(&dir.path().join("ram"), 8192).unwrap();
        for a in [0, 4095, 8191, 8192, u64::MAX] {
            mem.prefetch(GuestAddress(a));
        }
        mem.write_u8(GuestAddress(5), 7).unwrap();
        assert_eq!(mem.read_u8(GuestAddress(5)).unwrap(), 7);
    }

    #[test]
    fn file_offset_is_guest_physical_address() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ram");
        let mem = FileMemory::create(&path, 8192).unwrap();
        mem.write_be32(GuestAddress(4100), 0xdead_beef).unwrap();
        let raw = std::fs::read(&path).unwrap();
        assert_eq!(&raw[4100..4104], &[0xde, 0xad, 0xbe, 0xef]);
        let ro = FileMemory::open_read_only(&path).unwrap();
        assert_eq!(ro.read_be32(GuestAddress(4100)).unwrap(), 0xdead_beef);
        assert!(matches!(
            ro.write_u8(GuestAddress(0), 1),
            Err(MemError::ReadOnly { .. })
        ));
        assert!(ro.read_u8(GuestAddress(8192)).is_err());
    }

    #[test]
    fn empty_or_missing_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty");
        std::fs::write(&path, b"").unwrap();
        let e = FileMemory::open(&path).err().unwrap().to_string();
        assert!(e.contains("unusable size"), "{e}");
        let e = FileMemory::open(&dir.path().join("nope"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot map guest RAM file"), "{e}");
    }
}
