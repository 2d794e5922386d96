//! Test rig for the HCA: one guest, two connected QPs, rings written by hand, virtual time.
//!
//! - `fetch`: the WQE fetch against hostile ring bytes: garbage opcodes, `ds` past the posted
//!   WQE, SGEs past their region, keys that do not exist, wrapped indices, a doorbell record
//!   far ahead of the ring. Each is an error CQE with the syndrome a ConnectX gives (or a
//!   refusal); the QP goes to error and flushes the rest; nothing panics or runs without bound.
//! - `random`: the same over random ring bytes (proptest).

mod fetch;
mod random;

use crate::{GuestPort, LinkConfig, PortId, SoftHca};
use proptest::prelude::*;
use resex_guestmem::{GuestAddress, GuestMemory, VecMemory};
use resex_mlx5::consts::{cqe_op, send_op, syndrome};
use resex_mlx5::cqe::{is_valid_for, Cqe};
use resex_mlx5::dbrec::write_sq_pi;
use resex_mlx5::wqe::{CtrlSeg, DataSeg, RaddrSeg, WqeSpec};
use resex_mlx5::SEND_WQE_BB;
use resex_proto::hca::{access, CreateCq, CreateQp, HcaControl, MrKeys, QpAddr, RegMr, RingDesc};
use std::sync::Arc;

const RAM: usize = 1 << 20;
/// The requester's SQ: 16 basic blocks in one page.
const SQ: u64 = 0x1000;
const SQ_CNT: u32 = 16;
const DBREC: u64 = 0x2000;
/// The requester's CQ (send and receive): 16 entries of 64 bytes.
const CQ: u64 = 0x3000;
const CQ_CNT: u32 = 16;
const CQ_DBREC: u64 = 0x4000;
const PEER_SQ: u64 = 0x5000;
const PEER_DBREC: u64 = 0x6000;
const PEER_CQ: u64 = 0x7000;
const PEER_CQ_DBREC: u64 = 0x8000;
/// One region of two pages, local and remote access, used by both QPs (one guest).
const MR: u64 = 0x10000;
const MR_LEN: u64 = 0x2000;
/// A key no region has.
const NO_KEY: u32 = 0x00de_ad42;

/// One guest with two connected QPs: `qpn` posts (its rings written by hand), `peer` answers.
struct Rig {
    hca: SoftHca,
    port: GuestPort,
    mem: Arc<VecMemory>,
    qpn: u32,
    keys: MrKeys,
    now_ns: u64,
}

fn ring(page: u64) -> RingDesc {
    RingDesc {
        pages: vec![page],
        offset: 0,
    }
}

impl Rig {
    fn new() -> Rig {
        let hca = SoftHca::new(LinkConfig::default(), 1);
        let mem = Arc::new(VecMemory::new(RAM));
        let port = hca.add_guest(mem.clone(), PortId(0));
        let cq = |buf, dbrec| CreateCq {
            ring: ring(buf),
            cqe_cnt: CQ_CNT,
            cqe_size: 64,
            dbrec,
        };
        let cqn = port.create_cq(&cq(CQ, CQ_DBREC)).unwrap();
        let peer_cqn = port.create_cq(&cq(PEER_CQ, PEER_CQ_DBREC)).unwrap();
        let qp = |sq, dbrec, cqn| CreateQp {
            sq: ring(sq),
            sq_wqe_cnt: SQ_CNT,
            rq: RingDesc {
                pages: vec![],
                offset: 0,
            },
            rq_wqe_cnt: 0,
            rq_stride: 0,
            dbrec,
            send_cq: cqn,
            recv_cq: cqn,
            path_mtu: 1024,
        };
        let qpn = port.create_qp(&qp(SQ, DBREC, cqn)).unwrap();
        let peer = port.create_qp(&qp(PEER_SQ, PEER_DBREC, peer_cqn)).unwrap();
        port.connect_qp(qpn, QpAddr::qpn(peer)).unwrap();
        port.connect_qp(peer, QpAddr::qpn(qpn)).unwrap();
        let keys = port
            .reg_mr(&RegMr {
                iova: MR,
                length: MR_LEN,
                pages: vec![MR, MR + 0x1000],
                access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            })
            .unwrap();
        Rig {
            hca,
            port,
            mem,
            qpn,
            keys,
            now_ns: 0,
        }
    }

    /// Writes `bytes` into the SQ from basic block `bb` on, wrapping at the ring's end.
    fn write(&self, bb: u32, bytes: &[u8]) {
        let len = u64::from(SQ_CNT) * SEND_WQE_BB;
        for (i, b) in bytes.iter().enumerate() {
            let k = (u64::from(bb) * SEND_WQE_BB + i as u64) % len;
            self.mem.write_u8(GuestAddress(SQ + k), *b).unwrap();
        }
    }

    /// Rings the SQ doorbell record with producer counter `pi`.
    fn doorbell(&self, pi: u16) {
        write_sq_pi(&*self.mem, GuestAddress(DBREC), pi).unwrap();
    }

    /// Polls every millisecond of virtual time for `ms` ms (RNR and transport retries included).
    fn run(&mut self, ms: u32) {
        for _ in 0..ms {
            self.now_ns += 1_000_000;
            self.hca.poll(self.now_ns);
        }
    }

    /// The valid entries of the requester's CQ, in order (it never laps in these tests).
    fn cqes(&self) -> Vec<Cqe> {
        (0..CQ_CNT)
            .map(|i| {
                let mut b = [0u8; 64];
                self.mem
                    .read(GuestAddress(CQ + u64::from(i) * 64), &mut b)
                    .unwrap();
                (i, b)
            })
            .take_while(|(i, b)| is_valid_for(b[63], *i, CQ_CNT.trailing_zeros()))
            .map(|(_, b)| Cqe::decode(&b))
            .collect()
    }

    fn set_sq_ci(&self, ci: u32) {
        self.hca.lock().qps.get_mut(&self.qpn).unwrap().sq_ci = ci;
    }

    fn in_flight(&self) -> usize {
        self.hca.lock().qps[&self.qpn].wrs.len()
    }

    fn in_error(&self) -> bool {
        self.hca.lock().qps[&self.qpn].state == crate::objects::QpState::Error
    }

    fn write_spec(&self, index: u16, spec: &WqeSpec<'_>) -> u32 {
        let bytes = spec.build(index).unwrap();
        self.write(u32::from(index), &bytes);
        u32::try_from(bytes.len().div_ceil(64)).unwrap()
    }
}

/// A control segment with index `index`, `opcode` and `ds`, signalled.
fn ctrl(index: u16, opcode: u8, ds: u8) -> [u8; 16] {
    CtrlSeg {
        wqe_index: index,
        opcode,
        ds,
        fm_ce_se: resex_mlx5::consts::ctrl_flags::CQ_UPDATE,
        ..CtrlSeg::default()
    }
    .encode()
}

fn write_to(raddr: u64, rkey: u32, sges: &[DataSeg]) -> WqeSpec<'_> {
    WqeSpec {
        signaled: true,
        raddr: Some(RaddrSeg { raddr, rkey }),
        sges,
        ..WqeSpec::new(send_op::RDMA_WRITE, 0)
    }
}

fn sge(byte_count: u32, lkey: u32, addr: u64) -> DataSeg {
    DataSeg {
        byte_count,
        lkey,
        addr,
    }
}

/// The CQ holds exactly one requester error CQE, for WQE `index`, with `syn`; the QP is in
/// error.
#[track_caller]
fn assert_one_error(rig: &Rig, index: u16, syn: u8) {
    let cqes = rig.cqes();
    assert_eq!(cqes.len(), 1, "{cqes:?}");
    let c = cqes[0];
    assert_eq!(
        (c.opcode, c.qpn, c.wqe_counter, c.syndrome),
        (cqe_op::REQ_ERR, rig.qpn, index, syn),
        "{c:?}"
    );
    assert!(rig.in_error());
    assert_eq!(rig.in_flight(), 0);
}

/// Posts one WQE (its bytes at BB 0), rings for `bbs` basic blocks, runs 20 ms.
fn post_raw(bytes: &[u8], bbs: u16) -> Rig {
    let mut rig = Rig::new();
    rig.write(0, bytes);
    rig.doorbell(bbs);
    rig.run(20);
    rig
}
