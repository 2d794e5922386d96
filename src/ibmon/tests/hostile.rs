//! Hostile input: random registrations and random ring images (random bytes, then random
//! mutations between scans) through validation and the monitor. Nothing may panic, and no scan
//! may walk more entries than its budget, whatever the bytes say.

#![allow(clippy::cast_possible_truncation)]

use resex_guestmem::{GuestAddress, GuestMemory, MemError, VecMemory};
use resex_ibmon::registry::{validate, Layout, Limits};
use resex_ibmon::VmMonitor;
use resex_mlx5::consts::{cqe_op, send_op};
use resex_mlx5::{Cqe, CtrlSeg};
use resex_proto::{CqRegistration, QpRegistration, Registration, SqRegistration};

const RAM: u64 = 256 * 1024;
const ITERATIONS: u64 = 100_000;

fn pick_page(r: &mut fastrand::Rng) -> u64 {
    match r.u8(0..60) {
        0 => r.u64(..),
        1 => RAM,
        2 => r.u64(0..RAM),
        _ => r.u64(0..RAM / 4096) * 4096,
    }
}

fn pick_pow2(r: &mut fastrand::Rng, max_log: u32) -> u32 {
    match r.u8(0..40) {
        0 => r.u32(..),
        1 => 0,
        _ => 1 << r.u32(0..=max_log),
    }
}

/// Pages for a ring of `len` bytes at `offset`: usually exactly as many as needed, sometimes not.
fn pages(r: &mut fastrand::Rng, offset: u64, len: u64) -> Vec<u64> {
    let need = (offset + len).div_ceil(4096);
    let n = if r.u8(0..40) == 0 {
        r.u64(0..4)
    } else {
        need.min(8)
    };
    (0..n).map(|_| pick_page(r)).collect()
}

fn offset(r: &mut fastrand::Rng, unit: u64) -> u64 {
    match r.u8(0..30) {
        0 => r.u64(0..5000),
        1..=2 => r.u64(0..4096 / unit) * unit,
        _ => 0,
    }
}

fn dbrec(r: &mut fastrand::Rng) -> u64 {
    if r.u8(0..40) == 0 {
        r.u64(..)
    } else {
        r.u64(0..RAM / 8) * 8
    }
}

fn cq(r: &mut fastrand::Rng) -> CqRegistration {
    let cqe_cnt = pick_pow2(r, 6).max(u32::from(r.u8(0..10) != 0) * 2);
    let cqe_size = match r.u8(0..8) {
        0 if r.bool() => r.u32(..),
        0..=4 => 64,
        _ => 128,
    };
    let offset = offset(r, u64::from(cqe_size.clamp(1, 4096)));
    let pages = pages(r, offset, u64::from(cqe_cnt) * u64::from(cqe_size));
    CqRegistration {
        pages,
        offset,
        cqe_cnt,
        cqe_size,
        dbrec: dbrec(r),
        start: match r.u8(0..20) {
            0 => r.u32(..),
            1..=9 => r.u32(0..1 << 24),
            _ => 0,
        },
    }
}

fn registration(r: &mut fastrand::Rng) -> Registration {
    let qps = (0..r.usize(0..3))
        .map(|_| {
            let wqe_cnt = pick_pow2(r, 6);
            let offset = offset(r, 64);
            QpRegistration {
                qpn: match r.u8(0..20) {
                    0 => r.u32(..),
                    1..=10 => r.u32(0..4),
                    _ => r.u32(0..1 << 24),
                },
                sq: SqRegistration {
                    pages: pages(r, offset, u64::from(wqe_cnt) * 64),
                    offset,
                    wqe_cnt,
                    dbrec: dbrec(r),
                    start: r.u32(..),
                },
                send_cq: cq(r),
                recv_cq: if r.bool() { Some(cq(r)) } else { None },
            }
        })
        .collect();
    Registration {
        rings: Vec::new(),
        version: 1,
        vm: None,
        path_mtu: [256, 1024, 4096, 1024, 2048, 512, 1024, 2048, 1500, 0][r.usize(0..10)],
        qps,
        mailbox: None,
    }
}

/// Writes near-valid content: CQEs valid for the indices the monitor will look at, naming
/// registered QPs and plausible WQE indices; WQE control segments whose index fields match
/// their slots, with random ds, opcodes and segment words.
fn plant(r: &mut fastrand::Rng, mem: &VecMemory, layout: &Layout) {
    for cq in &layout.cqs {
        let n = cq.cqe_cnt();
        for k in 0..r.u32(0..=n) {
            let index = cq.start.wrapping_add(k) & 0x00ff_ffff;
            let qpn = if layout.qps.is_empty() || r.u8(0..8) == 0 {
                r.u32(..) & 0x00ff_ffff
            } else {
                layout.qps[r.usize(0..layout.qps.len())].qpn
            };
            let opcode = [
                cqe_op::REQ,
                cqe_op::REQ,
                cqe_op::REQ_ERR,
                cqe_op::RESP_SEND,
                r.u8(0..15),
            ][r.usize(0..5)];
            let cqe = Cqe {
                opcode,
                owner: (index >> cq.log_cnt) & 1 == 1,
                format: if r.u8(0..20) == 0 { 3 } else { 0 },
                qpn,
                wqe_counter: r.u16(0..200),
                byte_cnt: r.u32(..),
                ..Cqe::default()
            };
            let off = u64::from(index & (n - 1)) * cq.size.bytes() + cq.size.cqe_offset();
            cq.ring.write(mem, off, &cqe.encode()).unwrap();
        }
        if r.bool() {
            resex_mlx5::dbrec::write_cq_ci(mem, cq.dbrec, cq.start.wrapping_add(r.u32(0..2 * n)))
                .unwrap();
        }
    }
    for q in &layout.qps {
        let sq = &q.sq;
        let mut p = sq.start;
        for _ in 0..r.u32(0..=sq.wqe_cnt) {
            let ds = if r.u8(0..10) == 0 {
                r.u8(0..64)
            } else {
                r.u8(1..12)
            };
            let ctrl = CtrlSeg {
                wqe_index: resex_mlx5::index16(if r.u8(0..10) == 0 { r.u32(..) } else { p }),
                opcode: [
                    send_op::SEND,
                    send_op::RDMA_WRITE,
                    send_op::RDMA_READ,
                    send_op::ATOMIC_CS,
                    r.u8(..),
                ][r.usize(0..5)],
                qpn: if r.u8(0..10) == 0 {
                    r.u32(..) & 0x00ff_ffff
                } else {
                    q.qpn
                },
                ds,
                ..CtrlSeg::default()
            };
            let slot = u64::from(p & (sq.wqe_cnt - 1)) * 64;
            sq.ring.write(mem, slot, &ctrl.encode()).unwrap();
            for d in 1..u64::from(ds) {
                let mut word = [0u8; 16];
                r.fill(&mut word);
                if r.bool() {
                    word[0] &= 0x7f; // plausible data segment
                }
                sq.ring.write(mem, slot + d * 16, &word).unwrap();
            }
            p = p.wrapping_add(u32::from(ds).div_ceil(4).max(1));
        }
    }
}

#[test]
fn random_rings_and_registrations_never_panic_and_work_stays_bounded() {
    let mut r = fastrand::Rng::with_seed(0x5eed_1b30);
    let mem = VecMemory::new(RAM as usize);
    let mut accepted = 0u64;
    let mut entries = 0u64;
    for i in 0..ITERATIONS {
        if i % 1000 == 0 {
            let bytes: Vec<u8> = (0..RAM).map(|_| r.u8(..)).collect();
            mem.write(GuestAddress(0), &bytes).unwrap();
        }
        let reg = registration(&mut r);
        let Ok(layout) = validate(&reg, RAM, &Limits::default()) else {
            continue;
        };
        accepted += u64::from(!layout.qps.is_empty());
        if r.bool() {
            plant(&mut r, &mem, &layout);
        }
        let mut mon = VmMonitor::new(layout.clone());
        for _ in 0..3 {
            for _ in 0..r.usize(0..64) {
                let at = r.u64(0..RAM - 8);
                mem.write(GuestAddress(at), &r.u64(..).to_ne_bytes())
                    .unwrap();
            }
            let budget = r.u32(0..512);
            let out = mon.scan(&mem, budget);
            assert!(
                out.entries <= budget,
                "scan walked {} entries on a budget of {budget}",
                out.entries
            );
            entries += u64::from(out.entries);
        }
        // Saved state round-trips through JSON whatever the cursors hold.
        let st = mon.state();
        let back: resex_ibmon::MonitorState =
            serde_json::from_str(&serde_json::to_string(&st).unwrap()).unwrap();
        mon.restore(&back).unwrap();
    }
    // The generator must reach the monitor often enough for this test to mean something.
    eprintln!("{accepted} of {ITERATIONS} registrations accepted; {entries} entries walked");
    assert!(
        accepted > ITERATIONS / 20,
        "only {accepted} registrations accepted"
    );
    assert!(entries > ITERATIONS, "only {entries} entries walked");
}

/// Guest memory that is not one mapping (as Xen's piecewise foreign mappings are not): the
/// monitor reads it one trait call at a time instead of through [`GuestMemory::mapped`].
struct Unmapped<'a>(&'a VecMemory);

impl GuestMemory for Unmapped<'_> {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        self.0.read(addr, buf)
    }
    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        self.0.write(addr, data)
    }
}

#[test]
fn the_mapped_view_and_trait_calls_read_hostile_rings_alike() {
    let mut r = fastrand::Rng::with_seed(0x0dd_5eed);
    let mem = VecMemory::new(RAM as usize);
    assert!(mem.mapped().is_some() && Unmapped(&mem).mapped().is_none());
    let mut compared = 0u64;
    for i in 0..ITERATIONS / 2 {
        if i % 1000 == 0 {
            let bytes: Vec<u8> = (0..RAM).map(|_| r.u8(..)).collect();
            mem.write(GuestAddress(0), &bytes).unwrap();
        }
        let reg = registration(&mut r);
        let Ok(layout) = validate(&reg, RAM, &Limits::default()) else {
            continue;
        };
        if r.bool() {
            plant(&mut r, &mem, &layout);
        }
        let mut mapped = VmMonitor::new(layout.clone());
        let mut calls = VmMonitor::new(layout);
        for _ in 0..3 {
            for _ in 0..r.usize(0..64) {
                let at = r.u64(0..RAM - 8);
                mem.write(GuestAddress(at), &r.u64(..).to_ne_bytes())
                    .unwrap();
            }
            let budget = r.u32(0..512);
            mapped.prefetch(&mem);
            calls.prefetch(&Unmapped(&mem));
            let a = mapped.scan(&mem, budget);
            let b = calls.scan(&Unmapped(&mem), budget);
            assert_eq!(a, b);
            assert_eq!(mapped.counters(), calls.counters());
            assert_eq!(mapped.total(), calls.total());
            assert_eq!(mapped.state(), calls.state());
            compared += u64::from(a.entries);
        }
    }
    assert!(
        compared > ITERATIONS / 4,
        "only {compared} entries compared"
    );
}

#[test]
fn random_documents_never_panic_the_parser() {
    let mut r = fastrand::Rng::with_seed(7);
    let good = registration(&mut r);
    let json = serde_json::to_vec(&good).unwrap();
    for _ in 0..20_000 {
        let mut doc = json.clone();
        for _ in 0..r.usize(1..8) {
            let at = r.usize(0..doc.len());
            doc[at] = r.u8(..);
        }
        if let Ok(reg) = Registration::parse(&doc) {
            let _ = validate(&reg, RAM, &Limits::default());
        }
    }
}
