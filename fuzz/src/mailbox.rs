//! Target `mailbox`: the latency mailbox. Every 88-byte window of the input is decoded as a
//! report (`resex_proto::mailbox::Report::decode`); then a mailbox layout taken from the input
//! is validated and drained (`resex_ibmon::mailbox::drain`) over guest memory built from it.
//!
//! Input: [`HEADER`] bytes for the layout (blocks, block size, offset, first page; now and then
//! raw values for validation to refuse), then the memory image, repeated to fill [`RAM`].
//!
//! Checked: nothing panics; a decoded report re-encodes to itself; a drain counts at most one
//! verdict per block, merges only sane values, writes nothing but the status bytes of the
//! blocks it read (each back to free), and leaves nothing for a second drain.

use crate::input::{tiled_memory, Input};
use resex_guestmem::GuestMemory;
use resex_ibmon::mailbox::{drain, Drained};
use resex_ibmon::registry::{validate, Limits};
use resex_proto::mailbox::{Report, DATA, FREE, MAX_NS, REPORT_BYTES};
use resex_proto::{MailboxRegistration, Registration, REGISTRATION_VERSION};

/// Guest RAM of the target: 16 pages.
pub const RAM: usize = 16 * 4096;
/// Bytes of the layout header.
pub const HEADER: usize = 16;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    for w in data.windows(REPORT_BYTES).step_by(8) {
        let b: &[u8; REPORT_BYTES] = w.try_into().expect("window of REPORT_BYTES");
        if let Ok(r) = Report::decode(b) {
            assert_eq!(Report::decode(&r.encode()), Ok(r));
        }
    }
    let mut input = Input::new(data);
    let reg = registration(&mut Input::new(input.bytes(HEADER)));
    let mem = tiled_memory(input.rest(), RAM);
    let Ok(layout) = validate(&reg, RAM as u64, &Limits::default()) else {
        return;
    };
    let mb = layout.mailbox.expect("a mailbox was registered");
    let before = mem.to_vec();
    let d = drain(&mem, &mb);
    assert!(d.valid + d.bad <= mb.blocks, "{d:?}");
    match d.report {
        None => assert_eq!(d.valid, 0),
        Some(r) => {
            assert!(d.valid > 0 && r.count >= u64::from(d.valid));
            for v in [r.mean_ns, r.stddev_ns, r.p50_ns, r.p99_ns, r.p999_ns] {
                assert!(v.is_finite() && v >= 0.0, "{r:?}");
            }
            assert!(r.mean_ns <= MAX_NS as f64 && r.p999_ns <= MAX_NS as f64);
        }
    }
    // Every status byte that changed went from DATA to FREE; nothing else changed.
    let (mut before, mut after) = (before, mem.to_vec());
    for j in 0..mb.blocks {
        let a = mb.ring.gpa(u64::from(j) * u64::from(mb.block_size)).0 as usize;
        if before[a] != after[a] {
            assert_eq!((before[a], after[a]), (DATA, FREE), "status byte at {a:#x}");
        }
        (before[a], after[a]) = (0, 0);
    }
    assert!(
        before == after,
        "drain wrote guest memory other than status bytes"
    );
    assert_eq!(
        drain(&mem, &mb),
        Drained::default(),
        "a second drain found more"
    );
    let _ = mem.size();
}

/// A registration with only a mailbox, from `h`.
pub fn registration(h: &mut Input<'_>) -> Registration {
    let raw = h.u8() == 0xff;
    let blocks = if raw { h.u32() } else { 1 + h.below(64) };
    let block_size = match h.u8() % 6 {
        0 => 88,
        1 => 96,
        2 => 120,
        3 => 128,
        4 => 256,
        _ => h.u32(),
    };
    let offset = u64::from(h.u16() % 4096);
    let len = u64::from(blocks.min(4096)) * u64::from(block_size.min(4096));
    let first = u64::from(h.below(16));
    let pages = (0..(offset + len).div_ceil(4096).min(64))
        .map(|i| ((first + i) % 16) * 4096)
        .collect();
    Registration {
        rings: Vec::new(),
        version: REGISTRATION_VERSION,
        vm: None,
        path_mtu: 1024,
        qps: Vec::new(),
        mailbox: Some(MailboxRegistration {
            pages,
            offset,
            blocks,
            block_size,
        }),
    }
}
