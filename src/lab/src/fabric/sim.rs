//! The fabric with every host a whole lab host, one step at a time: the links serve what the
//! sending flows offer, the hosts move, each flow's bytes are accounted, senders start.

use super::{host_err, offer, push_iteration, HostsError, Node, State, Worker};
use resex_fabric::build::Built;
use resex_fabric::job::Phase;
use resex_fabric::record::Recorder;
use resex_fabric::DcqcnParams;

/// The fabric and its hosts as they run.
pub(super) struct Sim {
    pub(super) b: Built,
    pub(super) nodes: Vec<Node>,
    /// The hosts' fleet, when they are one.
    pub(super) fleet: Option<super::fleet::LabFleet>,
    pub(super) workers: Vec<Worker>,
    pub(super) rec: Recorder,
    /// The flows sending.
    pub(super) active: Vec<usize>,
    pub(super) params: DcqcnParams,
    pub(super) adaptive: bool,
    pub(super) mtu: f64,
    pub(super) dt: u64,
}

impl Sim {
    /// One step from `now`: to the next event when nothing sends, else `dt`. Returns its end.
    pub(super) fn step(&mut self, now: u64, end: u64) -> Result<u64, HostsError> {
        let t = if self.active.is_empty() {
            self.nodes.iter().map(|n| n.ev.next).min().unwrap_or(end)
        } else {
            now + self.dt
        }
        .clamp(now + self.dt, end);
        self.serve_links(now, t - now);
        self.move_hosts(t)?;
        if let Some(f) = &mut self.fleet {
            f.at(&mut self.nodes, t)?;
        }
        self.account(now, t);
        self.start_senders(t);
        Ok(t)
    }

    /// 1. The links serve the rates the sending flows offer (`h` ns); each gets its share as
    ///    the ceiling of its vport.
    fn serve_links(&mut self, now: u64, h: u64) {
        let (b, nodes, workers) = (&mut self.b, &mut self.nodes, &mut self.workers);
        for &f in &self.active {
            let fl = &b.flows[f];
            let w = &workers[f];
            b.net
                .offer_slots(&fl.slots, offer(&nodes[w.node].host, w.guest, fl.cc.rc));
        }
        b.net.serve(h);
        for &f in &self.active {
            let fl = &b.flows[f];
            let (share, p) = b.net.share_and_marking(&fl.slots);
            let w = &mut workers[f];
            w.mark = p;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let bps = ((fl.cc.rc * share * 8.0) as u64).max(1000);
            // The rate moves every T, or when a link pauses: most steps leave it as it is.
            if bps != w.ceiling {
                w.ceiling = bps;
                nodes[w.node]
                    .host
                    .set_fabric_ceiling(w.guest, Some(bps), now);
            }
        }
    }

    /// 2. The hosts move to `t`.
    fn move_hosts(&mut self, t: u64) -> Result<(), HostsError> {
        for n in &mut self.nodes {
            if n.sending > 0 {
                n.ev.next = n.ev.next.min(t);
            }
            n.moved = n.ev.next <= t;
            if n.moved {
                n.host.advance_events(&mut n.ev, t).map_err(host_err(n))?;
            }
        }
        Ok(())
    }

    /// 3. What each flow sent in the step `now..t`; flows done; iterations done.
    fn account(&mut self, now: u64, t: u64) {
        let mut k = 0;
        while k < self.active.len() {
            let f = self.active[k];
            if self.sent(f, now, t) {
                self.active.swap_remove(k);
                self.flow_done(f, t);
            } else {
                k += 1;
            }
        }
    }

    /// Flow `f`'s bytes of this step into its record and its controller; true when its
    /// transfer is done.
    fn sent(&mut self, f: usize, now: u64, t: u64) -> bool {
        let w = self.workers[f];
        let node = &self.nodes[w.node];
        let wire = node.host.hca.stats(w.qpn).map_or(w.wire, |s| s.wire_bytes);
        #[allow(clippy::cast_precision_loss)]
        let sent = wire.saturating_sub(w.wire) as f64;
        self.workers[f].wire = wire;
        let fl = &mut self.b.flows[f];
        fl.left = (fl.left - sent).max(0.0);
        self.rec.sent(&self.b.net, fl, now, sent);
        if w.mark > 0.0 {
            fl.marks += w.mark * sent / self.mtu;
            if fl.marks >= 1.0 && fl.cc.can_notify(t) {
                fl.cc.on_cnp(&self.params, t);
                fl.marks = 0.0;
            }
        }
        let prog = if self.adaptive && fl.bytes > 0.0 {
            1.0 - fl.left / fl.bytes
        } else {
            0.0
        };
        fl.cc.advance(&self.params, t, prog);
        node.host.guests[w.guest].server.done > w.done
    }

    /// Flow `f` finished its transfer at `t`: its worker idles, its job's iteration may end.
    fn flow_done(&mut self, f: usize, t: u64) {
        let w = self.workers[f];
        self.workers[f].state = State::Idle;
        self.nodes[w.node].sending -= 1;
        self.nodes[w.node].host.set_fabric_ceiling(w.guest, None, t);
        self.workers[f].ceiling = 0;
        let j = self.b.flows[f].job as usize;
        if let Phase::Comm(n) = self.b.jobs[j].phase {
            if n <= 1 {
                if let Some(next) = self.b.jobs[j].finish_iteration(t) {
                    let (b, nodes, workers) = (&mut self.b, &mut self.nodes, &mut self.workers);
                    push_iteration(b, nodes, workers, j, t, next - t, self.dt);
                }
            } else {
                self.b.jobs[j].phase = Phase::Comm(n - 1);
            }
        }
    }

    /// Workers that posted their transfer in this step start sending.
    fn start_senders(&mut self, t: u64) {
        for n in self.nodes.iter_mut().filter(|n| n.moved) {
            for &f in &n.flows {
                let w = &mut self.workers[f];
                if w.state != State::Computing || !n.host.guests[w.guest].server.sending() {
                    continue;
                }
                w.state = State::Sending;
                w.wire = n.host.hca.stats(w.qpn).map_or(0, |s| s.wire_bytes);
                let fl = &mut self.b.flows[f];
                fl.left = fl.bytes;
                fl.cc.advance(&self.params, t, 0.0);
                n.sending += 1;
                self.active.push(f);
            }
        }
    }
}
