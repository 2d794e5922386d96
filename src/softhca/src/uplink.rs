//! A link several HCAs share: the uplink between a rack's hosts and the rest of the fabric. One
//! port of each HCA that taps it (the guests' port) sends its packets across it: a packet
//! leaves that port no earlier than the uplink is free, and holds the uplink for its wire time
//! at the uplink's rate (first come, first served, lossless: the port waits as under PFC).
//! Hosts sending at once therefore take the uplink packet by packet in turns, and a host alone
//! has all of it.
//!
//! Each HCA keeps its own clock (picoseconds since its clock's origin); a tap converts to the
//! uplink's time by the difference of the origins, so HCAs on real clocks created at different
//! moments in one process agree. Virtual-time callers (the lab) do not use it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

#[derive(Debug)]
struct State {
    /// When the uplink is next free, ps since the uplink's epoch.
    free_ps: u64,
    /// Bytes (payload and headers) carried so far.
    wire_bytes: u64,
    /// Packets carried so far.
    packets: u64,
}

/// A link shared by HCAs (cheap to clone: the clones are the same link).
#[derive(Debug, Clone)]
pub struct Uplink {
    bits_per_sec: u64,
    epoch: Instant,
    state: Arc<Mutex<State>>,
}

/// What an uplink carried so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UplinkCount {
    /// Bytes on the wire (payload and headers).
    pub wire_bytes: u64,
    /// Packets.
    pub packets: u64,
}

impl Uplink {
    /// An uplink of `bits_per_sec` (at least 1), its time counted from now.
    pub fn new(bits_per_sec: u64) -> Self {
        Self {
            bits_per_sec: bits_per_sec.max(1),
            epoch: Instant::now(),
            state: Arc::new(Mutex::new(State {
                free_ps: 0,
                wire_bytes: 0,
                packets: 0,
            })),
        }
    }

    /// Its data rate, bits per second.
    pub fn bits_per_sec(&self) -> u64 {
        self.bits_per_sec
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What it carried so far.
    pub fn count(&self) -> UplinkCount {
        let s = self.lock();
        UplinkCount {
            wire_bytes: s.wire_bytes,
            packets: s.packets,
        }
    }

    /// A tap for an HCA whose clock's zero is `origin` (a [`crate::MonotonicClock`]'s).
    pub fn tap(&self, origin: Instant) -> UplinkTap {
        let offset_ps = if origin >= self.epoch {
            i128::try_from(origin.duration_since(self.epoch).as_nanos()).unwrap_or(i128::MAX)
        } else {
            -i128::try_from(self.epoch.duration_since(origin).as_nanos()).unwrap_or(i128::MAX)
        };
        UplinkTap {
            uplink: self.clone(),
            offset_ps: offset_ps.saturating_mul(1000),
        }
    }

    /// Wire time of `wire_bits` at the uplink's rate, ps.
    fn wire_ps(&self, wire_bits: u64) -> u64 {
        let ps = u128::from(wire_bits) * 1_000_000_000_000 / u128::from(self.bits_per_sec);
        u64::try_from(ps).unwrap_or(u64::MAX)
    }
}

/// One HCA's access to an [`Uplink`], on that HCA's clock.
#[derive(Debug, Clone)]
pub struct UplinkTap {
    uplink: Uplink,
    /// The HCA's clock zero on the uplink's clock, ps.
    offset_ps: i128,
}

impl UplinkTap {
    /// The uplink.
    pub fn uplink(&self) -> &Uplink {
        &self.uplink
    }

    /// Carries a packet of `wire_bits` (headers included) ready at `ready_ps` (the HCA's
    /// clock): it starts when the uplink is free, holds it for its wire time; returns when its
    /// last bit has left the uplink (the HCA's clock).
    pub fn carry(&self, ready_ps: u64, wire_bits: u64) -> u64 {
        let wire = self.uplink.wire_ps(wire_bits);
        let ready = to_u64(i128::from(ready_ps) + self.offset_ps);
        let mut s = self.uplink.lock();
        let start = s.free_ps.max(ready);
        s.free_ps = start.saturating_add(wire);
        s.wire_bytes = s.wire_bytes.saturating_add(wire_bits / 8);
        s.packets += 1;
        to_u64(i128::from(s.free_ps) - self.offset_ps)
    }
}

/// `v` clamped into u64.
fn to_u64(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn packets_queue_first_come_first_served_at_the_uplinks_rate() {
        // 1 Gb/s: 1 000 bits take 1 us.
        let up = Uplink::new(1_000_000_000);
        let t = up.tap(up.epoch);
        assert_eq!(t.carry(0, 1000), 1_000_000);
        assert_eq!(t.carry(0, 1000), 2_000_000, "queued behind the first");
        assert_eq!(
            t.carry(5_000_000, 1000),
            6_000_000,
            "an idle uplink waits for nobody"
        );
        assert_eq!(
            up.count(),
            UplinkCount {
                wire_bytes: 375,
                packets: 3
            }
        );
    }

    #[test]
    fn taps_on_clocks_of_different_origins_share_one_time() {
        let up = Uplink::new(1_000_000_000);
        let early = up.tap(up.epoch);
        // A second HCA whose clock started 2 us after the uplink's.
        let late = up.tap(up.epoch + Duration::from_micros(2));
        assert_eq!(early.carry(2_000_000, 1000), 3_000_000);
        // Its 0 is the uplink's 2 us: the uplink is busy until 3 us, 1 us on its clock.
        assert_eq!(late.carry(0, 1000), 2_000_000);
        // A clock that started before the uplink's epoch.
        let before = up.tap(up.epoch - Duration::from_micros(10));
        assert_eq!(
            before.carry(0, 1000),
            15_000_000,
            "waits for 4 us, then 1 us"
        );
    }

    #[test]
    fn hostile_values_saturate_instead_of_panicking() {
        let up = Uplink::new(0);
        let t = up.tap(up.epoch);
        assert_eq!(t.carry(u64::MAX, u64::MAX), u64::MAX);
        assert_eq!(t.carry(0, 8), u64::MAX, "the uplink stays busy for ever");
    }
}
