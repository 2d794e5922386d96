//! Target `monitor`: the monitor's scan over guest memory built from the input, with a
//! registration layout also taken from the input (Cloud Hypervisor's pattern: guest memory from
//! fuzzer bytes, then the device code on it).
//!
//! Input: byte 0 picks the form and the scan budget. Even: a little-endian `u16` length, that
//! many bytes of registration JSON, then the memory image, zero-padded to [`RAM`] (the form of
//! the seeds written from the synthetic guest). Odd: [`HEADER`] bytes from which a layout is
//! built (mostly valid: rings on distinct pages, small powers of two), then the image, repeated
//! to fill [`RAM`].
//!
//! Checked: validation never panics; no scan walks more entries than its budget; the monitor
//! never writes guest memory; a monitor restored from another's saved state goes on exactly as
//! the original does.

use crate::input::{tiled_memory, Input};
use resex_guestmem::{GuestAddress, GuestMemory, VecMemory};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::{VmMonitor, DEFAULT_SCAN_BUDGET};
use resex_proto::{
    CqRegistration, QpRegistration, Registration, SqRegistration, REGISTRATION_VERSION,
};

/// Guest RAM of the target: 8 pages (page 0 holds the doorbell records in the built form).
pub const RAM: usize = 8 * 4096;
/// Bytes of the built form's layout header.
pub const HEADER: usize = 48;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    if let Some((reg, mem, budget)) = decode(data) {
        scan(&reg, &mem, budget);
    }
}

/// The registration, the guest memory and the scan budget an input describes (see the
/// module's documentation); `None` for a document that does not parse.
pub fn decode(data: &[u8]) -> Option<(Registration, VecMemory, u32)> {
    let mut input = Input::new(data);
    let mode = input.u8();
    let (reg, mem) = if mode & 1 == 0 {
        let n = usize::from(input.u16());
        let reg = Registration::parse(input.bytes(n)).ok()?;
        (reg, padded_memory(input.rest()))
    } else {
        let reg = built(&mut Input::new(input.bytes(HEADER)));
        (reg, tiled_memory(input.rest(), RAM))
    };
    Some((reg, mem, 1 + u32::from(mode >> 1) * 8))
}

/// Validates `reg` against [`RAM`] and scans `mem` with it.
fn scan(reg: &Registration, mem: &VecMemory, budget: u32) {
    let layout = match validate(reg, RAM as u64, &Limits::default()) {
        Ok(l) => l,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let before = mem.to_vec();
    let mut m = VmMonitor::new(layout.clone());
    for _ in 0..4 {
        let out = m.scan(mem, budget);
        assert!(out.entries <= budget, "{out:?} over budget {budget}");
        if !out.exhausted {
            break;
        }
    }
    // Saved and restored mid-way, a monitor goes on exactly as the original.
    let mut resumed = VmMonitor::new(layout);
    resumed
        .restore(&m.state())
        .expect("a monitor's own state restores");
    let a = m.scan(mem, DEFAULT_SCAN_BUDGET);
    let b = resumed.scan(mem, DEFAULT_SCAN_BUDGET);
    assert_eq!(a, b);
    assert_eq!(m.state(), resumed.state());
    m.skip_to_now(mem);
    assert!(m.scan(mem, budget).entries <= budget);
    let _ = m.total();
    assert!(mem.to_vec() == before, "the monitor wrote guest memory");
}

fn padded_memory(image: &[u8]) -> VecMemory {
    let mem = VecMemory::new(RAM);
    let n = image.len().min(RAM);
    // Inside the memory by construction: cannot fail.
    let _ = mem.write(GuestAddress(0), &image[..n]);
    mem
}

/// Hands out ring pages 1..8 in turn (page 0 is for doorbell records); now and then a raw
/// value instead, for validation to refuse.
struct Pages {
    next: u64,
}

impl Pages {
    fn take(&mut self, h: &mut Input<'_>, offset: u64, len: u64) -> Vec<u64> {
        let n = (offset + len).div_ceil(4096);
        (0..n)
            .map(|_| {
                if h.u8() == 0xff {
                    return h.u64();
                }
                self.next = 1 + self.next % 7;
                self.next * 4096
            })
            .collect()
    }
}

fn pow2(h: &mut Input<'_>, max_log: u32) -> u32 {
    match h.u8() {
        0xff => h.u32(),
        v => 1 << (u32::from(v) % (max_log + 1)),
    }
}

fn dbrec(h: &mut Input<'_>) -> u64 {
    match h.u8() {
        0xff => h.u64(),
        v => u64::from(v) * 8,
    }
}

/// A starting index: 0, or anywhere (a CQ's is masked to its 24 bits by the caller).
fn start(h: &mut Input<'_>) -> u32 {
    if h.bool() {
        h.u32()
    } else {
        0
    }
}

fn cq(h: &mut Input<'_>, pages: &mut Pages) -> CqRegistration {
    let cqe_cnt = pow2(h, 5).max(2);
    let cqe_size = if h.bool() { 128 } else { 64 };
    let offset = u64::from(h.u8() % 4) * u64::from(cqe_size);
    CqRegistration {
        pages: pages.take(h, offset, u64::from(cqe_cnt.min(64)) * u64::from(cqe_size)),
        offset,
        cqe_cnt,
        cqe_size,
        dbrec: dbrec(h),
        start: start(h) & 0x00ff_ffff,
    }
}

/// A registration built from `h`: mostly valid, sometimes not.
pub fn built(h: &mut Input<'_>) -> Registration {
    let path_mtu = match h.u8() % 6 {
        5 => h.u32(),
        v => 256 << v,
    };
    let mut pages = Pages {
        next: u64::from(h.u8()),
    };
    let qps = (0..1 + h.below(2))
        .map(|i| {
            let wqe_cnt = pow2(h, 6);
            let offset = u64::from(h.u8() % 16) * 64;
            let sq = SqRegistration {
                pages: pages.take(h, offset, u64::from(wqe_cnt.min(64)) * 64),
                offset,
                wqe_cnt,
                dbrec: dbrec(h),
                start: start(h),
            };
            let send_cq = cq(h, &mut pages);
            let recv_cq = match h.u8() % 3 {
                0 => None,
                1 => Some(send_cq.clone()),
                _ => Some(cq(h, &mut pages)),
            };
            QpRegistration {
                qpn: 0x100 + i,
                sq,
                send_cq,
                recv_cq,
            }
        })
        .collect();
    Registration {
        rings: Vec::new(),
        version: REGISTRATION_VERSION,
        vm: None,
        path_mtu,
        qps,
        mailbox: None,
    }
}
