//! Transmitting: request and READ-response packets on the link model, round robin, within
//! a budget per poll; a vanished remote QP fails the request after the transport retries.

use super::{HcaState, PACKET_BUDGET, TRANSPORT_RETRY_PS};
use crate::link::{Dir, Rest};
use crate::objects::QpState;
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
                    let rest = Rest {
                        payload: if w.opcode == send_op::RDMA_READ {
                            0
                        } else {
                            w.len.saturating_sub(w.req_sent * mtu)
                        },
                        packets: w.req_pkts.saturating_sub(w.req_sent),
                    };
                    let sent = self
                        .link
                        .send_part(port, dst, payload, w.ready_ps, true, rest);
                    w.req_sent += 1;
                    q.stats.wire_bytes += payload;
                    if w.req_sent == w.req_pkts {
                        w.req_arrived_ps = Some(sent.arrived_ps);
                        if w.opcode == send_op::RDMA_READ {
                            // The responder's DMA read: the response is ready after it.
                            let ready = sent.arrived_ps + nic.read_response_ps();
                            w.req_arrived_ps = Some(ready);
                            self.resp_pending.insert((ready, qpn));
                        } else {
                            w.done_ps = Some(sent.arrived_ps + nic.dma_write_ps());
                            w.ack_ps = Some(sent.arrived_ps + base + nic.cqe_write_ps());
                        }
                    }
                }
                Dir::Response => {
                    let payload = w.len.saturating_sub(w.resp_sent * mtu).min(mtu);
                    let ready = w.req_arrived_ps.unwrap_or(now);
                    let rest = Rest {
                        payload: w.len.saturating_sub(w.resp_sent * mtu),
                        packets: w.resp_pkts.saturating_sub(w.resp_sent),
                    };
                    let sent = self.link.send_part(port, home, payload, ready, true, rest);
                    w.resp_sent += 1;
                    if w.resp_sent == w.resp_pkts {
                        let landed = sent.arrived_ps + nic.dma_write_ps();
                        w.done_ps = Some(landed);
                        w.ack_ps = Some(landed + nic.cqe_write_ps());
                    }
                }
            }
        }
    }
}
