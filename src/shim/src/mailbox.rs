//! The guest's end of the latency mailbox (`resex_proto::mailbox`): blocks in its own memory,
//! each with a status byte. Writing a report is a few stores and a fence: no system call.

// Float-to-integer conversions here are of measured, bounded quantities (ns, rates).
#![allow(clippy::cast_possible_truncation)]

use resex_common::LatencySummary;
use resex_guestmem::{GuestAddress, GuestMemory};
use resex_proto::mailbox::{Report, DATA, FREE, REPORT_BYTES};
use resex_proto::MailboxRegistration;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// Default blocks.
pub const DEFAULT_BLOCKS: u32 = 32;
/// Default block size (a report is 88 bytes; blocks are padded to 128).
pub const DEFAULT_BLOCK_SIZE: u32 = 128;

/// A mailbox at a guest-physical range.
pub struct Mailbox {
    mem: Arc<dyn GuestMemory>,
    base: u64,
    blocks: u32,
    block_size: u32,
    next: u32,
    seq: u64,
    dropped: u64,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Mailbox {{ base: {:#x}, blocks: {} }}",
            self.base, self.blocks
        )
    }
}

/// A mailbox that cannot be placed.
#[derive(Debug, thiserror::Error)]
pub enum MailboxError {
    /// A base address not 4 KiB aligned.
    #[error("mailbox: base {base:#x} is not page aligned")]
    Unaligned {
        /// The base asked for.
        base: u64,
    },
    /// No block, or blocks smaller than a report.
    #[error(
        "mailbox: {blocks} blocks of {block_size} bytes: need at least one block of {min_block}"
    )]
    Blocks {
        /// Blocks asked for.
        blocks: u32,
        /// Bytes per block asked for.
        block_size: u32,
        /// The smallest block (a report), bytes.
        min_block: usize,
    },
    /// Blocks that do not fit guest RAM.
    #[error("mailbox: {len} bytes at {base:#x} do not fit {ram} bytes of RAM")]
    OutsideRam {
        /// The mailbox's bytes.
        len: u64,
        /// Its base.
        base: u64,
        /// Guest RAM's size.
        ram: u64,
    },
    /// Memory refused.
    #[error(transparent)]
    Mem(#[from] resex_guestmem::MemError),
}

impl Mailbox {
    /// A mailbox of `blocks` x `block_size` bytes at `base` (page aligned), all blocks free.
    pub fn new(
        mem: Arc<dyn GuestMemory>,
        base: u64,
        blocks: u32,
        block_size: u32,
    ) -> Result<Self, MailboxError> {
        if !base.is_multiple_of(4096) {
            return Err(MailboxError::Unaligned { base });
        }
        if blocks == 0 || (block_size as usize) < REPORT_BYTES {
            return Err(MailboxError::Blocks {
                blocks,
                block_size,
                min_block: REPORT_BYTES,
            });
        }
        let len = u64::from(blocks) * u64::from(block_size);
        if base.checked_add(len).is_none_or(|e| e > mem.size()) {
            return Err(MailboxError::OutsideRam {
                len,
                base,
                ram: mem.size(),
            });
        }
        for b in 0..blocks {
            mem.write_u8(
                GuestAddress(base + u64::from(b) * u64::from(block_size)),
                FREE,
            )?;
        }
        Ok(Self {
            mem,
            base,
            blocks,
            block_size,
            next: 0,
            seq: 0,
            dropped: 0,
        })
    }

    /// The registration (identity mapping: the embedded host's guests address RAM by GPA).
    pub fn registration(&self) -> MailboxRegistration {
        let len = u64::from(self.blocks) * u64::from(self.block_size);
        let pages = (self.base / 4096..(self.base + len).div_ceil(4096))
            .map(|p| p * 4096)
            .collect();
        MailboxRegistration {
            pages,
            offset: 0,
            blocks: self.blocks,
            block_size: self.block_size,
        }
    }

    /// Reports dropped because every block was full (the host was not draining).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Reports written.
    pub fn written(&self) -> u64 {
        self.seq
    }

    /// Writes one report; false (and counted) when no block is free.
    pub fn report(&mut self, s: &LatencySummary, interval_ns: u64) -> Result<bool, MailboxError> {
        let mut block = None;
        for k in 0..self.blocks {
            let j = (self.next + k) % self.blocks;
            let at = GuestAddress(self.base + u64::from(j) * u64::from(self.block_size));
            if self.mem.read_u8(at)? == FREE {
                block = Some((j, at));
                break;
            }
        }
        let Some((j, at)) = block else {
            self.dropped += 1;
            return Ok(false);
        };
        // Histogram values are bucket-equivalent: keep the order the host checks.
        let min = s.min_ns.min(s.p50_ns);
        let max = s.max_ns.max(s.p999_ns);
        let mean = (s.mean_ns.max(0.0) as u64).clamp(min, max);
        let r = Report {
            seq: self.seq,
            interval_ns,
            count: s.count,
            mean_ns: mean,
            stddev_ns: (s.stddev_ns.max(0.0) as u64).min(max - min),
            min_ns: min,
            max_ns: max,
            p50_ns: s.p50_ns,
            p99_ns: s.p99_ns.max(s.p50_ns),
            p999_ns: s.p999_ns.max(s.p99_ns).max(s.p50_ns),
        };
        let bytes = r.encode();
        self.mem.write(GuestAddress(at.0 + 1), &bytes[1..])?;
        // The report before its status byte.
        fence(Ordering::Release);
        self.mem.write_u8(at, DATA)?;
        self.seq += 1;
        self.next = (j + 1) % self.blocks;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_guestmem::VecMemory;

    fn summary(n: u64) -> LatencySummary {
        LatencySummary {
            count: n,
            mean_ns: 100_000.0,
            stddev_ns: 5_000.0,
            min_ns: 90_000,
            max_ns: 150_000,
            p50_ns: 99_000,
            p99_ns: 140_000,
            p999_ns: 150_000,
        }
    }

    #[test]
    fn reports_fill_free_blocks_and_drop_when_full() {
        let mem: Arc<dyn GuestMemory> = Arc::new(VecMemory::new(1 << 20));
        let mut m = Mailbox::new(mem.clone(), 0x10000, 2, 128).unwrap();
        assert!(m.report(&summary(3), 1_000_000).unwrap());
        assert!(m.report(&summary(4), 1_000_000).unwrap());
        assert!(!m.report(&summary(5), 1_000_000).unwrap());
        assert_eq!(m.dropped(), 1);
        let mut b = [0u8; REPORT_BYTES];
        mem.read(GuestAddress(0x10000 + 128), &mut b).unwrap();
        assert_eq!(b[0], DATA);
        let r = Report::decode(&b).unwrap();
        assert_eq!((r.seq, r.count, r.mean_ns), (1, 4, 100_000));
        // The host frees block 0: the next report goes there.
        mem.write_u8(GuestAddress(0x10000), FREE).unwrap();
        assert!(m.report(&summary(6), 1_000_000).unwrap());
        assert_eq!(m.registration().pages, vec![0x10000]);
    }

    #[test]
    fn refuses_impossible_geometry() {
        let mem: Arc<dyn GuestMemory> = Arc::new(VecMemory::new(1 << 16));
        assert!(matches!(
            Mailbox::new(mem.clone(), 0x10001, 2, 128),
            Err(MailboxError::Unaligned { base: 0x10001 })
        ));
        assert!(matches!(
            Mailbox::new(mem.clone(), 0x1000, 2, 16),
            Err(MailboxError::Blocks {
                blocks: 2,
                block_size: 16,
                min_block: REPORT_BYTES
            })
        ));
        let e = Mailbox::new(mem, 0xf000, 64, 128).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mailbox: 8192 bytes at 0xf000 do not fit 65536 bytes of RAM"
        );
        assert!(matches!(
            e,
            MailboxError::OutsideRam {
                len: 8192,
                base: 0xf000,
                ram: 65536
            }
        ));
    }
}
