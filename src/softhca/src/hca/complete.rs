//! Completing: the oldest work request of a QP, once its effect has landed and its ACK is
//! due, executes and retires with a CQE (when signalled); RNR retries; error CQEs.

use super::execute::Exec;
use super::{HcaState, Syndrome, FETCH_BUDGET, RNR_DELAY_PS, RNR_RETRIES};
use crate::objects::QpState;
use resex_mlx5::consts::{cqe_op, send_op, syndrome};
use resex_mlx5::cqe::Cqe;
use resex_mlx5::dbrec::read_cq_ci;

impl HcaState {
    pub(super) fn complete(&mut self, qpn: u32, now: u64) {
        for _ in 0..FETCH_BUDGET * 4 {
            let Some(q) = self.qps.get(&qpn) else { return };
            if q.state == QpState::Error {
                self.flush(qpn);
                return;
            }
            let Some(w) = q.wrs.front() else { return };
            if let Some(syn) = w.error {
                if w.ack_ps.is_some_and(|t| t <= now) {
                    self.error_completion(qpn, syn);
                }
                return;
            }
            if !w.executed {
                if w.done_ps.is_none_or(|t| t > now) {
                    return;
                }
                match self.execute(qpn) {
                    Ok(()) => {
                        if let Some(w) = self.front_mut(qpn) {
                            w.executed = true;
                        }
                    }
                    Err(Exec::NotReady) => {
                        let w = self.front_mut(qpn).expect("front exists");
                        w.rnr_tries += 1;
                        if w.rnr_tries > RNR_RETRIES {
                            w.error = Some(syndrome::RNR_RETRY_EXC);
                            w.ack_ps = Some(now);
                        } else {
                            w.done_ps = Some(now + RNR_DELAY_PS);
                            w.ack_ps = Some(now + RNR_DELAY_PS);
                        }
                        continue;
                    }
                    Err(Exec::Failed(syn)) => {
                        let w = self.front_mut(qpn).expect("front exists");
                        w.error = Some(syn);
                        continue;
                    }
                }
            }
            let w = self.front_mut(qpn).expect("front exists");
            if w.ack_ps.is_none_or(|t| t > now) {
                return;
            }
            let (signaled, index, opcode, len, byte_cnt) =
                (w.signaled, w.index, w.opcode, w.len, w.len);
            if signaled {
                let cqe = Cqe {
                    opcode: cqe_op::REQ,
                    qpn,
                    send_opcode: opcode,
                    wqe_counter: index,
                    // The HCA's clock, as mlx5 writes it with timestamps on (ns here).
                    timestamp: now / 1000,
                    byte_cnt: if opcode == send_op::RDMA_READ {
                        u32::try_from(byte_cnt).unwrap_or(u32::MAX)
                    } else {
                        0
                    },
                    ..Cqe::default()
                };
                let cqn = self.qps[&qpn].send_cq;
                if !self.push_cqe(cqn, &cqe) {
                    return;
                }
            }
            let q = self.qps.get_mut(&qpn).expect("qp exists");
            let w = q.pop_wr().expect("front exists");
            let s = &mut q.stats;
            if signaled {
                s.cqes += 1;
            }
            if opcode != send_op::NOP {
                s.wqes += 1;
                s.timed += 1;
                s.sojourn_ns += now.saturating_sub(w.ready_ps) / 1000;
                let pkts = w.req_pkts + w.resp_pkts;
                let bits = (len + pkts * u64::from(self.link.config().header_bytes)) * 8;
                s.wire_ns += bits * 1_000_000_000 / self.link.config().bits_per_sec.max(1);
                if opcode == send_op::RDMA_READ {
                    s.tx_packets += 1;
                    s.rx_read_bytes += len;
                    s.rx_read_packets += w.resp_pkts;
                } else {
                    s.tx_bytes += len;
                    s.tx_packets += w.req_pkts;
                }
            }
        }
    }

    /// Writes a CQE if the CQ has room (per the guest's consumer index). False: try later.
    pub(super) fn push_cqe(&mut self, cqn: u32, cqe: &Cqe) -> bool {
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            return true; // CQ destroyed: the completion has nowhere to go.
        };
        let Some(g) = self.guests.get(&cq.guest) else {
            return true;
        };
        let ci = read_cq_ci(&*g.mem, cq.dbrec).unwrap_or(0);
        if !cq.writer.has_room(ci) {
            cq.full_stalls += 1;
            return false;
        }
        cq.writer.push(&*g.mem, cqe).is_ok()
    }

    fn error_completion(&mut self, qpn: u32, syn: Syndrome) {
        let q = &self.qps[&qpn];
        let w = q.wrs.front().expect("front exists");
        let cqe = Cqe {
            opcode: cqe_op::REQ_ERR,
            qpn,
            send_opcode: w.opcode,
            wqe_counter: w.index,
            syndrome: syn,
            ..Cqe::default()
        };
        let cqn = q.send_cq;
        if !self.push_cqe(cqn, &cqe) {
            return;
        }
        let q = self.qps.get_mut(&qpn).expect("qp exists");
        q.pop_wr();
        q.stats.cqes += 1;
        q.stats.errors += 1;
        self.set_error(qpn);
    }
}
