//! Buffers the device can reach: a span of memory with the address work requests use for it.
//!
//! Access is by copy (atomic byte copies underneath), because the device and remote peers
//! write into these buffers while the application runs: never a Rust reference into them.

use resex_guestmem::{GuestAddress, GuestMemory};
use std::sync::Arc;

use crate::{Placement, ShimError};

/// A span of device-reachable memory.
#[derive(Clone)]
pub struct Buffer {
    mem: Arc<dyn GuestMemory>,
    /// Where the span starts in `mem`.
    base: u64,
    /// The address work requests use for the first byte (an iova: GPA or virtual address).
    addr: u64,
    len: u64,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer {{ addr: {:#x}, len: {} }}", self.addr, self.len)
    }
}

impl Buffer {
    /// A buffer of `len` bytes at `base` in `mem`, known to the device as `addr`.
    pub fn new(
        mem: Arc<dyn GuestMemory>,
        base: u64,
        addr: u64,
        len: u64,
    ) -> Result<Self, ShimError> {
        if base.checked_add(len).is_none_or(|e| e > mem.size()) {
            return Err(Placement::Buffer {
                base,
                len,
                size: mem.size(),
            }
            .into());
        }
        Ok(Self {
            mem,
            base,
            addr,
            len,
        })
    }

    /// The address work requests use.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where it starts in its memory (a GPA for guest RAM).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The memory it lives in.
    pub fn memory(&self) -> &Arc<dyn GuestMemory> {
        &self.mem
    }

    fn check(&self, off: u64, n: usize) -> Result<GuestAddress, ShimError> {
        if off.checked_add(n as u64).is_none_or(|e| e > self.len) {
            return Err(Placement::Access {
                off,
                n,
                len: self.len,
            }
            .into());
        }
        Ok(GuestAddress(self.base + off))
    }

    /// Copies `data` in at `off`.
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), ShimError> {
        let at = self.check(off, data.len())?;
        Ok(self.mem.write(at, data)?)
    }

    /// Copies out into `out` from `off`.
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<(), ShimError> {
        let at = self.check(off, out.len())?;
        Ok(self.mem.read(at, out)?)
    }

    /// One byte.
    pub fn read_u8(&self, off: u64) -> Result<u8, ShimError> {
        let at = self.check(off, 1)?;
        Ok(self.mem.read_u8(at)?)
    }

    /// Writes one byte.
    pub fn write_u8(&self, off: u64, v: u8) -> Result<(), ShimError> {
        let at = self.check(off, 1)?;
        Ok(self.mem.write_u8(at, v)?)
    }

    /// A sub-span.
    pub fn slice(&self, off: u64, len: u64) -> Result<Buffer, ShimError> {
        self.check(off, usize::try_from(len).unwrap_or(usize::MAX))?;
        Ok(Buffer {
            mem: self.mem.clone(),
            base: self.base + off,
            addr: self.addr + off,
            len,
        })
    }
}
