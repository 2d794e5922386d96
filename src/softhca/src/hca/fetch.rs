//! Fetching: the SQ doorbell record, then each posted WQE, parsed and checked (hostile-safe);
//! a bad one completes in order with an error CQE.

use super::{HcaState, Syndrome, FETCH_BUDGET};
use crate::link::{Dir, PortId};
use crate::mr::{GuestId, MrFault};
use crate::objects::{Qp, QpState, Wr};
use resex_guestmem::{GuestAddress, GuestMemory};
use resex_mlx5::consts::{send_op, syndrome};
use resex_mlx5::dbrec::read_sq_pi;
use resex_mlx5::wqe::{parse_send_wqe, CtrlSeg, Payload};
use resex_mlx5::{index16, packets, DS_BYTES, SEND_WQE_BB};
use resex_proto::hca::access;
use std::sync::atomic::{fence, Ordering};

fn fault_syndrome_local(f: MrFault) -> Syndrome {
    match f {
        MrFault::BadKey | MrFault::NoAccess => syndrome::LOCAL_PROT,
        MrFault::OutOfBounds => syndrome::LOCAL_PROT,
    }
}

impl HcaState {
    pub(super) fn fetch(&mut self, qpn: u32, now: u64) {
        let Some(q) = self.qps.get(&qpn) else { return };
        if q.state != QpState::Rts {
            return;
        }
        let Some(g) = self.guests.get(&q.guest).cloned() else {
            return;
        };
        let pi = match read_sq_pi(&*g.mem, q.dbrec) {
            Ok(pi) => pi,
            Err(_) => return,
        };
        // The WQEs were written before the doorbell: read them after it.
        fence(Ordering::Acquire);
        for k in 0..FETCH_BUDGET as u64 {
            let q = &self.qps[&qpn];
            let pending = u32::from(pi.wrapping_sub(index16(q.sq_ci)));
            if pending == 0 {
                break;
            }
            if pending > q.sq_cnt {
                self.warn(qpn, "SQ doorbell beyond the ring: QP to error");
                self.fail_at_fetch(qpn, now, syndrome::LOCAL_QP_OP, 1);
                break;
            }
            match self.fetch_one(qpn, &*g.mem, pending, now, k) {
                Ok(wr) => {
                    let q = self.qps.get_mut(&qpn).expect("qp exists");
                    q.sq_ci = q.sq_ci.wrapping_add(wr.bbs);
                    let has_packets = wr.req_pkts > 0;
                    q.wrs.push_back(wr);
                    if q.state == QpState::Rts && has_packets && !q.req_active {
                        q.req_active = true;
                        let port = self.guests.get(&q.guest).map_or(PortId(0), |g| g.port);
                        self.link.activate(port, (qpn, Dir::Request), q.guest.0);
                    }
                }
                Err((syn, bbs)) => {
                    self.warn(qpn, "bad send WQE: error CQE");
                    self.fail_at_fetch(qpn, now, syn, bbs);
                    break;
                }
            }
        }
    }

    /// A WQE that failed at fetch: it completes (in order) with an error.
    fn fail_at_fetch(&mut self, qpn: u32, now: u64, syn: Syndrome, bbs: u32) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        let wr = Wr::failed(index16(q.sq_ci), bbs, 0, syn, now);
        q.sq_ci = q.sq_ci.wrapping_add(bbs.max(1));
        q.wrs.push_back(wr);
    }

    fn fetch_one(
        &self,
        qpn: u32,
        mem: &dyn GuestMemory,
        pending: u32,
        now: u64,
        k: u64,
    ) -> Result<Wr, (Syndrome, u32)> {
        let q = &self.qps[&qpn];
        let (ctrl, bbs, bytes) = read_wqe(q, mem, pending)?;
        let wqe = parse_send_wqe(&bytes).map_err(|_| (syndrome::LOCAL_QP_OP, bbs))?;
        let opcode = wqe.ctrl.opcode;
        let is_read = opcode == send_op::RDMA_READ;
        if !supported(opcode) {
            // Atomics and the rest: not implemented by softhca; refused clearly.
            return Err((syndrome::LOCAL_QP_OP, bbs));
        }
        // The message size limit (2^31) first: up to 62 SGEs of 2 GiB each under a region with
        // scattered pages would otherwise be translated into millions of spans (an allocation
        // the guest's values drive) before being refused.
        let len = wqe.payload.len();
        if len > 1 << 31 {
            return Err((syndrome::LOCAL_LENGTH, bbs));
        }
        let (local, inline) = self.local_payload(q.guest, wqe.payload, is_read, bbs)?;
        let (req_pkts, resp_pkts) = match opcode {
            send_op::NOP => (0, 0),
            send_op::RDMA_READ => (1, packets(len, q.mtu)),
            _ => (packets(len, q.mtu), 0),
        };
        let raddr = wqe.raddr.unwrap_or_default();
        // The NIC model: doorbell, WQE fetch, the chain's processing, the payload's DMA read.
        let gathered = inline.is_none() && !is_read && len > 0;
        let ready_ps = if opcode == send_op::NOP {
            now
        } else {
            self.link.config().nic.ready_ps(now, k, gathered)
        };
        Ok(Wr {
            index: ctrl.wqe_index,
            bbs,
            opcode,
            signaled: ctrl.signaled(),
            imm: ctrl.imm,
            raddr: raddr.raddr,
            rkey: raddr.rkey,
            local,
            inline,
            len,
            req_pkts,
            req_sent: 0,
            resp_pkts,
            resp_sent: 0,
            ready_ps,
            req_arrived_ps: None,
            done_ps: (opcode == send_op::NOP).then_some(now),
            ack_ps: (opcode == send_op::NOP).then_some(now),
            executed: opcode == send_op::NOP,
            error: None,
            rnr_tries: 0,
        })
    }

    /// The payload's local side: the gather list translated through `guest`'s regions (a
    /// READ's, which it scatters into, needs local write), or the inline data (not for a READ).
    fn local_payload(
        &self,
        guest: GuestId,
        payload: Payload<'_>,
        is_read: bool,
        bbs: u32,
    ) -> Result<LocalPayload, (Syndrome, u32)> {
        let mut local = Vec::new();
        let mut inline = None;
        match payload {
            Payload::Inline(d) => {
                if is_read {
                    return Err((syndrome::LOCAL_QP_OP, bbs));
                }
                inline = Some(d.to_vec());
            }
            Payload::Gather { .. } => {
                let need = if is_read { access::LOCAL_WRITE } else { 0 };
                for seg in payload.data_segs() {
                    self.mrs
                        .translate(
                            guest,
                            seg.lkey,
                            seg.addr,
                            u64::from(seg.byte_count),
                            need,
                            &mut local,
                        )
                        .map_err(|f| (fault_syndrome_local(f), bbs))?;
                }
            }
        }
        Ok((local, inline))
    }
}

/// A WQE's local side: its translated gather list and its inline data.
type LocalPayload = (Vec<(GuestAddress, u64)>, Option<Vec<u8>>);

/// The send WQE at the SQ's consumer index: its control segment (checked against the index,
/// and to fit in the `pending` basic blocks), its basic blocks and its bytes.
fn read_wqe(
    q: &Qp,
    mem: &dyn GuestMemory,
    pending: u32,
) -> Result<(CtrlSeg, u32, Vec<u8>), (Syndrome, u32)> {
    let slot = u64::from(q.sq_ci & (q.sq_cnt - 1)) * SEND_WQE_BB;
    let mut head = [0u8; 16];
    q.sq.read(mem, slot, &mut head)
        .map_err(|_| (syndrome::LOCAL_QP_OP, 1))?;
    let ctrl = CtrlSeg::decode(&head);
    let bbs = ctrl.bbs().max(1);
    if ctrl.wqe_index != index16(q.sq_ci) || ctrl.ds == 0 || bbs > pending {
        return Err((syndrome::LOCAL_QP_OP, bbs.min(pending)));
    }
    let mut bytes = vec![0u8; usize::from(ctrl.ds) * DS_BYTES];
    q.sq.read(mem, slot, &mut bytes)
        .map_err(|_| (syndrome::LOCAL_QP_OP, bbs))?;
    Ok((ctrl, bbs, bytes))
}

/// The send opcodes softhca implements.
#[inline]
fn supported(opcode: u8) -> bool {
    matches!(
        opcode,
        send_op::RDMA_WRITE
            | send_op::RDMA_WRITE_IMM
            | send_op::SEND
            | send_op::SEND_IMM
            | send_op::RDMA_READ
            | send_op::NOP
    )
}
