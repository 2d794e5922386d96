//! The host's end of a guest's latency mailbox: poll the status bytes, copy reports out,
//! validate, free the blocks. Bounded (at most the mailbox's block count per drain), never
//! trusting a byte.

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

/// Drains every block whose status is DATA.
pub fn drain(mem: &dyn GuestMemory, mb: &MailboxLayout) -> Drained {
    let mut out = Drained::default();
    let (mut n, mut sum_mean, mut sum_sq, mut p50, mut p99, mut p999) =
        (0f64, 0f64, 0f64, 0f64, 0f64, 0f64);
    let mut block = [0u8; REPORT_BYTES];
    for j in 0..mb.blocks {
        let off = u64::from(j) * u64::from(mb.block_size);
        let Ok(status) = mb.ring.read_u8(mem, off) else {
            out.bad += 1;
            continue;
        };
        if status != DATA {
            continue;
        }
        fence(Ordering::Acquire);
        let ok = mb.ring.read(mem, off, &mut block).is_ok();
        // Free the block whatever it held: a bad report is dropped, never left to clog.
        let _ = mb.ring.write(mem, off, &[FREE]);
        let r = match ok.then(|| Report::decode(&block)) {
            Some(Ok(r)) => r,
            _ => {
                out.bad += 1;
                continue;
            }
        };
        out.valid += 1;
        let c = r.count as f64;
        let (m, sd) = (r.mean_ns as f64, r.stddev_ns as f64);
        n += c;
        sum_mean += c * m;
        sum_sq += c * (sd * sd + m * m);
        p50 += c * r.p50_ns as f64;
        p99 = p99.max(r.p99_ns as f64);
        p999 = p999.max(r.p999_ns as f64);
    }
    if n > 0.0 {
        let mean = sum_mean / n;
        out.report = Some(LatencyReport {
            count: n as u64,
            mean_ns: mean,
            stddev_ns: (sum_sq / n - mean * mean).max(0.0).sqrt(),
            p50_ns: p50 / n,
            p99_ns: p99,
            p999_ns: p999,
        });
    }
    out
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
}
