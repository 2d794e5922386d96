//! Executing: applying a work request between the guests' registered memory (WRITE/IMM,
//! READ, SEND/IMM), consuming the responder's receive WQEs with their CQEs.

use super::{HcaState, Syndrome, INVALID_LKEY};
use crate::mr::GuestId;
use crate::objects::{QpState, Wr};
use resex_guestmem::{GuestAddress, GuestMemory};
use resex_mlx5::consts::{cqe_op, send_op, syndrome};
use resex_mlx5::cqe::Cqe;
use resex_mlx5::dbrec::read_rq_pi;
use resex_mlx5::wqe::DataSeg;
use resex_mlx5::{index16, DS_BYTES};
use resex_proto::hca::access;
use std::sync::atomic::{fence, Ordering};

impl HcaState {
    /// The next posted receive WQE of a QP: its index and its scatter list.
    pub(super) fn rq_peek(&self, qpn: u32) -> Option<(u16, Vec<DataSeg>)> {
        let q = self.qps.get(&qpn)?;
        let rq = q.rq.as_ref()?;
        let g = self.guests.get(&q.guest)?;
        let head = read_rq_pi(&*g.mem, q.dbrec).ok()?;
        fence(Ordering::Acquire);
        let avail = head.wrapping_sub(index16(q.rq_ci));
        if avail == 0 || u32::from(avail) > q.rq_cnt {
            return None;
        }
        let slot = u64::from(q.rq_ci & (q.rq_cnt - 1)) * u64::from(q.rq_stride);
        let mut bytes = vec![0u8; q.rq_stride as usize];
        rq.read(&*g.mem, slot, &mut bytes).ok()?;
        let segs = bytes
            .chunks_exact(DS_BYTES)
            .map(|c| DataSeg::decode(c.try_into().unwrap_or(&[0u8; 16])))
            .take_while(|s| s.lkey != INVALID_LKEY)
            .filter(|s| s.byte_count != 0)
            .collect();
        Some((index16(q.rq_ci), segs))
    }

    pub(super) fn execute(&mut self, qpn: u32) -> Result<(), Exec> {
        let q = &self.qps[&qpn];
        let w = q.wrs.front().expect("front exists").clone();
        let remote = q
            .remote
            .ok_or(Exec::Failed(syndrome::TRANSPORT_RETRY_EXC))?;
        let r = self
            .qps
            .get(&remote)
            .ok_or(Exec::Failed(syndrome::TRANSPORT_RETRY_EXC))?;
        if r.state != QpState::Rts {
            return Err(Exec::Failed(syndrome::REMOTE_OP));
        }
        let (lguest, rguest) = (q.guest, r.guest);
        let lmem = self
            .guests
            .get(&lguest)
            .ok_or(Exec::Failed(syndrome::LOCAL_QP_OP))?
            .mem
            .clone();
        let rmem = self
            .guests
            .get(&rguest)
            .ok_or(Exec::Failed(syndrome::REMOTE_OP))?
            .mem
            .clone();
        match w.opcode {
            send_op::RDMA_READ => self.execute_read(&w, rguest, &*lmem, &*rmem),
            send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM => {
                self.execute_write(&w, remote, rguest, &*lmem, &*rmem)
            }
            send_op::SEND | send_op::SEND_IMM => {
                self.execute_send(&w, remote, rguest, &*lmem, &*rmem)
            }
            _ => Err(Exec::Failed(syndrome::LOCAL_QP_OP)),
        }
    }

    /// The remote region a READ or WRITE names (`rguest`'s, checked for `want` access), as
    /// spans of its guest memory; a remote access error otherwise.
    fn remote_spans(
        &self,
        w: &Wr,
        rguest: GuestId,
        want: u32,
    ) -> Result<Vec<(GuestAddress, u64)>, Exec> {
        let mut spans = Vec::new();
        self.mrs
            .translate(rguest, w.rkey, w.raddr, w.len, want, &mut spans)
            .map_err(|_| Exec::Failed(syndrome::REMOTE_ACCESS))?;
        Ok(spans)
    }

    /// READ: the remote region (`rguest`'s, remote read) into the local scatter list.
    fn execute_read(
        &self,
        w: &Wr,
        rguest: GuestId,
        lmem: &dyn GuestMemory,
        rmem: &dyn GuestMemory,
    ) -> Result<(), Exec> {
        let spans = self.remote_spans(w, rguest, access::REMOTE_READ)?;
        let data = gather(rmem, &spans).map_err(|_| Exec::Failed(syndrome::REMOTE_ACCESS))?;
        scatter(lmem, &w.local, &data).map_err(|_| Exec::Failed(syndrome::LOCAL_PROT))?;
        Ok(())
    }

    /// WRITE (with immediate: consuming a receive WQE of `remote` with its CQE): the payload
    /// into the remote region (`rguest`'s, remote write).
    fn execute_write(
        &mut self,
        w: &Wr,
        remote: u32,
        rguest: GuestId,
        lmem: &dyn GuestMemory,
        rmem: &dyn GuestMemory,
    ) -> Result<(), Exec> {
        let spans = self.remote_spans(w, rguest, access::REMOTE_WRITE)?;
        let with_imm = w.opcode == send_op::RDMA_WRITE_IMM;
        let recv = if with_imm {
            Some(self.rq_peek(remote).ok_or(Exec::NotReady)?)
        } else {
            None
        };
        let data = self.payload(lmem, w)?;
        scatter(rmem, &spans, &data).map_err(|_| Exec::Failed(syndrome::REMOTE_ACCESS))?;
        if let Some((index, _)) = recv {
            self.responder_cqe(remote, cqe_op::RESP_WR_IMM, index, w.len, w.imm)?;
        }
        Ok(())
    }

    /// SEND (with or without immediate): the payload into `remote`'s next receive WQE, which
    /// it consumes with its CQE; a receive WQE too small or not writable fails both sides.
    fn execute_send(
        &mut self,
        w: &Wr,
        remote: u32,
        rguest: GuestId,
        lmem: &dyn GuestMemory,
        rmem: &dyn GuestMemory,
    ) -> Result<(), Exec> {
        let (index, segs) = self.rq_peek(remote).ok_or(Exec::NotReady)?;
        let mut spans = Vec::new();
        let mut room = 0u64;
        for s in &segs {
            let n = u64::from(s.byte_count);
            if self
                .mrs
                .translate(rguest, s.lkey, s.addr, n, access::LOCAL_WRITE, &mut spans)
                .is_err()
            {
                self.responder_error(remote, index, syndrome::LOCAL_PROT);
                return Err(Exec::Failed(syndrome::REMOTE_OP));
            }
            room += n;
        }
        if w.len > room {
            self.responder_error(remote, index, syndrome::LOCAL_LENGTH);
            return Err(Exec::Failed(syndrome::REMOTE_INVAL_REQ));
        }
        let data = self.payload(lmem, w)?;
        scatter(rmem, &spans, &data).map_err(|_| Exec::Failed(syndrome::REMOTE_OP))?;
        let op = if w.opcode == send_op::SEND_IMM {
            cqe_op::RESP_SEND_IMM
        } else {
            cqe_op::RESP_SEND
        };
        self.responder_cqe(remote, op, index, w.len, w.imm)
    }

    fn payload(&self, mem: &dyn GuestMemory, w: &Wr) -> Result<Vec<u8>, Exec> {
        match &w.inline {
            Some(d) => Ok(d.clone()),
            None => gather(mem, &w.local).map_err(|_| Exec::Failed(syndrome::LOCAL_PROT)),
        }
    }

    /// Consumes the responder's receive WQE `index` with a successful CQE. A full receive CQ
    /// makes the sender retry (as receiver-not-ready) rather than lose the completion.
    fn responder_cqe(
        &mut self,
        qpn: u32,
        op: u8,
        index: u16,
        len: u64,
        imm: u32,
    ) -> Result<(), Exec> {
        let cqe = Cqe {
            opcode: op,
            qpn,
            wqe_counter: index,
            byte_cnt: u32::try_from(len).unwrap_or(u32::MAX),
            imm,
            ..Cqe::default()
        };
        let cqn = self.qps[&qpn].recv_cq;
        if !self.push_cqe(cqn, &cqe) {
            return Err(Exec::NotReady);
        }
        let q = self.qps.get_mut(&qpn).expect("qp exists");
        q.rq_ci = q.rq_ci.wrapping_add(1);
        q.stats.cqes += 1;
        q.stats.recv_bytes += len;
        Ok(())
    }

    fn responder_error(&mut self, qpn: u32, index: u16, syn: Syndrome) {
        let cqe = Cqe {
            opcode: cqe_op::RESP_ERR,
            qpn,
            wqe_counter: index,
            syndrome: syn,
            ..Cqe::default()
        };
        let cqn = self.qps[&qpn].recv_cq;
        if self.push_cqe(cqn, &cqe) {
            let q = self.qps.get_mut(&qpn).expect("qp exists");
            q.rq_ci = q.rq_ci.wrapping_add(1);
            q.stats.cqes += 1;
            q.stats.errors += 1;
        }
        self.set_error(qpn);
    }
}

pub(super) enum Exec {
    /// The responder has no receive posted (or no CQ room): retry later.
    NotReady,
    /// The request failed with this requester syndrome.
    Failed(Syndrome),
}

fn gather(
    mem: &dyn GuestMemory,
    spans: &[(GuestAddress, u64)],
) -> Result<Vec<u8>, resex_guestmem::MemError> {
    let total: u64 = spans.iter().map(|s| s.1).sum();
    let mut out = vec![0u8; usize::try_from(total).unwrap_or(0)];
    let mut at = 0usize;
    for &(gpa, n) in spans {
        let n = usize::try_from(n).unwrap_or(0);
        mem.read(gpa, &mut out[at..at + n])?;
        at += n;
    }
    Ok(out)
}

fn scatter(
    mem: &dyn GuestMemory,
    spans: &[(GuestAddress, u64)],
    data: &[u8],
) -> Result<(), resex_guestmem::MemError> {
    let mut at = 0usize;
    for &(gpa, n) in spans {
        if at >= data.len() {
            break;
        }
        let n = usize::try_from(n).unwrap_or(0).min(data.len() - at);
        mem.write(gpa, &data[at..at + n])?;
        at += n;
    }
    Ok(())
}
