//! The host's end of a guest's latency mailbox: poll the status bytes, copy reports out,
//! validate, free the blocks. Bounded (at most the mailbox's block count per drain), never
//! trusting a byte.
//!
//! Two ways to poll: [`drain`] looks at every block; [`drain_next`] follows the guest's writer,
//! which fills blocks in turn: it looks at the block after the last one it took and goes on
//! while blocks hold reports, so a host with a thousand guests reads one status byte per guest
//! per tick instead of one per block. A guest that writes elsewhere (hostile, or after a
//! restart) is found by the next full [`drain`], which the host runs every so many ticks.

// Float-to-integer conversions here are of measured, bounded quantities (ns, counts, ranks).
#![allow(clippy::cast_possible_truncation)]

use crate::registry::MailboxLayout;
use resex_common::LatencyReport;
use resex_guestmem::GuestMemory;
use resex_proto::mailbox::{Report, DATA, FREE, REPORT_BYTES};
use std::sync::atomic::{fence, Ordering};

/// What one drain found.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Drained {
    /// The interval's reports, merged into one (None when none was valid).
    pub report: Option<LatencyReport>,
    /// Valid reports merged.
    pub valid: u32,
    /// Blocks refused (garbage or absurd values).
    pub bad: u32,
}

/// Reports merged as they are taken.
#[derive(Default)]
struct Merge {
    out: Drained,
    n: f64,
    sum_mean: f64,
    sum_sq: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    /// The valid report with the highest sequence number, and its block.
    newest: Option<(u64, u32)>,
}

impl Merge {
    /// Looks at block `j`: takes its report if it holds one (and frees it). False when the
    /// block holds nothing.
    fn take(&mut self, mem: &dyn GuestMemory, mb: &MailboxLayout, j: u32) -> bool {
        let off = u64::from(j) * u64::from(mb.block_size);
        let Ok(status) = mb.ring.read_u8(mem, off) else {
            self.out.bad += 1;
            return false;
        };
        if status != DATA {
            return false;
        }
        fence(Ordering::Acquire);
        let mut block = [0u8; REPORT_BYTES];
        let ok = mb.ring.read(mem, off, &mut block).is_ok();
        // Free the block whatever it held: a bad report is dropped, never left to clog.
        let _ = mb.ring.write(mem, off, &[FREE]);
        let r = match ok.then(|| Report::decode(&block)) {
            Some(Ok(r)) => r,
            _ => {
                self.out.bad += 1;
                return true;
            }
        };
        self.out.valid += 1;
        if self.newest.is_none_or(|(seq, _)| r.seq > seq) {
            self.newest = Some((r.seq, j));
        }
        let c = r.count as f64;
        let (m, sd) = (r.mean_ns as f64, r.stddev_ns as f64);
        self.n += c;
        self.sum_mean += c * m;
        self.sum_sq += c * (sd * sd + m * m);
        self.p50 += c * r.p50_ns as f64;
        self.p99 = self.p99.max(r.p99_ns as f64);
        self.p999 = self.p999.max(r.p999_ns as f64);
        true
    }

    fn finish(mut self) -> Drained {
        if self.n > 0.0 {
            let n = self.n;
            let mean = self.sum_mean / n;
            self.out.report = Some(LatencyReport {
                count: n as u64,
                mean_ns: mean,
                stddev_ns: (self.sum_sq / n - mean * mean).max(0.0).sqrt(),
                p50_ns: self.p50 / n,
                p99_ns: self.p99,
                p999_ns: self.p999,
            });
        }
        self.out
    }
}

/// Drains every block whose status is DATA.
pub fn drain(mem: &dyn GuestMemory, mb: &MailboxLayout) -> Drained {
    let mut next = 0;
    drain_all(mem, mb, &mut next)
}

/// Drains every block whose status is DATA, and puts `*next` after the block of the newest
/// valid report (the highest sequence number: where the guest's writer goes on), so
/// [`drain_next`] follows the writer from there. Garbage does not move it.
pub fn drain_all(mem: &dyn GuestMemory, mb: &MailboxLayout, next: &mut u32) -> Drained {
    let mut m = Merge::default();
    let blocks = mb.blocks.max(1);
    for j in 0..blocks {
        m.take(mem, mb, j);
    }
    if let Some((_, j)) = m.newest {
        *next = (j + 1) % blocks;
    }
    m.finish()
}

/// Drains the blocks the guest's writer filled since the last call, in its order: from block
/// `*next` on, while they hold reports (at most every block once); `*next` then names the block
/// after the last one taken.
pub fn drain_next(mem: &dyn GuestMemory, mb: &MailboxLayout, next: &mut u32) -> Drained {
    let mut m = Merge::default();
    let blocks = mb.blocks.max(1);
    let mut j = *next % blocks;
    for _ in 0..blocks {
        if !m.take(mem, mb, j) {
            break;
        }
        j = (j + 1) % blocks;
    }
    *next = j;
    m.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_guestmem::{GuestAddress, PageRing, VecMemory};

    fn layout() -> MailboxLayout {
        MailboxLayout {
            ring: PageRing::new(&[0x1000], 0, 4 * 128, 1 << 16).unwrap(),
            blocks: 4,
            block_size: 128,
        }
    }

    fn report(count: u64, mean: u64) -> Report {
        Report {
            seq: 1,
            interval_ns: 1_000_000,
            count,
            mean_ns: mean,
            stddev_ns: 0,
            min_ns: mean,
            max_ns: mean,
            p50_ns: mean,
            p99_ns: mean,
            p999_ns: mean,
        }
    }

    #[test]
    fn merges_valid_reports_and_frees_every_data_block() {
        let mem = VecMemory::new(1 << 16);
        mem.write(GuestAddress(0x1000), &report(1, 100).encode())
            .unwrap();
        mem.write(GuestAddress(0x1000 + 128), &report(3, 200).encode())
            .unwrap();
        // Garbage with the status byte set.
        mem.write(GuestAddress(0x1000 + 256), &[DATA; 100]).unwrap();
        let d = drain(&mem, &layout());
        assert_eq!((d.valid, d.bad), (2, 1));
        let r = d.report.unwrap();
        assert_eq!(r.count, 4);
        assert!((r.mean_ns - 175.0).abs() < 1e-9);
        assert!(
            (r.stddev_ns - 1875f64.sqrt()).abs() < 1e-6,
            "{}",
            r.stddev_ns
        );
        for j in 0..4 {
            assert_eq!(mem.read_u8(GuestAddress(0x1000 + j * 128)).unwrap(), FREE);
        }
        assert_eq!(drain(&mem, &layout()), Drained::default());
    }

    #[test]
    fn following_the_writer_takes_its_reports_in_order_and_stops_at_an_empty_block() {
        let mem = VecMemory::new(1 << 16);
        let at = |j: u64| GuestAddress(0x1000 + j * 128);
        // The writer filled blocks 3 and 0 (wrapping), block 1 is empty, block 2 holds one
        // out of turn.
        mem.write(at(3), &report(1, 100).encode()).unwrap();
        mem.write(at(0), &report(1, 300).encode()).unwrap();
        mem.write(at(2), &report(1, 900).encode()).unwrap();
        let mut next = 3;
        let d = drain_next(&mem, &layout(), &mut next);
        assert_eq!((d.valid, next), (2, 1));
        assert!((d.report.unwrap().mean_ns - 200.0).abs() < 1e-9);
        // Nothing at block 1: nothing taken, the cursor stays.
        assert_eq!(drain_next(&mem, &layout(), &mut next), Drained::default());
        assert_eq!(next, 1);
        // The full drain finds the one out of turn, and the cursor follows it.
        assert_eq!(drain_all(&mem, &layout(), &mut next).valid, 1);
        assert_eq!(next, 3);
        // The newest report (highest sequence number) places the cursor; garbage does not.
        let seq = |s: u64, mean: u64| {
            Report {
                seq: s,
                ..report(1, mean)
            }
            .encode()
        };
        mem.write(at(3), &seq(7, 100)).unwrap();
        mem.write(at(0), &seq(8, 100)).unwrap();
        mem.write(at(1), &[DATA; 100]).unwrap();
        let d = drain_all(&mem, &layout(), &mut next);
        assert_eq!((d.valid, d.bad, next), (2, 1, 1));
        // A hostile cursor is taken modulo the block count.
        let mut far = 1_000_003;
        let _ = drain_next(&mem, &layout(), &mut far);
        assert!(far < 4);
    }
}
