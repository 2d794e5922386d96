//! When the work in flight next needs a poll, and what the oldest work request waits for.

use super::HcaState;
use crate::link::PortId;
use crate::objects::Qp;

impl HcaState {
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
}
