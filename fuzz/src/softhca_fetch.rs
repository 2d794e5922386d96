//! Target `softhca_fetch`: softhca executing a guest's rings written from the input. One guest
//! has two connected QPs: the requester's SQ, its doorbell record, the responder's receive
//! queue and its head, and the guest's consumer indices come from the input; softhca polls in
//! virtual time.
//!
//! Input: rounds of (SQ producer counter `u16`, RQ head `u16`, a patch: ring offset `u16`,
//! length `u8`, then that many bytes written into the SQ/RQ area, the number of 1 ms polls).
//!
//! Checked: nothing panics; every CQE is one softhca may write; softhca writes nothing outside
//! the CQs and the registered region.

use crate::input::Input;
use resex_guestmem::{GuestAddress, GuestMemory, VecMemory};
use resex_mlx5::consts::cqe_op;
use resex_mlx5::cqe::{is_valid_for, Cqe};
use resex_mlx5::dbrec::write_sq_pi;
use resex_proto::hca::{access, CreateCq, CreateQp, HcaControl, MrKeys, QpAddr, RegMr, RingDesc};
use resex_softhca::{LinkConfig, PortId, SoftHca};
use std::sync::Arc;

/// Guest RAM: 16 pages.
pub const RAM: usize = 16 * 4096;
/// The requester's SQ (16 basic blocks); the input's patches land in `SQ..SQ + 0x2000`, which
/// also covers the responder's receive queue at `RQ`.
pub const SQ: u64 = 0x1000;
/// The responder's receive queue: 16 entries of 64 bytes.
pub const RQ: u64 = 0x2000;
/// The requester's QP doorbell record.
pub const DBREC: u64 = 0x3000;
/// The responder's QP doorbell record (word 0: RQ head).
pub const PEER_DBREC: u64 = 0x3040;
/// The requester's CQ (16 entries of 64 bytes); its doorbell record at `CQ_DBREC`.
pub const CQ: u64 = 0x4000;
/// The requester's CQ doorbell record.
pub const CQ_DBREC: u64 = 0x3080;
/// The responder's CQ.
pub const PEER_CQ: u64 = 0x5000;
/// The responder's CQ doorbell record.
pub const PEER_CQ_DBREC: u64 = 0x30c0;
/// The responder's SQ (unused but required).
pub const PEER_SQ: u64 = 0x6000;
/// The registered region: 2 pages, every access.
pub const MR: u64 = 0x8000;
/// Its length.
pub const MR_LEN: u64 = 0x2000;

/// The guest, its memory and the region's keys.
pub struct Rig {
    /// The HCA.
    pub hca: SoftHca,
    /// The guest's memory.
    pub mem: Arc<VecMemory>,
    /// The region's keys (the same every time: the first region of a fresh HCA).
    pub keys: MrKeys,
}

fn ring(page: u64) -> RingDesc {
    RingDesc {
        pages: vec![page],
        offset: 0,
    }
}

impl Rig {
    /// A fresh HCA with the guest attached and both QPs connected.
    pub fn new() -> Rig {
        let hca = SoftHca::new(LinkConfig::default(), 1);
        let mem = Arc::new(VecMemory::new(RAM));
        let port = hca.add_guest(mem.clone(), PortId(0));
        let cq = |buf, dbrec| CreateCq {
            ring: ring(buf),
            cqe_cnt: 16,
            cqe_size: 64,
            dbrec,
        };
        let ok = "the rig's own requests are valid";
        let cqn = port.create_cq(&cq(CQ, CQ_DBREC)).expect(ok);
        let peer_cqn = port.create_cq(&cq(PEER_CQ, PEER_CQ_DBREC)).expect(ok);
        let qp = |sq, rq: Option<u64>, dbrec, cqn| CreateQp {
            sq: ring(sq),
            sq_wqe_cnt: 16,
            rq: rq.map_or(
                RingDesc {
                    pages: vec![],
                    offset: 0,
                },
                ring,
            ),
            rq_wqe_cnt: if rq.is_some() { 16 } else { 0 },
            rq_stride: if rq.is_some() { 64 } else { 0 },
            dbrec,
            send_cq: cqn,
            recv_cq: cqn,
            path_mtu: 1024,
        };
        let qpn = port.create_qp(&qp(SQ, None, DBREC, cqn)).expect(ok);
        let peer = port
            .create_qp(&qp(PEER_SQ, Some(RQ), PEER_DBREC, peer_cqn))
            .expect(ok);
        port.connect_qp(qpn, QpAddr::qpn(peer)).expect(ok);
        port.connect_qp(peer, QpAddr::qpn(qpn)).expect(ok);
        let keys = port
            .reg_mr(&RegMr {
                iova: MR,
                length: MR_LEN,
                pages: vec![MR, MR + 0x1000],
                access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            })
            .expect(ok);
        Rig { hca, mem, keys }
    }
}

impl Default for Rig {
    fn default() -> Rig {
        Rig::new()
    }
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let rig = Rig::new();
    let mut input = Input::new(data);
    let mut now = 0u64;
    let before = rig.mem.to_vec();
    for _ in 0..8 {
        if input.is_empty() {
            break;
        }
        let pi = input.u16();
        let rq_head = input.u16();
        let at = u64::from(input.u16() % 0x2000);
        let len = usize::from(input.u8());
        let patch = input.bytes(len);
        let polls = 1 + input.below(16);
        let guest = |a: u64, b: &[u8]| {
            // Inside the guest's RAM by construction: cannot fail.
            let _ = rig.mem.write(GuestAddress(a), b);
        };
        let n = patch.len().min(usize::try_from(0x2000 - at).unwrap_or(0));
        guest(SQ + at, &patch[..n]);
        guest(PEER_DBREC, &u32::from(rq_head).to_be_bytes());
        let _ = write_sq_pi(&*rig.mem, GuestAddress(DBREC), pi);
        for _ in 0..polls {
            now += 1_000_000;
            rig.hca.poll(now);
        }
    }
    check(&rig, before);
}

/// `mem` with the ranges in `skip` zeroed.
fn without(mut mem: Vec<u8>, skip: &[(u64, u64)]) -> Vec<u8> {
    for &(a, n) in skip {
        mem[a as usize..(a + n) as usize].fill(0);
    }
    mem
}

fn check(rig: &Rig, before: Vec<u8>) {
    let after = rig.mem.to_vec();
    // The guest writes its rings and doorbell records; softhca its CQs and the region.
    let skip = [
        (SQ, 0x2000),
        (DBREC, 0x100),
        (CQ, 1024),
        (PEER_CQ, 1024),
        (MR, MR_LEN),
    ];
    let (b, a) = (without(before, &skip), without(after.clone(), &skip));
    if let Some(i) = (0..RAM).find(|&i| b[i] != a[i]) {
        panic!("softhca wrote guest memory at {i:#x}, outside its CQs and the region");
    }
    for cq in [CQ, PEER_CQ] {
        for i in 0..16u32 {
            let mut b = [0u8; 64];
            let at = cq as usize + i as usize * 64;
            b.copy_from_slice(&after[at..at + 64]);
            if !is_valid_for(b[63], i, 4) {
                break;
            }
            let c = Cqe::decode(&b);
            assert!(
                matches!(
                    c.opcode,
                    cqe_op::REQ
                        | cqe_op::REQ_ERR
                        | cqe_op::RESP_ERR
                        | cqe_op::RESP_SEND
                        | cqe_op::RESP_SEND_IMM
                        | cqe_op::RESP_WR_IMM
                ),
                "{c:?}"
            );
        }
    }
}
