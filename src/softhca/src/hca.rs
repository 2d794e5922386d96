//! The software HCA: fetches the WQEs guests post (by polling their SQ doorbell records),
//! times their packets on the link model, applies their effect between guests' registered
//! memory, and writes mlx5 CQEs back. Errors become error CQEs and put the QP in error with
//! flushes; nothing a guest writes can make it panic or loop without bound.

use crate::link::{Dir, Link, LinkConfig, PortId};
use crate::mr::{GuestId, MrFault, MrTable};
use crate::objects::{Cq, Guest, Qp, QpState, QpStats, Wr};
use resex_common::LogLimiter;
use resex_guestmem::{GuestAddress, GuestMemory};
use resex_mlx5::consts::{cqe_op, send_op, syndrome};
use resex_mlx5::cqe::Cqe;
use resex_mlx5::dbrec::{read_cq_ci, read_sq_pi};
use resex_mlx5::wqe::{parse_send_wqe, CtrlSeg, DataSeg, Payload};
use resex_mlx5::{index16, packets, DS_BYTES, SEND_WQE_BB};
use resex_proto::hca::access;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{fence, Ordering};

/// An lkey that ends a receive WQE's scatter list (rdma-core's `MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;
/// Receiver-not-ready retries before `RNR_RETRY_EXC` (about 7 x 1 ms, like `rnr_retry = 7`).
pub const RNR_RETRIES: u32 = 7;
/// Delay between RNR retries, ps.
pub const RNR_DELAY_PS: u64 = 1_000_000_000;
/// How long a request to a vanished remote QP is retried before it fails (7 retries of 1 ms).
pub const TRANSPORT_RETRY_PS: u64 = 7_000_000_000;
/// WQEs fetched per QP per poll (bounded work per tick).
pub const FETCH_BUDGET: usize = 256;
/// Packets scheduled per poll across the link (bounded work per tick).
pub const PACKET_BUDGET: usize = 1 << 16;

/// The HCA's state (behind the `SoftHca` lock).
#[derive(Debug)]
pub struct HcaState {
    pub(crate) link: Link,
    pub(crate) guests: BTreeMap<GuestId, Guest>,
    pub(crate) mrs: MrTable,
    pub(crate) cqs: BTreeMap<u32, Cq>,
    pub(crate) qps: BTreeMap<u32, Qp>,
    pub(crate) next_guest: u32,
    pub(crate) next_cqn: u32,
    pub(crate) next_qpn: u32,
    /// READ responses to put on the wire: (ready ps, qpn).
    resp_pending: BTreeSet<(u64, u32)>,
    limiter: LogLimiter,
    /// Work in flight (a caller may sleep when there is none).
    pub(crate) busy: bool,
    /// Reused by every poll.
    scratch_qpns: Vec<u32>,
    /// Doorbell hints (the lab): fetch only QPs whose doorbell was reported, and complete only
    /// QPs with work in flight. A real device learns of doorbells by MMIO; we cannot trap the
    /// guest's doorbell record, so by default every QP's record is polled.
    pub(crate) hints: bool,
    /// QPs whose doorbell was reported since the last poll (hint mode).
    pub(crate) dirty: BTreeSet<u32>,
    /// QPs with work requests in flight (hint mode).
    active: BTreeSet<u32>,
    /// QPs that retired work requests in the polls since the caller last took them (hint mode).
    pub(crate) retired: Vec<u32>,
}

/// How a requester's WQE failed, for its error CQE.
type Syndrome = u8;

fn fault_syndrome_local(f: MrFault) -> Syndrome {
    match f {
        MrFault::BadKey | MrFault::NoAccess => syndrome::LOCAL_PROT,
        MrFault::OutOfBounds => syndrome::LOCAL_PROT,
    }
}

impl HcaState {
    pub(crate) fn new(link: LinkConfig, ports: u16) -> Self {
        Self {
            link: Link::new(link, ports),
            guests: BTreeMap::new(),
            mrs: MrTable::default(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            next_guest: 0,
            next_cqn: 0,
            next_qpn: 0xff,
            resp_pending: BTreeSet::new(),
            limiter: LogLimiter::default(),
            busy: false,
            scratch_qpns: Vec::new(),
            hints: false,
            dirty: BTreeSet::new(),
            active: BTreeSet::new(),
            retired: Vec::new(),
        }
    }

    /// Stats of one QP.
    pub fn stats(&self, qpn: u32) -> Option<QpStats> {
        self.qps.get(&qpn).map(|q| q.stats)
    }

    fn warn(&mut self, qpn: u32, what: &str) {
        if let Some(n) = self.limiter.hit() {
            tracing::warn!(qpn, occurrences = n, "softhca: {what}");
        }
    }

    /// Like [`Self::warn`] (rate-limited), for what is normal but worth a line at info level.
    fn note(&mut self, qpn: u32, what: &str) {
        if let Some(n) = self.limiter.hit() {
            tracing::info!(qpn, occurrences = n, "softhca: {what}");
        }
    }

    /// One step: fetch, transmit, complete, all up to `now_ns`.
    pub fn poll(&mut self, now_ns: u64) {
        let now = now_ns.saturating_mul(1000);
        // Every QP, in QP-number order; with doorbell hints only those rung since the last poll
        // (fetch) and those with work in flight (complete): a QP outside both would fetch
        // nothing and complete nothing, so the result is the same.
        let mut qpns = std::mem::take(&mut self.scratch_qpns);
        qpns.clear();
        if self.hints {
            qpns.extend(std::mem::take(&mut self.dirty));
        } else {
            qpns.extend(self.qps.keys().copied());
        }
        for &qpn in &qpns {
            self.fetch(qpn, now);
            if self.hints && self.qps.get(&qpn).is_some_and(|q| !q.wrs.is_empty()) {
                self.active.insert(qpn);
            }
        }
        self.activate_responses(now);
        self.transmit(now);
        if self.hints {
            qpns.clear();
            qpns.extend(self.active.iter().copied());
        }
        for &qpn in &qpns {
            let before = if self.hints {
                self.qps.get(&qpn).map_or(0, |q| q.wrs.len())
            } else {
                0
            };
            self.complete(qpn, now);
            if self.hints {
                let after = self.qps.get(&qpn).map_or(0, |q| q.wrs.len());
                if after < before {
                    self.retired.push(qpn);
                }
                if after == 0 {
                    self.active.remove(&qpn);
                }
            }
        }
        self.scratch_qpns = qpns;
        self.busy = if self.hints {
            !self.active.is_empty()
        } else {
            self.qps.values().any(|q| !q.wrs.is_empty())
        };
    }

    // ---------------------------------------------------------------- fetching

    fn fetch(&mut self, qpn: u32, now: u64) {
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
        for _ in 0..FETCH_BUDGET {
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
            match self.fetch_one(qpn, &*g.mem, pending, now) {
                Ok(wr) => {
                    let q = self.qps.get_mut(&qpn).expect("qp exists");
                    q.sq_ci = q.sq_ci.wrapping_add(wr.bbs);
                    let has_packets = wr.req_pkts > 0;
                    q.wrs.push_back(wr);
                    if q.state == QpState::Rts && has_packets && !q.req_active {
                        q.req_active = true;
                        let port = self.guests.get(&q.guest).map_or(PortId(0), |g| g.port);
                        self.link.activate(port, (qpn, Dir::Request));
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
    ) -> Result<Wr, (Syndrome, u32)> {
        let q = &self.qps[&qpn];
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
        let wqe = parse_send_wqe(&bytes).map_err(|_| (syndrome::LOCAL_QP_OP, bbs))?;
        let opcode = wqe.ctrl.opcode;
        let is_read = opcode == send_op::RDMA_READ;
        match opcode {
            send_op::RDMA_WRITE
            | send_op::RDMA_WRITE_IMM
            | send_op::SEND
            | send_op::SEND_IMM
            | send_op::RDMA_READ
            | send_op::NOP => {}
            // Atomics and the rest: not implemented by softhca; refused clearly.
            _ => return Err((syndrome::LOCAL_QP_OP, bbs)),
        }
        let mut local = Vec::new();
        let mut inline = None;
        match wqe.payload {
            Payload::Inline(d) => {
                if is_read {
                    return Err((syndrome::LOCAL_QP_OP, bbs));
                }
                inline = Some(d.to_vec());
            }
            Payload::Gather { .. } => {
                let need = if is_read { access::LOCAL_WRITE } else { 0 };
                for seg in wqe.payload.data_segs() {
                    self.mrs
                        .translate(
                            q.guest,
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
        let len = wqe.payload.len();
        if len > 1 << 31 {
            return Err((syndrome::LOCAL_LENGTH, bbs));
        }
        let (req_pkts, resp_pkts) = match opcode {
            send_op::NOP => (0, 0),
            send_op::RDMA_READ => (1, packets(len, q.mtu)),
            _ => (packets(len, q.mtu), 0),
        };
        let raddr = wqe.raddr.unwrap_or_default();
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
            ready_ps: now,
            req_arrived_ps: None,
            done_ps: (opcode == send_op::NOP).then_some(now),
            ack_ps: (opcode == send_op::NOP).then_some(now),
            executed: opcode == send_op::NOP,
            error: None,
            rnr_tries: 0,
        })
    }

    // ------------------------------------------------------------ transmitting

    fn port_of(&self, qpn: u32) -> Option<PortId> {
        let q = self.qps.get(&qpn)?;
        self.guests.get(&q.guest).map(|g| g.port)
    }

    fn activate_responses(&mut self, now: u64) {
        while let Some(&(ready, qpn)) = self.resp_pending.first() {
            if ready > now {
                break;
            }
            self.resp_pending.pop_first();
            let remote_port = self
                .qps
                .get(&qpn)
                .and_then(|q| q.remote)
                .and_then(|r| self.port_of(r));
            if let (Some(port), Some(q)) = (remote_port, self.qps.get_mut(&qpn)) {
                if !q.resp_active && q.state == QpState::Rts {
                    q.resp_active = true;
                    self.link.activate(port, (qpn, Dir::Response));
                }
            }
        }
    }

    fn transmit(&mut self, now: u64) {
        let base = self.link.config().base_ps();
        for _ in 0..PACKET_BUDGET {
            let Some((port, (qpn, dir))) = self.link.next_port(now) else {
                break;
            };
            let dst = self
                .qps
                .get(&qpn)
                .and_then(|q| q.remote)
                .and_then(|r| self.port_of(r));
            let home = self.port_of(qpn);
            let Some(q) = self.qps.get_mut(&qpn) else {
                self.link.forget(qpn);
                continue;
            };
            let found = match dir {
                // Every WQE before the cursor has sent all its request packets.
                Dir::Request => {
                    let from = q.req_next.min(q.wrs.len());
                    let i = q
                        .wrs
                        .iter()
                        .skip(from)
                        .position(|w| w.error.is_none() && w.req_sent < w.req_pkts)
                        .map(|i| i + from);
                    q.req_next = i.unwrap_or(q.wrs.len());
                    i
                }
                Dir::Response => q.wrs.iter().position(|w| {
                    w.error.is_none()
                        && w.req_arrived_ps.is_some_and(|t| t <= now)
                        && w.resp_sent < w.resp_pkts
                }),
            };
            let (Some(i), Some(dst), Some(home), true) =
                (found, dst, home, q.state == QpState::Rts)
            else {
                // The remote QP is gone (destroyed, its guest detached): a real HCA retries,
                // then fails the request with transport-retry-exceeded; so does this one.
                if let (Some(i), None, true) = (found, dst, q.state == QpState::Rts) {
                    let w = &mut q.wrs[i];
                    w.error = Some(syndrome::TRANSPORT_RETRY_EXC);
                    w.ack_ps = Some(now + TRANSPORT_RETRY_PS);
                    // A peer going away is normal (it shut down); the requester learns it from
                    // the error completion, so this is not a warning.
                    self.note(qpn, "remote QP gone: transport retries exceeded");
                }
                let Some(q) = self.qps.get_mut(&qpn) else {
                    continue;
                };
                // Nothing to send on this flow now: take it off the wire.
                match dir {
                    Dir::Request => q.req_active = false,
                    Dir::Response => q.resp_active = false,
                }
                self.link.drop_head(port);
                continue;
            };
            let mtu = q.mtu.max(1);
            let w = &mut q.wrs[i];
            match dir {
                Dir::Request => {
                    let payload = if w.opcode == send_op::RDMA_READ {
                        0
                    } else {
                        w.len.saturating_sub(w.req_sent * mtu).min(mtu)
                    };
                    let sent = self.link.send(port, dst, payload, w.ready_ps, true);
                    w.req_sent += 1;
                    if w.req_sent == w.req_pkts {
                        w.req_arrived_ps = Some(sent.arrived_ps);
                        if w.opcode == send_op::RDMA_READ {
                            self.resp_pending.insert((sent.arrived_ps, qpn));
                        } else {
                            w.done_ps = Some(sent.arrived_ps);
                            w.ack_ps = Some(sent.arrived_ps + base);
                        }
                    }
                }
                Dir::Response => {
                    let payload = w.len.saturating_sub(w.resp_sent * mtu).min(mtu);
                    let ready = w.req_arrived_ps.unwrap_or(now);
                    let sent = self.link.send(port, home, payload, ready, true);
                    w.resp_sent += 1;
                    if w.resp_sent == w.resp_pkts {
                        w.done_ps = Some(sent.arrived_ps);
                        w.ack_ps = Some(sent.arrived_ps);
                    }
                }
            }
        }
    }

    // -------------------------------------------------------------- completing

    fn complete(&mut self, qpn: u32, now: u64) {
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

    /// A lower bound on when the work in flight next needs the HCA (ns): the earliest
    /// completion, execution or READ response any fetched work request can reach. `None`: no
    /// work in flight. New doorbells are not included: the caller polls for those anyway.
    pub fn next_due_ns(&self) -> Option<u64> {
        let mut due = self.resp_pending.first().map(|&(t, _)| t);
        let mut at = |t: u64| due = Some(due.map_or(t, |d| d.min(t)));
        let hinted;
        let qps: Box<dyn Iterator<Item = &Qp>> = if self.hints {
            hinted = self.active.iter().filter_map(|n| self.qps.get(n));
            Box::new(hinted)
        } else {
            Box::new(self.qps.values())
        };
        for q in qps {
            if let Some(w) = q.wrs.front() {
                match (w.executed, w.done_ps, w.ack_ps) {
                    (false, Some(t), _) | (true, _, Some(t)) => at(t),
                    _ => {}
                }
            }
            // A request still on the wire cannot finish before its remaining packets have
            // left its port back to back.
            if let Some(w) = q
                .wrs
                .iter()
                .skip(q.req_next.min(q.wrs.len()))
                .find(|w| w.req_sent < w.req_pkts)
            {
                let port = self.guests.get(&q.guest).map_or(PortId(0), |g| g.port);
                let left = w.req_pkts - w.req_sent;
                let pkt = self.link.config().packet_ps(q.mtu);
                at(self
                    .link
                    .egress_free(port)
                    .saturating_add(left.saturating_mul(pkt)));
            }
            // Likewise READ responses on the wire, from the remote QP's port.
            if let Some(w) = q
                .wrs
                .iter()
                .find(|w| w.req_arrived_ps.is_some() && w.resp_sent < w.resp_pkts)
            {
                let port = q.remote.and_then(|r| self.port_of(r)).unwrap_or(PortId(0));
                let left = w.resp_pkts - w.resp_sent;
                let pkt = self.link.config().packet_ps(q.mtu);
                let from = self
                    .link
                    .egress_free(port)
                    .max(w.req_arrived_ps.unwrap_or(0));
                at(from.saturating_add(left.saturating_mul(pkt)));
            }
        }
        due.map(|ps| ps / 1000)
    }

    /// The QP whose oldest outstanding work request has waited longest, and where it is:
    /// `(qpn, waited ns, what it waits for)`. For diagnosing stalls; O(QPs).
    pub fn oldest_work(&self, now_ns: u64) -> Option<(u32, u64, String)> {
        let now = now_ns.saturating_mul(1000);
        let (qpn, w) = self
            .qps
            .iter()
            .filter_map(|(n, q)| q.wrs.front().map(|w| (*n, w)))
            .min_by_key(|(_, w)| w.ready_ps)?;
        let q = &self.qps[&qpn];
        let at = |t: Option<u64>| {
            t.map_or("-".to_owned(), |t| {
                format!("{:+}us", (i128::from(t) - i128::from(now)) / 1_000_000)
            })
        };
        let cq_full = self.cqs.get(&q.send_cq).map_or(0, |c| c.full_stalls);
        let what = format!(
            "state {:?}, {} WRs queued, front: {}/{} packets sent, done {}, ack {}, executed {}, \
             error {:?}, rnr tries {}; request flow on the wire {}; CQ-full stalls {cq_full}",
            q.state,
            q.wrs.len(),
            w.req_sent,
            w.req_pkts,
            at(w.done_ps),
            at(w.ack_ps),
            w.executed,
            w.error,
            w.rnr_tries,
            q.req_active,
        );
        Some((qpn, now.saturating_sub(w.ready_ps) / 1000, what))
    }

    fn front_mut(&mut self, qpn: u32) -> Option<&mut Wr> {
        self.qps.get_mut(&qpn).and_then(|q| q.wrs.front_mut())
    }

    /// Writes a CQE if the CQ has room (per the guest's consumer index). False: try later.
    fn push_cqe(&mut self, cqn: u32, cqe: &Cqe) -> bool {
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
    fn flush(&mut self, qpn: u32) {
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

    /// The next posted receive WQE of a QP: its index and its scatter list.
    fn rq_peek(&self, qpn: u32) -> Option<(u16, Vec<DataSeg>)> {
        let q = self.qps.get(&qpn)?;
        let rq = q.rq.as_ref()?;
        let g = self.guests.get(&q.guest)?;
        let head = g.mem.read_be32(q.dbrec).ok()? & 0xffff;
        fence(Ordering::Acquire);
        let avail = (head as u16).wrapping_sub(index16(q.rq_ci));
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

    // --------------------------------------------------------------- executing

    fn execute(&mut self, qpn: u32) -> Result<(), Exec> {
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
            send_op::RDMA_READ => {
                let mut spans = Vec::new();
                self.mrs
                    .translate(
                        rguest,
                        w.rkey,
                        w.raddr,
                        w.len,
                        access::REMOTE_READ,
                        &mut spans,
                    )
                    .map_err(|_| Exec::Failed(syndrome::REMOTE_ACCESS))?;
                let data =
                    gather(&*rmem, &spans).map_err(|_| Exec::Failed(syndrome::REMOTE_ACCESS))?;
                scatter(&*lmem, &w.local, &data).map_err(|_| Exec::Failed(syndrome::LOCAL_PROT))?;
                Ok(())
            }
            send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM => {
                let mut spans = Vec::new();
                self.mrs
                    .translate(
                        rguest,
                        w.rkey,
                        w.raddr,
                        w.len,
                        access::REMOTE_WRITE,
                        &mut spans,
                    )
                    .map_err(|_| Exec::Failed(syndrome::REMOTE_ACCESS))?;
                let with_imm = w.opcode == send_op::RDMA_WRITE_IMM;
                let recv = if with_imm {
                    Some(self.rq_peek(remote).ok_or(Exec::NotReady)?)
                } else {
                    None
                };
                let data = self.payload(&*lmem, &w)?;
                scatter(&*rmem, &spans, &data)
                    .map_err(|_| Exec::Failed(syndrome::REMOTE_ACCESS))?;
                if let Some((index, _)) = recv {
                    self.responder_cqe(remote, cqe_op::RESP_WR_IMM, index, w.len, w.imm)?;
                }
                Ok(())
            }
            send_op::SEND | send_op::SEND_IMM => {
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
                let data = self.payload(&*lmem, &w)?;
                scatter(&*rmem, &spans, &data).map_err(|_| Exec::Failed(syndrome::REMOTE_OP))?;
                let op = if w.opcode == send_op::SEND_IMM {
                    cqe_op::RESP_SEND_IMM
                } else {
                    cqe_op::RESP_SEND
                };
                self.responder_cqe(remote, op, index, w.len, w.imm)
            }
            _ => Err(Exec::Failed(syndrome::LOCAL_QP_OP)),
        }
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

enum Exec {
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
