//! A completion queue of the softhca provider: real mlx5 CQEs polled by owner bit, the send
//! side's work requests retired through the shared SQ state.

use super::*;

pub(super) struct SoftCq {
    pub(super) cqn: u32,
    pub(super) mem: Arc<dyn GuestMemory>,
    pub(super) ring: PageRing,
    pub(super) log: u32,
    pub(super) ci: u32,
    pub(super) dbrec: GuestAddress,
    pub(super) qps: Registry,
}

impl CompletionQueue for SoftCq {
    fn cqn(&self) -> u32 {
        self.cqn
    }

    fn poll(&mut self, out: &mut Vec<Wc>, max: usize) -> Result<usize, ShimError> {
        let mask = (1u32 << self.log) - 1;
        let mut n = 0;
        while n < max {
            let at = u64::from(self.ci & mask) * 64;
            let op_own = self.ring.read_u8(&*self.mem, at + 63)?;
            if !is_valid_for(op_own, self.ci, self.log) {
                break;
            }
            fence(Ordering::Acquire);
            let mut b = [0u8; 64];
            self.ring.read(&*self.mem, at, &mut b)?;
            let cqe = Cqe::decode(&b);
            self.ci = (self.ci + 1) & 0x00ff_ffff;
            out.push(self.to_wc(&cqe)?);
            n += 1;
        }
        if n > 0 {
            write_cq_ci(&*self.mem, self.dbrec, self.ci)?;
        }
        Ok(n)
    }
}

impl SoftCq {
    fn to_wc(&self, c: &Cqe) -> Result<Wc, ShimError> {
        let qp = lock(&self.qps)
            .get(&c.qpn)
            .cloned()
            .ok_or(ProtocolError::UnknownQp { qpn: c.qpn })?;
        let mut q = lock(&qp);
        let status = if c.is_error() {
            WcStatus::Error(c.syndrome)
        } else {
            WcStatus::Success
        };
        match c.opcode {
            cqe_op::REQ | cqe_op::REQ_ERR => {
                let slot = usize::from(c.wqe_counter) & (q.sq_cnt as usize - 1);
                let (wr_id, bbs, op) = q.wrids[slot];
                q.sq.complete_through(c.wqe_counter, bbs);
                Ok(Wc {
                    wr_id,
                    status,
                    opcode: match op {
                        send_op::SEND | send_op::SEND_IMM => WcOpcode::Send,
                        send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM => WcOpcode::Write,
                        send_op::RDMA_READ => WcOpcode::Read,
                        _ => WcOpcode::Other,
                    },
                    byte_len: c.byte_cnt,
                    imm: None,
                    qpn: c.qpn,
                })
            }
            _ => {
                let slot = usize::from(c.wqe_counter) & (q.rq_cnt.max(1) as usize - 1);
                let wr_id = q.rq_wrids.get(slot).copied().unwrap_or(0);
                q.rq_tail = q.rq_tail.wrapping_add(1);
                Ok(Wc {
                    wr_id,
                    status,
                    opcode: match c.opcode {
                        cqe_op::RESP_WR_IMM => WcOpcode::RecvWriteImm,
                        cqe_op::RESP_SEND | cqe_op::RESP_SEND_IMM => WcOpcode::Recv,
                        _ => WcOpcode::Other,
                    },
                    byte_len: c.byte_cnt,
                    imm: matches!(c.opcode, cqe_op::RESP_WR_IMM | cqe_op::RESP_SEND_IMM)
                        .then_some(c.imm),
                    qpn: c.qpn,
                })
            }
        }
    }
}
