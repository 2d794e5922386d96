//! Guest-physical memory, as the host (and the software HCA) sees it.
//!
//! Guest memory is hostile: the guest may change any byte at any time. Every access here is a
//! bounds-checked *copy* in or out ([`GuestMemory::read`], [`GuestMemory::write`]); no Rust
//! reference into guest-writable memory is ever handed out. Copies use relaxed atomic loads and
//! stores, so racing with the guest is defined behaviour (torn multi-byte values are possible and
//! callers validate what they read, as with any guest input).
//!
//! Backends: [`FileMemory`] maps a guest RAM file (QEMU `memory-backend-file,share=on`, libvirt
//! file-backed memory, the embedded host's RAM files: file offset = guest-physical address) and
//! [`VecMemory`] is plain process memory for tests and the lab. A ring buffer in guest memory is a
//! [`PageRing`]: a list of 4 KiB guest pages, validated against the RAM size once.

#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

mod atomic_copy;
mod error;
mod file;
mod mapped;
mod pinned;
mod raw;
mod ring;
mod vec;

pub use error::{MemError, RingError};
pub use file::FileMemory;
pub use mapped::{prefetch_host, prefetch_host_lines, Mapped, MAX_PREFETCH_LINES};
pub use pinned::{pfns as pagemap_frames, PinnedMemory};
pub use raw::RawRegion;
pub use ring::{PageRing, PAGE_SIZE};
pub use vec::VecMemory;

use std::fmt;

/// A guest-physical address, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GuestAddress(pub u64);

impl GuestAddress {
    /// This address plus `off` bytes, or `None` on overflow.
    pub fn checked_add(self, off: u64) -> Option<GuestAddress> {
        self.0.checked_add(off).map(GuestAddress)
    }
}

impl fmt::Display for GuestAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Guest-physical memory: copy-out reads and copy-in writes at a guest-physical address.
///
/// Implementations check every access against [`GuestMemory::size`] and never panic on a bad
/// address: they return [`MemError::OutOfRange`].
pub trait GuestMemory: Send + Sync {
    /// Size of guest RAM in bytes (the highest valid address + 1).
    fn size(&self) -> u64;

    /// Copies `buf.len()` bytes starting at `addr` out of guest memory.
    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError>;

    /// Copies `data` into guest memory starting at `addr`.
    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError>;

    /// A hint that `addr` will be read soon (a cache prefetch where memory is mapped). Never
    /// fails, never faults: an address outside guest RAM is ignored.
    #[inline]
    fn prefetch(&self, addr: GuestAddress) {
        let _ = addr;
    }

    /// The whole of guest RAM as one mapping in this process, when it is one (a RAM file, plain
    /// memory): reads through the view are inlined into the caller instead of dispatched
    /// through this trait. `None` (the default) for memory mapped piecewise or read another way.
    #[inline]
    fn mapped(&self) -> Option<Mapped<'_>> {
        None
    }

    /// Reads one byte.
    fn read_u8(&self, addr: GuestAddress) -> Result<u8, MemError> {
        let mut b = [0u8; 1];
        self.read(addr, &mut b)?;
        Ok(b[0])
    }

    /// Reads a big-endian u32 (the byte order of every mlx5 field).
    fn read_be32(&self, addr: GuestAddress) -> Result<u32, MemError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    /// Writes one byte.
    fn write_u8(&self, addr: GuestAddress, v: u8) -> Result<(), MemError> {
        self.write(addr, &[v])
    }

    /// Writes a big-endian u32.
    fn write_be32(&self, addr: GuestAddress, v: u32) -> Result<(), MemError> {
        self.write(addr, &v.to_be_bytes())
    }
}

/// Checks that `[addr, addr + len)` lies inside a memory of `size` bytes; returns the start
/// offset as `usize`.
#[inline]
pub(crate) fn check_range(addr: GuestAddress, len: usize, size: u64) -> Result<usize, MemError> {
    let end = (len as u64).checked_add(addr.0);
    match end {
        Some(end) if end <= size => {
            usize::try_from(addr.0).map_err(|_| MemError::OutOfRange { addr, len, size })
        }
        _ => Err(MemError::OutOfRange { addr, len, size }),
    }
}

impl<T: GuestMemory + ?Sized> GuestMemory for std::sync::Arc<T> {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        (**self).read(addr, buf)
    }
    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        (**self).write(addr, data)
    }
    fn read_u8(&self, addr: GuestAddress) -> Result<u8, MemError> {
        (**self).read_u8(addr)
    }
    fn prefetch(&self, addr: GuestAddress) {
        (**self).prefetch(addr);
    }
    fn mapped(&self) -> Option<Mapped<'_>> {
        (**self).mapped()
    }
}
