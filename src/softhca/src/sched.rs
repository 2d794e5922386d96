//! One port's transmit scheduler, modelled on vport QoS (the rate lever).
//!
//! With no limit set on any of the port's vports (guests), flows (a QP's requests, or the
//! responses to its READs) take turns packet by packet, round robin: the link model as it
//! always was. Once a vport of the port has a limit, the port schedules vports first and their
//! flows round robin within each, in two tiers:
//!
//! - **Committed traffic first** (`tx_share`, a guaranteed rate; an entitlement): a vport's
//!   traffic within its guaranteed rate is served ahead of every vport's excess, as the
//!   committed rate of HTB or DCB ETS, earliest deadline first. Each vport with a guarantee
//!   `g` keeps a virtual clock `T` (VirtualClock, Zhang 1990, by messages): when it starts a
//!   message (a work request) in this tier at `t`, the message is charged whole, up to a
//!   quantum ([`QUANTUM_BITS`]) at a time: `T` moves to `max(T, t - L) + b / g` for its `b`
//!   wire bits, and that is the deadline every one of its packets carries. `L` ([`LAG_PS`],
//!   100 us) keeps a little of a pause: a server that computes between its replies still gets
//!   its guarantee. A vport may start a message here while `T < t + W`
//!   ([`COMMIT_WINDOW_PS`]: a bucket of `W` of its guarantee).
//!   So a guest well within its guarantee sends a short message at the link's rate ahead of a
//!   longer one that started first (64 KiB at 4 Gb/s is due in 134 us, 256 KiB in 537 us),
//!   long messages take turns a quantum at a time, a heavy sender, whose clock runs `W`
//!   ahead, comes after everyone lighter, and every vport that demands its guarantee gets it
//!   over any window of about `W`, as long as the guarantees add up to at most the link.
//!   **Near saturation, fair turns.** While two or more open messages are due within
//!   [`LATE_PS`] of now, the tier is serving just in time, and deadline order would have the
//!   message due last wait whole for the others (a 256 KiB quantum deferred to its deadline
//!   then goes out back to back, and a short reply due after it waits 260 us at 8 Gb/s): those
//!   messages then take turns packet by packet, weighted by their guarantees (start-time fair
//!   queueing on a committed virtual time of their own, charged at the guarantee for every
//!   committed packet). With at most one message that close to its deadline, deadline order
//!   stands, so a light guest's short message still passes a heavy one's.
//! - **The excess** (what no committed packet wants) is shared by weighted fair queueing
//!   between the vports with packets waiting, packet by packet (start-time fair queueing):
//!   each packet gets a virtual start tag, `max(virtual time, the vport's last finish)`, and
//!   finishes `wire bits / weight` later; the waiting packet with the smallest start tag goes
//!   next. A vport's weight is its `weight` (devlink `tx_weight`), or else, as mlx5 computes
//!   `bw_share`, its guarantee relative to the largest guarantee on the port, scaled to
//!   1..100; a vport with neither weighs 1. Two saturating vports with guarantees 3:1 (and no
//!   weights) get 75/25 of the port, committed and excess together; a vport alone gets all of
//!   it (work conserving). (Deficit round robin with a quantum of weight x MTU gets the same
//!   long-run split but serves a weight-100 vport's quantum, 100 packets, back to back.)
//! - **Ceilings** (`tx_max`): a token bucket per vport, filled at the ceiling, as deep as
//!   100 us of it (at least two packets); a vport may send while it holds tokens (a packet may
//!   take it into debt, repaid before the next), so its rate over any window longer than a
//!   few hundred microseconds is the ceiling. A ceiling holds over both tiers.
//!
//! Times are picoseconds; token amounts are in 10^-12 bits, so a ceiling of r bits/s fills
//! exactly r units per picosecond and nothing is rounded.

use crate::flow::Flow;
use resex_common::TxLimit;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Virtual-time units per wire bit at weight 1 (weights are at most 100).
const VT_PER_BIT: u128 = 100;
/// Units of token per bit.
const UNITS_PER_BIT: i128 = 1_000_000_000_000;
/// Bucket depth, ps of the ceiling.
const DEPTH_PS: i128 = 100_000_000;
/// The committed tier's window `W`, ps: a vport may start a message in the tier while its
/// virtual clock is less than this far ahead of real time (a bucket of `W` of its guaranteed
/// rate). 100 ms: a guest within its guarantee keeps its place however large its messages, a
/// heavy sender's messages come after every lighter one's that started in the last `W`, and
/// over windows of about `W` every vport gets its guarantee.
pub const COMMIT_WINDOW_PS: u64 = 100_000_000_000;
/// A message is charged to its vport's guarantee in quanta of at most this many wire bits
/// (256 KiB): a message up to this size is served whole by its deadline, a longer one a
/// quantum at a time, each with a deadline of its own, so that long messages of vports within
/// their guarantees take turns a quantum at a time.
pub const QUANTUM_BITS: u64 = 256 * 1024 * 8;
/// Two or more open messages due within this of now (ps, 100 us): the committed tier is near
/// saturation and those messages take turns (see the module's documentation). Measured on the
/// lab's random hosts against 50 and 200 us (`docs/entitlements.md`).
pub const LATE_PS: u64 = 100_000_000;

/// How far behind real time a vport's clock may be when it starts a message in the committed
/// tier, ps (100 us of its guarantee, kept over a pause). A server that waits for each reply
/// to go before computing the next pauses between its messages; charged from `max(T, t)` it
/// gets `b / (b / g + c)` of its guarantee for replies of `b` bits and `c` of computing, less
/// than it demands at 0.9 of it (16 KiB replies at 1.33 Gb/s and 12.5 us of computing:
/// 0.887), and its queue grows for ever. Kept small: every vport's deadline may slip by at
/// most about this while others spend what they kept.
const LAG_PS: u64 = 100_000_000;

#[derive(Debug, Clone, Default)]
struct Vport {
    limit: TxLimit,
    weight: u64,
    /// Virtual finish time of its last packet.
    finish: u128,
    /// Virtual start tag of its head packet (while it has flows waiting).
    start: u128,
    flows: VecDeque<Flow>,
    /// Token bucket: the amount at `tokens_at` (ps).
    tokens: i128,
    tokens_at: u64,
    /// The committed tier's virtual clock `T`, ps: the deadline of the last message charged
    /// to its guarantee (see the module's documentation).
    clock: u64,
    /// Wire bits charged to its guarantee and not sent yet (an open message).
    credit: u64,
    /// Its last committed packet was not the last of its message: the message goes on in the
    /// tier, a quantum at a time, whatever the window (it was admitted).
    continuing: bool,
    /// Finish tag of its last committed packet in the tier's fair turns (ps at its guarantee).
    turn: u128,
}

impl Vport {
    fn depth(&self, packet_bits: i128) -> i128 {
        let r = i128::from(self.limit.max_bps.unwrap_or(0));
        (r * DEPTH_PS).max(2 * packet_bits * UNITS_PER_BIT)
    }

    /// Tokens at `t`.
    fn tokens(&self, t: u64, packet_bits: i128) -> i128 {
        let r = i128::from(self.limit.max_bps.unwrap_or(0));
        let dt = i128::from(t.saturating_sub(self.tokens_at));
        (self.tokens + r * dt).min(self.depth(packet_bits))
    }

    /// The earliest time from `t` at which its ceiling lets it send.
    fn ready_at(&self, t: u64, packet_bits: i128) -> u64 {
        let Some(r) = self.limit.max_bps.filter(|&r| r > 0) else {
            return t;
        };
        let have = self.tokens(t, packet_bits);
        if have > 0 {
            return t;
        }
        let r = i128::from(r);
        let wait = (1 - have + r - 1) / r;
        t.saturating_add(u64::try_from(wait).unwrap_or(u64::MAX))
    }

    /// Its guaranteed rate, if any.
    fn guarantee(&self) -> Option<u64> {
        self.limit.share_bps.filter(|&g| g > 0)
    }

    /// Where it stands in the committed tier: `None` without a guarantee, else whether it has
    /// an open message, and its clock.
    fn tier(&self) -> Option<(bool, u64)> {
        self.guarantee()
            .map(|_| (self.credit > 0 || self.continuing, self.clock))
    }

    /// Charges the message that starts at `t` (`rest_bits` of it left, its first packet
    /// `wire_bits`) to its guarantee `g`, up to a quantum: its clock moves to the deadline,
    /// `max(T, t - LAG_PS) + bits / g`.
    fn charge(&mut self, t: u64, rest_bits: u64, wire_bits: u64, g: u64) {
        let bits = rest_bits.min(QUANTUM_BITS).max(wire_bits);
        self.clock = self
            .clock
            .max(t.saturating_sub(LAG_PS))
            .saturating_add(u64::try_from(ps_at(bits, g)).unwrap_or(u64::MAX));
        self.credit = self.credit.saturating_add(bits);
    }
}

/// Picoseconds `bits` take at `g` bit/s (a guarantee of 0 taken as 1 bit/s).
fn ps_at(bits: u64, g: u64) -> u128 {
    u128::from(bits) * 1_000_000_000_000 / u128::from(g.max(1))
}

/// One port's queue of flows waiting for the wire.
#[derive(Debug, Clone, Default)]
pub(crate) struct PortQueue {
    /// Flows in round-robin order with their vport (while no vport is limited).
    rr: VecDeque<(Flow, u32)>,
    /// Vports: every one with a limit, and (while limited) every one with flows waiting.
    vports: BTreeMap<u32, Vport>,
    /// Vports with flows waiting, by their head packet's start tag (while limited).
    active: BTreeSet<(u128, u32)>,
    /// Vports with flows waiting and an open message charged to their guarantee, by its
    /// deadline (while limited).
    open: BTreeSet<(u64, u32)>,
    /// Vports with flows waiting, a guarantee and no open message, by their clock (while
    /// limited): each may start a message while its clock is within the window.
    closed: BTreeSet<(u64, u32)>,
    /// Virtual time: the start tag of the last excess packet picked.
    vtime: u128,
    limited: bool,
    /// The committed tier's virtual time for its fair turns: the start tag of the last
    /// committed packet.
    turn_vtime: u128,
    /// The vport whose head flow was picked last (while limited), and whether as committed.
    selected: Option<(u32, bool)>,
    /// Nothing may start before this, ps: every waiting vport is out of tokens until then, or
    /// the picked flow was picked for that time.
    blocked_until: u64,
}

impl PortQueue {
    /// True when no flow waits.
    pub(crate) fn is_empty(&self) -> bool {
        if self.limited {
            self.active.is_empty()
        } else {
            self.rr.is_empty()
        }
    }

    /// The earliest a packet may start, given when the egress is free.
    pub(crate) fn earliest(&self, egress_free: u64) -> u64 {
        egress_free.max(self.blocked_until)
    }

    /// Queues a flow of `vport` (it must not be queued already).
    pub(crate) fn push(&mut self, flow: Flow, vport: u32) {
        if !self.limited {
            self.rr.push_back((flow, vport));
            return;
        }
        let vtime = self.vtime;
        let v = self.vports.entry(vport).or_insert_with(|| Vport {
            weight: 1,
            ..Vport::default()
        });
        v.flows.push_back(flow);
        if v.flows.len() == 1 {
            // Newly active: its head packet starts no earlier than now (virtual).
            v.start = v.finish.max(vtime);
            self.active.insert((v.start, vport));
            let tier = v.tier();
            self.enter(vport, tier);
        }
    }

    /// Puts a vport with flows waiting into its committed tier (see [`Vport::tier`]).
    fn enter(&mut self, id: u32, tier: Option<(bool, u64)>) {
        match tier {
            Some((true, clock)) => self.open.insert((clock, id)),
            Some((false, clock)) => self.closed.insert((clock, id)),
            None => false,
        };
    }

    /// Takes a vport out of the committed tier.
    fn leave(&mut self, id: u32, clock: u64) {
        self.open.remove(&(clock, id));
        self.closed.remove(&(clock, id));
    }

    /// Drops every queued flow of QP `qpn`.
    pub(crate) fn forget(&mut self, qpn: u32) {
        self.rr.retain(|(f, _)| f.0 != qpn);
        for v in self.vports.values_mut() {
            v.flows.retain(|f| f.0 != qpn);
        }
        let vports = &self.vports;
        let waiting = |id: &u32| vports.get(id).is_some_and(|v| !v.flows.is_empty());
        self.active.retain(|(_, id)| waiting(id));
        self.open.retain(|(_, id)| waiting(id));
        self.closed.retain(|(_, id)| waiting(id));
    }

    /// Picks the flow that sends the next packet if the port starts at `t` (ps): the head of
    /// the round robin, or (while limited) of the vport with the smallest virtual clock among
    /// those within their guarantee, else of the vport with the smallest start tag; either
    /// with tokens under its ceiling. `None` when every waiting vport is out of tokens: then
    /// nothing starts before [`PortQueue::earliest`].
    pub(crate) fn pick(&mut self, t: u64, packet_bits: i128) -> Option<Flow> {
        if !self.limited {
            return self.rr.front().map(|(f, _)| *f);
        }
        let ready = |id: &u32| {
            self.vports
                .get(id)
                .is_some_and(|v| v.ready_at(t, packet_bits) <= t)
        };
        // Committed: the earliest deadline among the open messages and the vports whose clock
        // is inside the window, with ceiling tokens.
        let horizon = t.saturating_add(COMMIT_WINDOW_PS);
        let open = self.open.iter().find(|(_, id)| ready(id));
        let closed = self
            .closed
            .iter()
            .take_while(|(clock, _)| *clock < horizon)
            .find(|(_, id)| ready(id));
        let committed = match (open, closed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(|&(_, id)| self.late_turn(t, &ready).unwrap_or(id))
        .map(|id| (id, true));
        // Else the excess: the smallest start tag among the vports with ceiling tokens.
        let best = committed.or_else(|| {
            self.active
                .iter()
                .find(|(_, id)| ready(id))
                .map(|&(start, id)| {
                    self.vtime = self.vtime.max(start);
                    (id, false)
                })
        });
        if let Some((id, tier)) = best {
            self.selected = Some((id, tier));
            // The packet starts no earlier than the time it was picked for.
            self.blocked_until = t;
            return self.vports.get(&id).and_then(|v| v.flows.front().copied());
        }
        // Every waiting vport is out of tokens.
        self.blocked_until = self
            .active
            .iter()
            .filter_map(|(_, id)| self.vports.get(id))
            .map(|v| v.ready_at(t, packet_bits))
            .min()
            .unwrap_or(t);
        self.selected = None;
        None
    }

    /// Near saturation (two or more open messages with ceiling tokens due within [`LATE_PS`]
    /// of `t`), the one of those whose turn it is: the smallest start tag in the tier's fair
    /// turns.
    fn late_turn(&self, t: u64, ready: &impl Fn(&u32) -> bool) -> Option<u32> {
        let due = t.saturating_add(LATE_PS);
        let late = self
            .open
            .iter()
            .take_while(|(d, _)| *d < due)
            .filter(|(_, id)| ready(id));
        late.clone().nth(1)?;
        late.filter_map(|&(_, id)| {
            let v = self.vports.get(&id)?;
            Some((v.turn.max(self.turn_vtime), id))
        })
        .min()
        .map(|(_, id)| id)
    }

    /// The picked flow sent a packet of `wire_bits` starting at `start` (ps), with `rest_bits`
    /// left of its message, this packet included; `more`: it has more to send.
    pub(crate) fn sent(
        &mut self,
        start: u64,
        (wire_bits, rest_bits): (u64, u64),
        more: bool,
        packet_bits: i128,
    ) {
        if !self.limited {
            if let Some(f) = self.rr.pop_front() {
                if more {
                    self.rr.push_back(f);
                }
            }
            return;
        }
        self.blocked_until = 0;
        let Some((id, committed)) = self.selected else {
            return;
        };
        let vtime = self.vtime;
        let Some(v) = self.vports.get_mut(&id) else {
            return;
        };
        self.open.remove(&(v.clock, id));
        self.closed.remove(&(v.clock, id));
        v.tokens = v.tokens(start, packet_bits) - i128::from(wire_bits) * UNITS_PER_BIT;
        v.tokens_at = start;
        self.active.remove(&(v.start, id));
        if let (Some(g), true) = (v.guarantee(), committed) {
            // Its turn in the tier's fair turns: start tag, then finish at its guarantee.
            let start_tag = v.turn.max(self.turn_vtime);
            self.turn_vtime = start_tag;
            v.turn = start_tag + ps_at(wire_bits, g);
            // A message (or its next quantum) starts: charged to the guarantee at once, so
            // each of its packets carries its deadline.
            if v.credit < wire_bits {
                v.charge(start, rest_bits, wire_bits, g);
            }
            v.credit = v.credit.saturating_sub(wire_bits);
            v.continuing = rest_bits > wire_bits;
        } else {
            v.continuing = false;
        }
        if committed {
            // Committed service earns no credit in the excess: its tag keeps up with the
            // virtual time.
            v.start = v.start.max(vtime);
        } else {
            // Held back by its ceiling, it earns no credit either (a raised ceiling would
            // send it back to back until its tag caught up): its tag starts at `vtime`.
            let start = v.start.max(vtime);
            v.finish = start + u128::from(wire_bits) * VT_PER_BIT / u128::from(v.weight.max(1));
            v.start = v.finish;
        }
        if let Some(f) = v.flows.pop_front() {
            if more {
                v.flows.push_back(f);
            }
        }
        if !v.flows.is_empty() {
            self.active.insert((v.start, id));
            let tier = v.tier();
            self.enter(id, tier);
        }
    }

    /// Takes the picked flow off the wire without sending (it had nothing ready).
    pub(crate) fn drop_head(&mut self) {
        if !self.limited {
            self.rr.pop_front();
            return;
        }
        self.blocked_until = 0;
        let Some((id, _)) = self.selected.take() else {
            return;
        };
        if let Some(v) = self.vports.get_mut(&id) {
            v.flows.pop_front();
            if v.flows.is_empty() {
                self.active.remove(&(v.start, id));
                self.open.remove(&(v.clock, id));
                self.closed.remove(&(v.clock, id));
            }
        }
    }

    /// Like [`Self::set_limit`], but a ceiling that only changes its rate keeps its bucket
    /// (the tokens it holds at `now`, at most the new depth) instead of starting full: a rate
    /// limiter driven step by step (the lab fabric's DCQCN) stays a rate limiter.
    pub(crate) fn set_rate(&mut self, vport: u32, limit: TxLimit, now: u64, packet_bits: i128) {
        if let Some(v) = self.vports.get_mut(&vport) {
            if v.limit.max_bps.is_some()
                && limit.max_bps.is_some()
                && v.limit.share_bps == limit.share_bps
                && v.limit.weight == limit.weight
            {
                let have = v.tokens(now, packet_bits);
                v.limit = limit;
                v.tokens = have.min(v.depth(packet_bits));
                v.tokens_at = now;
                self.blocked_until = 0;
                return;
            }
        }
        self.set_limit(vport, limit, now, packet_bits);
    }

    /// Sets (or with [`TxLimit::NONE`] lifts) a vport's limit, at time `now` (ps).
    pub(crate) fn set_limit(&mut self, vport: u32, limit: TxLimit, now: u64, packet_bits: i128) {
        let v = self.vports.entry(vport).or_insert_with(|| Vport {
            weight: 1,
            ..Vport::default()
        });
        if v.limit.max_bps != limit.max_bps {
            // A new bucket starts full.
            v.limit = limit;
            v.tokens = v.depth(packet_bits);
            v.tokens_at = now;
        }
        // The committed tier follows the guarantee (the clock is kept: a new rate keeps the
        // time its bucket needs to fill).
        v.limit = limit;
        let (clock, tier, waiting) = (v.clock, v.tier(), !v.flows.is_empty());
        self.leave(vport, clock);
        if self.limited && waiting {
            self.enter(vport, tier);
        }
        self.blocked_until = 0;
        self.reweigh();
        let limited = self.vports.values().any(|v| !v.limit.is_none());
        if limited && !self.limited {
            // Round robin to vports: each flow to its vport, vports in order of first flow.
            self.limited = true;
            for (f, id) in std::mem::take(&mut self.rr) {
                self.push(f, id);
            }
        } else if !limited && self.limited {
            self.limited = false;
            self.selected = None;
            self.open.clear();
            self.closed.clear();
            for (_, id) in std::mem::take(&mut self.active) {
                if let Some(v) = self.vports.get_mut(&id) {
                    for f in v.flows.drain(..) {
                        self.rr.push_back((f, id));
                    }
                }
            }
        }
        self.vports
            .retain(|_, v| !v.limit.is_none() || !v.flows.is_empty());
    }

    /// The limit in force for `vport`.
    pub(crate) fn limit(&self, vport: u32) -> TxLimit {
        self.vports.get(&vport).map_or(TxLimit::NONE, |v| v.limit)
    }

    /// Each vport's weight in the excess: its own `weight`, or mlx5's `bw_share` (its guarantee
    /// relative to the largest, scaled to 1..100), or 1.
    fn reweigh(&mut self) {
        let max = self
            .vports
            .values()
            .filter_map(|v| v.limit.share_bps)
            .max()
            .unwrap_or(0);
        for v in self.vports.values_mut() {
            v.weight = match (v.limit.weight, v.limit.share_bps) {
                (Some(w), _) => u64::from(w).clamp(1, 100),
                (None, Some(s)) if max > 0 => {
                    let w = (u128::from(s) * 100 + u128::from(max) / 2) / u128::from(max);
                    u64::try_from(w).unwrap_or(100).clamp(1, 100)
                }
                _ => 1,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Dir;

    /// A packet of 1 KiB with 30 header bytes, bits.
    const WIRE: u64 = 1054 * 8;
    const US: u64 = 1_000_000;

    fn guarantee(bps: u64) -> TxLimit {
        TxLimit {
            share_bps: Some(bps),
            max_bps: None,
            weight: None,
        }
    }

    /// Sends from `t` at 8 Gb/s, packet by packet, until `until` has sent its last packet;
    /// `left` is each flow's bytes left (by qpn). Returns the qpns in the order they sent.
    fn run(q: &mut PortQueue, mut t: u64, left: &mut [(u32, u64)], until: u32) -> Vec<u32> {
        let bits = i128::from(WIRE);
        let mut order = Vec::new();
        while let Some((qpn, _)) = q.pick(t, bits) {
            let m = left.iter_mut().find(|m| m.0 == qpn).unwrap();
            let rest = m.1.div_ceil(1024) * WIRE;
            m.1 = m.1.saturating_sub(1024);
            q.sent(t, (WIRE, rest), m.1 > 0, bits);
            order.push(qpn);
            t += WIRE * 1000 / 8; // ps at 8 Gb/s
            if qpn == until && m.1 == 0 {
                break;
            }
        }
        order
    }

    /// Vport 1 (4 Gb/s) started a 256 KiB quantum at 0, due at 540 us, and was kept back (its
    /// first packet only); at 500 us vport 2 (guaranteed `reply_bps`) starts a 16 KiB reply.
    /// Sends until the reply is done: the qpns in sending order, and the quantum's bytes left.
    fn deferred_quantum_and_a_reply(reply_bps: u64) -> (Vec<u32>, u64) {
        let mut q = PortQueue::default();
        q.set_limit(1, guarantee(4_000_000_000), 0, i128::from(WIRE));
        q.set_limit(2, guarantee(reply_bps), 0, i128::from(WIRE));
        q.push((10, Dir::Request), 1);
        let mut left = [(10, 256 << 10), (20, 16 << 10)];
        assert_eq!(q.pick(0, i128::from(WIRE)), Some((10, Dir::Request)));
        q.sent(0, (WIRE, 256 * WIRE), true, i128::from(WIRE));
        left[0].1 -= 1024;
        q.push((20, Dir::Request), 2);
        let order = run(&mut q, 500 * US, &mut left, 20);
        (order, left[0].1)
    }

    #[test]
    fn messages_due_together_take_turns_instead_of_the_later_one_waiting_whole() {
        // A 1 Gb/s reply (131 us at its guarantee) from a vport idle until 500 us is due at
        // 531 us (its clock starts up to 100 us back), the quantum at 540 us: both within
        // 100 us, so they take turns by their guarantees (4:1) and the reply leaves well
        // before the quantum is done. Deadline order alone would send the reply first, whole
        // (none of the quantum's packets before its end).
        let (order, left) = deferred_quantum_and_a_reply(1_000_000_000);
        let before = order.iter().filter(|&&f| f == 10).count();
        // About 4 of the quantum's packets for each of the reply's 15 after its first.
        assert!(
            (50..=70).contains(&before),
            "{before} of the quantum's packets first"
        );
        assert!(left > 100 << 10, "the quantum is not done: {left} left");
    }

    #[test]
    fn one_message_due_soon_keeps_deadline_order() {
        // A 100 Mb/s reply is due far later (1.3 ms): only the quantum is due soon, deadline
        // order stands and it goes first, whole.
        let (order, _) = deferred_quantum_and_a_reply(100_000_000);
        // The reply's first packet (its vport was idle) may go at once; then the quantum.
        let first_reply = order.iter().position(|&f| f == 20).unwrap();
        let quantum_after = order[first_reply + 1..]
            .iter()
            .take(255)
            .filter(|&&f| f == 10)
            .count();
        assert_eq!(quantum_after, 255, "{order:?}");
    }
}
