//! A queue pair of the softhca provider: send WQEs (inline or gathered) and receive WQEs
//! written into the guest's rings and announced through the doorbell record.

use super::*;

pub(super) struct SoftQp {
    pub(super) qpn: u32,
    pub(super) mem: Arc<dyn GuestMemory>,
    pub(super) ctl: Arc<dyn HcaControl>,
    /// Rung after each doorbell record write (`None`: the device polls the records).
    pub(super) bell: Option<Arc<Doorbell>>,
    pub(super) shared: Arc<Mutex<SqShared>>,
    pub(super) registry: Registry,
    pub(super) segs: Vec<DataSeg>,
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        lock(&self.registry).remove(&self.qpn);
        let _ = self.ctl.destroy_qp(self.qpn);
    }
}

impl SoftQp {
    /// Rings the device's doorbell (after the record is written).
    fn ring(&self) {
        if let Some(b) = &self.bell {
            b.ring();
        }
    }
}

impl QueuePair for SoftQp {
    fn qpn(&self) -> u32 {
        self.qpn
    }

    fn connect(&mut self, remote: QpAddr) -> Result<(), ShimError> {
        Ok(self.ctl.connect_qp(self.qpn, remote)?)
    }

    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ShimError> {
        let mut q = lock(&self.shared);
        let mut posted = 0;
        let mut result = Ok(());
        for wr in wrs {
            let (opcode, raddr, imm) = match wr.op {
                SendOp::Write(r) => (send_op::RDMA_WRITE, Some(r), 0),
                SendOp::WriteImm(r, i) => (send_op::RDMA_WRITE_IMM, Some(r), i),
                SendOp::Send => (send_op::SEND, None, 0),
                SendOp::SendImm(i) => (send_op::SEND_IMM, None, i),
                SendOp::Read(r) => (send_op::RDMA_READ, Some(r), 0),
            };
            if let Some(d) = wr.inline {
                if d.len() > q.max_inline as usize || opcode == send_op::RDMA_READ {
                    result = Err(RequestError::Inline {
                        len: d.len(),
                        max: q.max_inline,
                    }
                    .into());
                    break;
                }
            }
            self.segs.clear();
            self.segs.extend(wr.sges.iter().map(|s| DataSeg {
                byte_count: s.len,
                lkey: s.lkey,
                addr: s.addr,
            }));
            let mut spec = WqeSpec::new(opcode, self.qpn);
            spec.signaled = wr.signaled;
            spec.imm = imm;
            spec.raddr = raddr.map(|r| RaddrSeg {
                raddr: r.addr,
                rkey: r.rkey,
            });
            spec.sges = &self.segs;
            spec.inline = wr.inline;
            match q.sq.post(&*self.mem, &spec) {
                Ok((index, bbs)) => {
                    let slot = usize::from(index) & (q.sq_cnt as usize - 1);
                    q.wrids[slot] = (wr.wr_id, bbs, opcode);
                    posted += 1;
                }
                Err(WriteError::SqFull { .. }) => {
                    result = Err(ShimError::QueueFull { posted });
                    break;
                }
                Err(e) => {
                    result = Err(ShimError::Writer(e));
                    break;
                }
            }
        }
        if posted > 0 {
            q.sq.ring_doorbell(&*self.mem)?;
            self.ring();
        }
        result
    }

    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), ShimError> {
        let mut q = lock(&self.shared);
        let Some(rq) = q.rq.clone() else {
            return Err(RequestError::NoReceiveQueue.into());
        };
        let max_sge = (q.rq_stride / 16) as usize;
        let mut posted = 0;
        let mut result = Ok(());
        for wr in wrs {
            if wr.sges.len() > max_sge {
                result = Err(RequestError::ScatterEntries {
                    sges: wr.sges.len(),
                    max: max_sge,
                }
                .into());
                break;
            }
            if q.rq_head.wrapping_sub(q.rq_tail) >= q.rq_cnt {
                result = Err(ShimError::QueueFull { posted });
                break;
            }
            let mut bytes = vec![0u8; q.rq_stride as usize];
            for (i, s) in wr.sges.iter().enumerate() {
                bytes[i * 16..i * 16 + 16].copy_from_slice(
                    &DataSeg {
                        byte_count: s.len,
                        lkey: s.lkey,
                        addr: s.addr,
                    }
                    .encode(),
                );
            }
            if wr.sges.len() < max_sge {
                let end = DataSeg {
                    byte_count: 0,
                    lkey: INVALID_LKEY,
                    addr: 0,
                };
                let i = wr.sges.len();
                bytes[i * 16..i * 16 + 16].copy_from_slice(&end.encode());
            }
            let slot = q.rq_head & (q.rq_cnt - 1);
            rq.write(&*self.mem, u64::from(slot) * u64::from(q.rq_stride), &bytes)?;
            q.rq_wrids[slot as usize] = wr.wr_id;
            q.rq_head = q.rq_head.wrapping_add(1);
            posted += 1;
        }
        if posted > 0 {
            fence(Ordering::Release);
            // One store of the whole doorbell record (the device polls it): never half a
            // counter.
            write_rq_pi(&*self.mem, q.dbrec, index16(q.rq_head))?;
            self.ring();
        }
        result
    }
}
