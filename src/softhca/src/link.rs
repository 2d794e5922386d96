//! The link model: ports with a bandwidth in each direction, MTU-sized packets with a header
//! overhead, store-and-forward through the receiving port's ingress, a base latency, and per
//! port a transmit scheduler (`sched.rs`): round robin between the flows (QPs) with
//! pending packets, or, once a vport (guest) of the port has a transmit limit, weighted fair
//! shares and ceilings per vport as mlx5 vport QoS has them.
//!
//! Times are picoseconds (exact for the bandwidths used here: 8 Gb/s is 1 000 ps per byte,
//! 100 Gb/s 80).

pub use crate::flow::{Dir, Flow};
use crate::nic::NicModel;
use crate::sched::PortQueue;
use crate::uplink::UplinkTap;
use resex_common::TxLimit;

/// Link parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Data rate of each port, each direction, bits per second.
    pub bits_per_sec: u64,
    /// Path MTU in bytes (payload per packet).
    pub mtu: u32,
    /// Bytes of header per packet (LRH + BTH + RETH/ICRC/VCRC ... on the wire).
    pub header_bytes: u32,
    /// One-way latency added to every packet (switch + propagation), ns.
    pub base_latency_ns: u64,
    /// The NIC's own latencies (doorbell, DMA, CQE); zero: the wire only.
    pub nic: NicModel,
}

/// The default link mirrors the ResEx testbed.
impl Default for LinkConfig {
    fn default() -> Self {
        Self::resex_testbed()
    }
}

impl LinkConfig {
    /// A preset by name: `testbed` ([`Self::resex_testbed`]) or `100g` ([`Self::hundred_gig`]).
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "testbed" => Some(Self::resex_testbed()),
            "100g" => Some(Self::hundred_gig()),
            _ => None,
        }
    }

    /// A preset with its data rate (Gb/s) and base latency (us) overridden where given, as a
    /// scenario's `[link]` asks; `None` for an unknown preset.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn preset_with(
        name: &str,
        gbps: Option<f64>,
        base_latency_us: Option<f64>,
    ) -> Option<Self> {
        let mut l = Self::preset(name)?;
        if let Some(g) = gbps {
            l.bits_per_sec = (g * 1e9) as u64;
        }
        if let Some(us) = base_latency_us {
            l.base_latency_ns = (us * 1000.0) as u64;
        }
        Some(l)
    }

    /// The ResEx paper's testbed: 8 Gb/s data rate (10 Gb/s SDR 4x after 8b/10b), 1 KiB MTU.
    pub fn resex_testbed() -> Self {
        Self {
            bits_per_sec: 8_000_000_000,
            mtu: 1024,
            header_bytes: 30,
            base_latency_ns: 1_000,
            nic: NicModel::default(),
        }
    }

    /// The status-byte paper's link: 100 Gb/s (ConnectX-5 EDR), 4 KiB MTU.
    pub fn hundred_gig() -> Self {
        Self {
            bits_per_sec: 100_000_000_000,
            mtu: 4096,
            header_bytes: 30,
            base_latency_ns: 600,
            nic: NicModel::default(),
        }
    }

    /// Wire time of one packet carrying `payload` bytes, ps.
    pub fn packet_ps(&self, payload: u64) -> u64 {
        let bits = (payload + u64::from(self.header_bytes)) as u128 * 8;
        let ps = bits * 1_000_000_000_000 / u128::from(self.bits_per_sec.max(1));
        u64::try_from(ps).unwrap_or(u64::MAX)
    }

    /// The base latency in ps.
    pub fn base_ps(&self) -> u64 {
        self.base_latency_ns.saturating_mul(1000)
    }
}

/// A port of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortId(pub u16);

#[derive(Debug, Default, Clone)]
struct Port {
    egress_free: u64,
    ingress_free: u64,
    q: PortQueue,
}

/// Per-port schedules.
#[derive(Debug, Clone)]
pub struct Link {
    cfg: LinkConfig,
    ports: Vec<Port>,
    /// A link shared with other HCAs that one port's packets cross ([`crate::uplink`]).
    uplink: Option<(UplinkTap, PortId)>,
}

/// What is left of a message when one of its packets is sent, that packet included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rest {
    /// Payload bytes.
    pub payload: u64,
    /// Packets.
    pub packets: u64,
}

/// A packet's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// When its last bit left the sender's port.
    pub left_ps: u64,
    /// When it arrived at the receiver (after ingress and the base latency).
    pub arrived_ps: u64,
}

impl Link {
    /// A link of `ports` ports.
    pub fn new(cfg: LinkConfig, ports: u16) -> Self {
        Self {
            cfg,
            ports: vec![Port::default(); usize::from(ports.max(1))],
            uplink: None,
        }
    }

    /// Sends `port`'s packets across a shared uplink from now on (`None`: no longer).
    pub fn set_uplink(&mut self, uplink: Option<(UplinkTap, PortId)>) {
        self.uplink = uplink;
    }

    /// Parameters.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Number of ports.
    pub fn ports(&self) -> u16 {
        u16::try_from(self.ports.len()).unwrap_or(u16::MAX)
    }

    /// When `port`'s next packet can start at the earliest (ps): its egress free and, when
    /// its transmit limits hold every waiting vport back, their tokens.
    pub fn egress_free(&self, port: PortId) -> u64 {
        self.ports
            .get(usize::from(port.0))
            .map_or(0, |p| p.q.earliest(p.egress_free))
    }

    /// The wire size of a full packet, bits (the scheduler's unit).
    fn packet_bits(&self) -> i128 {
        i128::from(self.cfg.mtu + self.cfg.header_bytes) * 8
    }

    /// Queues a flow of `vport` (the guest whose port sends it) on `port` (it must not be
    /// queued already).
    pub fn activate(&mut self, port: PortId, flow: Flow, vport: u32) {
        if let Some(p) = self.ports.get_mut(usize::from(port.0)) {
            p.q.push(flow, vport);
        }
    }

    /// Drops every queued flow of QP `qpn` (QP destroyed or in error).
    pub fn forget(&mut self, qpn: u32) {
        for p in &mut self.ports {
            p.q.forget(qpn);
        }
    }

    /// Sets (or with [`TxLimit::NONE`] lifts) the transmit limit of `vport` on `port`, at
    /// `now_ps`.
    pub fn set_limit(&mut self, port: PortId, vport: u32, limit: TxLimit, now_ps: u64) {
        let bits = self.packet_bits();
        if let Some(p) = self.ports.get_mut(usize::from(port.0)) {
            p.q.set_limit(vport, limit, now_ps, bits);
        }
    }

    /// [`Self::set_limit`] for a ceiling whose rate moves step by step: its bucket is kept.
    pub fn set_rate(&mut self, port: PortId, vport: u32, limit: TxLimit, now_ps: u64) {
        let bits = self.packet_bits();
        if let Some(p) = self.ports.get_mut(usize::from(port.0)) {
            p.q.set_rate(vport, limit, now_ps, bits);
        }
    }

    /// The transmit limit of `vport` on `port`.
    pub fn limit(&self, port: PortId, vport: u32) -> TxLimit {
        self.ports
            .get(usize::from(port.0))
            .map_or(TxLimit::NONE, |p| p.q.limit(vport))
    }

    /// The port whose next packet starts earliest, if it starts at or before `now_ps`, with the
    /// flow its scheduler picks to send it.
    pub fn next_port(&mut self, now_ps: u64) -> Option<(PortId, Flow)> {
        let bits = self.packet_bits();
        loop {
            let (i, start) = self
                .ports
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.q.is_empty())
                .map(|(i, p)| (i, p.q.earliest(p.egress_free)))
                .filter(|&(_, t)| t <= now_ps)
                .min_by_key(|&(i, t)| (t, i))?;
            let port = PortId(u16::try_from(i).ok()?);
            if let Some(flow) = self.ports[i].q.pick(start, bits) {
                return Some((port, flow));
            }
            // Every vport waiting there is out of tokens: the port's earliest moved on.
        }
    }

    /// Takes the picked flow of `port` off the wire without sending (it has nothing ready).
    pub fn drop_head(&mut self, port: PortId) {
        if let Some(p) = self.ports.get_mut(usize::from(port.0)) {
            p.q.drop_head();
        }
    }

    /// Sends one packet of `payload` bytes of the head flow of `from` to port `to`, ready no
    /// earlier than `ready_ps`; rotates the round robin (`more`: the flow has more packets).
    /// The packet is a message of its own; [`Self::send_part`] sends one of a longer message.
    pub fn send(
        &mut self,
        from: PortId,
        to: PortId,
        payload: u64,
        ready_ps: u64,
        more: bool,
    ) -> Sent {
        self.send_part(
            from,
            to,
            payload,
            ready_ps,
            more,
            Rest {
                payload,
                packets: 1,
            },
        )
    }

    /// [`Self::send`] for one packet of a message (a work request) of which `rest` is left,
    /// this packet included: the committed tier charges a vport's guarantee for a whole
    /// message at once.
    pub fn send_part(
        &mut self,
        from: PortId,
        to: PortId,
        payload: u64,
        ready_ps: u64,
        more: bool,
        rest: Rest,
    ) -> Sent {
        let tx = self.cfg.packet_ps(payload);
        let base = self.cfg.base_ps();
        let f = usize::from(from.0).min(self.ports.len() - 1);
        let t = usize::from(to.0).min(self.ports.len() - 1);
        let start = self.ports[f]
            .q
            .earliest(self.ports[f].egress_free)
            .max(ready_ps);
        let header = u64::from(self.cfg.header_bytes);
        let wire_bits = (payload + header) * 8;
        let left = match &self.uplink {
            // Across the shared uplink: the port waits for it (lossless, as under PFC).
            Some((tap, port)) if *port == from => {
                tap.carry(start, wire_bits).max(start.saturating_add(tx))
            }
            _ => start.saturating_add(tx),
        };
        self.ports[f].egress_free = left;
        let rest_bits = (rest.payload + rest.packets * header) * 8;
        let bits = self.packet_bits();
        self.ports[f]
            .q
            .sent(start, (wire_bits, rest_bits.max(wire_bits)), more, bits);
        // Store and forward through the receiving port's ingress (the switch's egress to it).
        let in_start = self.ports[t].ingress_free.max(left);
        // Saturating: an uplink held for ever (`carry` at u64::MAX) must not overflow.
        let in_end = in_start.saturating_add(tx);
        self.ports[t].ingress_free = in_end;
        Sent {
            left_ps: left,
            arrived_ps: in_end.saturating_add(base),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_times_match_the_rates() {
        let l = LinkConfig::resex_testbed();
        assert_eq!(l.packet_ps(1024 - 30), 1024 * 1000);
        let h = LinkConfig::hundred_gig();
        assert_eq!(h.packet_ps(4096 - 30), 4096 * 80);
    }

    #[test]
    fn two_flows_share_a_port_round_robin() {
        let mut cfg = LinkConfig::resex_testbed();
        cfg.header_bytes = 0;
        cfg.base_latency_ns = 0;
        let mut link = Link::new(cfg, 2);
        link.activate(PortId(0), (1, Dir::Request), 1);
        link.activate(PortId(0), (2, Dir::Request), 2);
        let mut order = Vec::new();
        for _ in 0..4 {
            let (p, flow) = link.next_port(u64::MAX).unwrap();
            let s = link.send(p, PortId(1), 1000, 0, true);
            order.push((flow.0, s.left_ps));
        }
        assert_eq!(
            order,
            vec![
                (1, 1_000_000),
                (2, 2_000_000),
                (1, 3_000_000),
                (2, 4_000_000)
            ]
        );
    }

    #[test]
    fn hosts_on_a_shared_uplink_take_it_in_turns_and_one_alone_has_all_of_it() {
        let mut cfg = LinkConfig::resex_testbed();
        cfg.header_bytes = 0;
        cfg.base_latency_ns = 0;
        // 8 Gb/s ports, a 1 Gb/s uplink: a 1 000-byte packet holds it 8 us.
        let up = crate::uplink::Uplink::new(1_000_000_000);
        let origin = std::time::Instant::now();
        let mut hosts: Vec<Link> = (0..2)
            .map(|_| {
                let mut l = Link::new(cfg, 2);
                l.set_uplink(Some((up.tap(origin), PortId(0))));
                l.activate(PortId(0), (1, Dir::Request), 1);
                l
            })
            .collect();
        let mut left = Vec::new();
        for _ in 0..3 {
            for h in &mut hosts {
                let (p, _) = h.next_port(u64::MAX).unwrap();
                left.push(h.send(p, PortId(1), 1000, 0, true).left_ps / 1_000_000);
            }
        }
        assert_eq!(
            left,
            vec![8, 16, 24, 32, 40, 48],
            "in turns, at the uplink's rate"
        );
        // The other direction does not cross it: the port's own rate.
        let back = hosts[0].send(PortId(1), PortId(0), 1000, 0, false);
        assert_eq!(back.left_ps, 1_000_000);
        assert_eq!(up.count().packets, 6);
    }

    #[test]
    fn two_senders_into_one_port_queue_at_its_ingress() {
        let mut cfg = LinkConfig::resex_testbed();
        cfg.header_bytes = 0;
        cfg.base_latency_ns = 0;
        let mut link = Link::new(cfg, 3);
        link.activate(PortId(0), (1, Dir::Request), 1);
        link.activate(PortId(1), (2, Dir::Request), 2);
        let a = link.send(PortId(0), PortId(2), 1000, 0, false);
        let b = link.send(PortId(1), PortId(2), 1000, 0, false);
        assert_eq!(a.left_ps, b.left_ps);
        assert_eq!(a.arrived_ps, 2_000_000);
        assert_eq!(b.arrived_ps, 3_000_000);
    }
}
