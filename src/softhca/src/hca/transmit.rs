//! Transmitting: request and READ-response packets on the link model, round robin, within
//! a budget per poll; a vanished remote QP fails the request after the transport retries.

use super::{HcaState, PACKET_BUDGET, TRANSPORT_RETRY_PS};
use crate::link::{Dir, Flow, PortId, Rest};
use crate::nic::NicModel;
use crate::objects::{Qp, QpState, Wr};
use resex_mlx5::consts::{send_op, syndrome};

impl HcaState {
    pub(super) fn activate_responses(&mut self, now: u64) {
        while let Some(&(ready, qpn)) = self.resp_pending.first() {
            if ready > now {
                break;
            }
            self.resp_pending.pop_first();
            // Responses leave the remote QP's port, on its guest's (vport's) account.
            let remote = self.qps.get(&qpn).and_then(|q| q.remote);
            let remote_port = remote.and_then(|r| self.port_of(r));
            let remote_guest = remote
                .and_then(|r| self.qps.get(&r))
                .map_or(u32::MAX, |r| r.guest.0);
            if let (Some(port), Some(q)) = (remote_port, self.qps.get_mut(&qpn)) {
                if !q.resp_active && q.state == QpState::Rts {
                    q.resp_active = true;
                    self.link.activate(port, (qpn, Dir::Response), remote_guest);
                }
            }
        }
    }

    pub(super) fn transmit(&mut self, now: u64) {
        let base = self.link.config().base_ps();
        let nic = self.link.config().nic;
        for _ in 0..PACKET_BUDGET {
            let Some((port, (qpn, dir))) = self.link.next_port(now) else {
                break;
            };
            self.transmit_one(now, base, nic, port, (qpn, dir));
        }
    }

    /// Sends the next packet of flow `(qpn, dir)`, at the head of `port`; a flow with nothing
    /// to send comes off the wire (and a request to a vanished QP fails).
    #[inline]
    fn transmit_one(&mut self, now: u64, base: u64, nic: NicModel, port: PortId, flow: Flow) {
        let (qpn, dir) = flow;
        let dst = self
            .qps
            .get(&qpn)
            .and_then(|q| q.remote)
            .and_then(|r| self.port_of(r));
        let home = self.port_of(qpn);
        let Some(q) = self.qps.get_mut(&qpn) else {
            self.link.forget(qpn);
            return;
        };
        let found = match dir {
            Dir::Request => next_request(q),
            Dir::Response => next_response(q, now),
        };
        let (Some(i), Some(dst), Some(home), true) = (found, dst, home, q.state == QpState::Rts)
        else {
            // The remote QP is gone (destroyed, its guest detached): a real HCA retries,
            // then fails the request with transport-retry-exceeded; so does this one.
            if let (Some(i), None, true) = (found, dst, q.state == QpState::Rts) {
                q.wrs[i].retries_exceeded(now);
                // A peer going away is normal (it shut down); the requester learns it from
                // the error completion, so this is not a warning.
                self.note(qpn, "remote QP gone: transport retries exceeded");
            }
            self.off_the_wire(port, flow);
            return;
        };
        let mtu = q.mtu.max(1);
        let w = &mut q.wrs[i];
        match dir {
            Dir::Request => {
                let (payload, rest) = w.request_packet(mtu);
                let sent = self
                    .link
                    .send_part(port, dst, payload, w.ready_ps, true, rest);
                q.stats.wire_bytes += payload;
                if let Some(ready) = w.request_sent(sent.arrived_ps, base, nic) {
                    self.resp_pending.insert((ready, qpn));
                }
            }
            Dir::Response => {
                let (payload, rest) = w.response_packet(mtu);
                let ready = w.req_arrived_ps.unwrap_or(now);
                let sent = self.link.send_part(port, home, payload, ready, true, rest);
                w.response_sent(sent.arrived_ps, nic);
            }
        }
    }

    /// Nothing to send on this flow now: take it off the wire.
    fn off_the_wire(&mut self, port: PortId, (qpn, dir): Flow) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        match dir {
            Dir::Request => q.req_active = false,
            Dir::Response => q.resp_active = false,
        }
        self.link.drop_head(port);
    }
}

/// The next WQE with request packets to send, from the cursor on (every WQE before the cursor
/// has sent all its request packets); moves the cursor to it.
#[inline]
fn next_request(q: &mut Qp) -> Option<usize> {
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

/// The first WQE whose request has arrived by `now` with response packets to send.
#[inline]
fn next_response(q: &Qp, now: u64) -> Option<usize> {
    q.wrs.iter().position(|w| {
        w.error.is_none() && w.req_arrived_ps.is_some_and(|t| t <= now) && w.resp_sent < w.resp_pkts
    })
}

impl Wr {
    /// Fails the request with transport-retry-exceeded, acknowledged after the retries.
    fn retries_exceeded(&mut self, now: u64) {
        self.error = Some(syndrome::TRANSPORT_RETRY_EXC);
        self.ack_ps = Some(now + TRANSPORT_RETRY_PS);
    }

    /// The next request packet's payload, and what is left of the request with it.
    #[inline]
    fn request_packet(&self, mtu: u64) -> (u64, Rest) {
        let payload = if self.opcode == send_op::RDMA_READ {
            0
        } else {
            self.len.saturating_sub(self.req_sent * mtu).min(mtu)
        };
        let rest = Rest {
            payload: if self.opcode == send_op::RDMA_READ {
                0
            } else {
                self.len.saturating_sub(self.req_sent * mtu)
            },
            packets: self.req_pkts.saturating_sub(self.req_sent),
        };
        (payload, rest)
    }

    /// A request packet arrived at `arrived_ps`. After the last: a WRITE or SEND is done and
    /// acknowledged; a READ's response is ready after the responder's DMA read, returned.
    #[inline]
    fn request_sent(&mut self, arrived_ps: u64, base: u64, nic: NicModel) -> Option<u64> {
        self.req_sent += 1;
        if self.req_sent != self.req_pkts {
            return None;
        }
        self.req_arrived_ps = Some(arrived_ps);
        if self.opcode == send_op::RDMA_READ {
            // The responder's DMA read: the response is ready after it.
            let ready = arrived_ps + nic.read_response_ps();
            self.req_arrived_ps = Some(ready);
            Some(ready)
        } else {
            self.done_ps = Some(arrived_ps + nic.dma_write_ps());
            self.ack_ps = Some(arrived_ps + base + nic.cqe_write_ps());
            None
        }
    }

    /// The next READ-response packet's payload, and what is left of the response with it.
    #[inline]
    fn response_packet(&self, mtu: u64) -> (u64, Rest) {
        let payload = self.len.saturating_sub(self.resp_sent * mtu).min(mtu);
        let rest = Rest {
            payload: self.len.saturating_sub(self.resp_sent * mtu),
            packets: self.resp_pkts.saturating_sub(self.resp_sent),
        };
        (payload, rest)
    }

    /// A response packet arrived at `arrived_ps`; after the last the data lands, then its CQE.
    #[inline]
    fn response_sent(&mut self, arrived_ps: u64, nic: NicModel) {
        self.resp_sent += 1;
        if self.resp_sent == self.resp_pkts {
            let landed = arrived_ps + nic.dma_write_ps();
            self.done_ps = Some(landed);
            self.ack_ps = Some(landed + nic.cqe_write_ps());
        }
    }
}
