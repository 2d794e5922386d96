//! Typed errors for guest memory and page-list rings.

use crate::GuestAddress;
use std::path::PathBuf;

/// An access to guest memory failed.
#[derive(Debug, thiserror::Error)]
pub enum MemError {
    /// The access falls (partly) outside guest RAM.
    #[error("guest address {addr}+{len} is outside guest RAM ({size} bytes)")]
    OutOfRange {
        /// Start of the access.
        addr: GuestAddress,
        /// Length of the access in bytes.
        len: usize,
        /// Size of guest RAM.
        size: u64,
    },
    /// The guest RAM file could not be opened or mapped.
    #[error("cannot map guest RAM file {path}")]
    Map {
        /// The RAM file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A write to memory mapped read-only.
    #[error("guest RAM file {path} is mapped read-only")]
    ReadOnly {
        /// The RAM file.
        path: PathBuf,
    },
    /// The hypervisor would not map a page of guest RAM (a hole, or a page the guest gave up).
    #[error("guest page {gfn:#x} could not be mapped: {why}")]
    Unmapped {
        /// The guest frame number.
        gfn: u64,
        /// Why.
        why: String,
    },
    /// The guest RAM file is empty or too large to map here.
    #[error("guest RAM file {path} has an unusable size ({size} bytes)")]
    BadSize {
        /// The RAM file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
}

/// A page list does not describe a usable ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// A page address is not a multiple of 4096.
    #[error("page {index} ({gpa:#x}) is not 4 KiB aligned")]
    PageNotAligned {
        /// Position in the page list.
        index: usize,
        /// The page's guest-physical address.
        gpa: u64,
    },
    /// A page lies (partly) outside guest RAM.
    #[error("page {index} ({gpa:#x}) is outside guest RAM ({ram_size} bytes)")]
    PageOutsideRam {
        /// Position in the page list.
        index: usize,
        /// The page's guest-physical address.
        gpa: u64,
        /// Size of guest RAM.
        ram_size: u64,
    },
    /// The pages do not cover the ring.
    #[error("{have} page(s) given, {need} needed for {bytes} bytes at offset {offset}")]
    TooFewPages {
        /// Pages given.
        have: usize,
        /// Pages needed.
        need: u64,
        /// Ring size in bytes.
        bytes: u64,
        /// Offset of the ring in its first page.
        offset: u64,
    },
    /// More pages than the ring needs (a registration may not make the host walk junk).
    #[error("{have} pages given, the ring needs only {need}")]
    TooManyPages {
        /// Pages given.
        have: usize,
        /// Pages needed.
        need: u64,
    },
    /// The offset into the first page is not below 4096.
    #[error("offset {offset} into the first page must be below 4096")]
    BadOffset {
        /// The offset given.
        offset: u64,
    },
    /// The ring is empty.
    #[error("a ring must have a non-zero size")]
    Empty,
}
