//! The host core on a soft-RoCE guest: a registration of rxe rings alone is counted by the same
//! step as mlx5 rings, interval by interval.
#![allow(missing_docs, clippy::cast_possible_truncation)]

use resex_core::{CoreConfig, HostCore, VmId, VmInfo};
use resex_guestmem::{GuestAddress, GuestMemory, VecMemory};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::rxe::{layout, wr_op};
use resex_proto::{Registration, RingFormat, RingKind, RingRegistration};
use std::sync::Arc;

const RAM: u64 = 0x10000;
const SQ: u64 = 0x2000;
const MS: u64 = 1_000_000;

fn put(mem: &VecMemory, at: u64, v: u32) {
    mem.write(GuestAddress(at), &v.to_ne_bytes()).unwrap();
}

#[test]
fn a_vm_with_soft_roce_rings_only_is_counted_by_the_step() {
    let mem = Arc::new(VecMemory::new(RAM as usize));
    put(&mem, SQ + layout::queue::LOG2_ELEM_SIZE as u64, 9);
    put(&mem, SQ + layout::queue::INDEX_MASK as u64, 15);
    let doc = Registration {
        version: 1,
        vm: None,
        path_mtu: 1024,
        qps: vec![],
        mailbox: None,
        rings: vec![RingRegistration {
            format: RingFormat::Rxe,
            kind: RingKind::Sq,
            qpn: Some(17),
            pages: vec![SQ, SQ + 4096, SQ + 8192],
            offset: 0,
            slots: 16,
            elem_size: 512,
            start: None,
            key: None,
        }],
    };
    let mut core = HostCore::new(CoreConfig::default());
    let id = VmId(1);
    core.add_vm(id, VmInfo::new("rxe", 1, RAM)).unwrap();
    core.set_memory(id, mem.clone()).unwrap();
    let layout = validate(&doc, RAM, &Limits::default()).unwrap();
    core.register(id, &doc, layout).unwrap();
    let mut posted = 0u32;
    let mut total = 0u64;
    core.snapshot(0);
    for k in 1..=10u64 {
        // k WRITEs of 3000 bytes (3 packets each) this interval.
        for _ in 0..k {
            let at = SQ + 384 + (u64::from(posted & 15) << 9);
            put(
                &mem,
                at + layout::send_wqe::OPCODE as u64,
                wr_op::RDMA_WRITE,
            );
            put(&mem, at + layout::send_wqe::DMA_LENGTH as u64, 3000);
            put(&mem, at + layout::send_wqe::SSN as u64, posted);
            posted += 1;
        }
        put(&mem, SQ + layout::queue::PRODUCER as u64, posted & 15);
        // The kernel consumes all but the last one.
        put(&mem, SQ + layout::queue::CONSUMER as u64, (posted - 1) & 15);
        let out = core.step(k * MS).unwrap();
        let d = out.rows[0].delta;
        assert_eq!(
            (d.wqes, d.tx_bytes, d.mtus),
            (k, 3000 * k, 3 * k),
            "interval {k}"
        );
        total += k;
    }
    let v = core.vm(id).unwrap();
    assert_eq!((v.total().wqes, v.qps()), (total, 1));
    // The host's own latency estimate: one request outstanding at each of the 10 ticks, 55
    // posted over 10 ms: 1 / 5.5 per ms = 181.8 us (Little's law), with no report at all.
    let snap = core.snapshot(10 * MS);
    let est = snap.vms[0].io_latency_us.unwrap();
    assert!((est - 1000.0 / 5.5).abs() < 1e-6, "{est}");
    assert_eq!(snap.vms[0].lat_mean_us, None);
}
