//! A QP in error: every send WQE (fetched or newly posted) and posted receive is flushed
//! with a `WR_FLUSH_ERR` CQE, as far as the CQs have room.

use super::{HcaState, FETCH_BUDGET};
use crate::objects::{QpState, Wr};
use resex_mlx5::consts::{cqe_op, syndrome};
use resex_mlx5::cqe::Cqe;
use resex_mlx5::dbrec::read_sq_pi;
use resex_mlx5::wqe::CtrlSeg;
use resex_mlx5::{index16, SEND_WQE_BB};

impl HcaState {
    /// Moves a QP to error; its remaining work is flushed.
    pub(crate) fn set_error(&mut self, qpn: u32) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.state = QpState::Error;
            q.req_active = false;
            q.resp_active = false;
        }
        self.link.forget(qpn);
        self.flush(qpn);
    }

    /// Flushes what a QP in error still holds: send WQEs (fetched or newly posted) and posted
    /// receives, each with a `WR_FLUSH_ERR` CQE, as far as the CQs have room.
    pub(super) fn flush(&mut self, qpn: u32) {
        let Some(q) = self.qps.get(&qpn) else { return };
        let Some(g) = self.guests.get(&q.guest).cloned() else {
            return;
        };
        // Newly posted WQEs: take their index and size from the control segment only.
        if let Ok(pi) = read_sq_pi(&*g.mem, q.dbrec) {
            for _ in 0..FETCH_BUDGET {
                let q = self.qps.get_mut(&qpn).expect("qp exists");
                let pending = u32::from(pi.wrapping_sub(index16(q.sq_ci)));
                if pending == 0 || pending > q.sq_cnt {
                    break;
                }
                let slot = u64::from(q.sq_ci & (q.sq_cnt - 1)) * SEND_WQE_BB;
                let mut head = [0u8; 16];
                let bbs = match q.sq.read(&*g.mem, slot, &mut head) {
                    Ok(()) => CtrlSeg::decode(&head).bbs().clamp(1, pending),
                    Err(_) => pending,
                };
                let w = Wr::failed(
                    index16(q.sq_ci),
                    bbs,
                    CtrlSeg::decode(&head).opcode,
                    syndrome::WR_FLUSH_ERR,
                    0,
                );
                q.sq_ci = q.sq_ci.wrapping_add(bbs);
                q.wrs.push_back(w);
            }
        }
        while let Some(w) = self.qps.get(&qpn).and_then(|q| q.wrs.front()) {
            let cqe = Cqe {
                opcode: cqe_op::REQ_ERR,
                qpn,
                send_opcode: w.opcode,
                wqe_counter: w.index,
                syndrome: syndrome::WR_FLUSH_ERR,
                ..Cqe::default()
            };
            let cqn = self.qps[&qpn].send_cq;
            if !self.push_flush(qpn, cqn, &cqe) {
                break;
            }
            self.qps.get_mut(&qpn).expect("qp exists").pop_wr();
        }
        // Posted receives.
        for _ in 0..FETCH_BUDGET {
            let Some((index, _)) = self.rq_peek(qpn) else {
                break;
            };
            let cqe = Cqe {
                opcode: cqe_op::RESP_ERR,
                qpn,
                wqe_counter: index,
                syndrome: syndrome::WR_FLUSH_ERR,
                ..Cqe::default()
            };
            let cqn = self.qps[&qpn].recv_cq;
            if !self.push_flush(qpn, cqn, &cqe) {
                break;
            }
            let q = self.qps.get_mut(&qpn).expect("qp exists");
            q.rq_ci = q.rq_ci.wrapping_add(1);
        }
    }

    /// Writes a flush CQE for `qpn` and counts it as an error completion; false when the CQ
    /// is full.
    fn push_flush(&mut self, qpn: u32, cqn: u32, cqe: &Cqe) -> bool {
        if !self.push_cqe(cqn, cqe) {
            return false;
        }
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.stats.cqes += 1;
            q.stats.errors += 1;
        }
        true
    }
}
