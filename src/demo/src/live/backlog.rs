//! The reporting VM's backlog: the orders its clients offered that its server has not served.
//!
//! Its clients run open loop (order k is due at k / rate, and an overdue one is sent at once),
//! and its server times each order from the moment it takes it off its ring: while the server
//! serves fewer orders than are offered, the orders queue, and its latency becomes the queue's
//! wait, which grows for as long as the shortfall lasts and carries into the next phase
//! (nothing between phases drains it). A host whose CPUs cannot run the guest does that.
//!
//! The host cannot see the clients' count, but it knows their rate and counts what the server
//! served (the latency reports' request count): the backlog is taken as zero at the first look
//! (the base phase's settle time: the VM alone) and grows by the offered rate less what was
//! served since. A report lost on the way (a full mailbox) would read as orders never served:
//! a phase is flagged only when its latency is as long as such a queue would make it.

use crate::health::MAX_BACKLOG_S;

/// Below this many orders the estimate is taken to have drifted (a queue the origin had, or a
/// report counted late there), and the origin moves: no queue is negative.
const DRIFT_ORDERS: f64 = 10.0;

/// A queue of at least `n` orders through a phase makes its mean latency the time to serve
/// `n` or more; a quarter of it leaves room for the estimate's error. A queue that only a lost
/// report made stands still at its size, phase after phase, with the latency of a VM that
/// keeps up.
const WAIT_SHARE: f64 = 0.25;

/// The reporting VM's backlog, from the daemon's snapshots.
#[derive(Debug, Clone)]
pub(crate) struct Backlog {
    /// Orders offered per second (rate x clients).
    offered_per_s: f64,
    /// The origin: the daemon's uptime, ms, and the orders served by then, where the queue is
    /// taken as empty.
    origin: Option<(u64, f64)>,
    /// The daemon held the VM back while a backlog stood, and it has not drained since.
    resex_made: bool,
}

impl Backlog {
    /// Tracks a VM whose clients offer `offered_per_s` orders a second in all.
    pub(crate) fn new(offered_per_s: f64) -> Self {
        Self {
            offered_per_s,
            origin: None,
            resex_made: false,
        }
    }

    /// Orders offered per second.
    pub(crate) fn offered_per_s(&self) -> f64 {
        self.offered_per_s
    }

    /// The orders waiting at `uptime_ms` (the daemon's clock) when `served` were served by
    /// then. The first look is the origin (zero waiting); a look [`DRIFT_ORDERS`] below zero
    /// becomes the origin.
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn at(&mut self, uptime_ms: u64, served: u64) -> f64 {
        let (t0, n0) = *self.origin.get_or_insert((uptime_ms, served as f64));
        let offered = self.offered_per_s * uptime_ms.saturating_sub(t0) as f64 / 1000.0;
        let waiting = offered - (served as f64 - n0).max(0.0);
        if waiting < -DRIFT_ORDERS {
            self.origin = Some((uptime_ms, served as f64));
            return 0.0;
        }
        waiting
    }

    /// The host's reason for phase `p`'s latency, when it is a queue's and resex did not make
    /// that queue (`limited`: the daemon held the VM back in the phase). A queue resex made
    /// stays its own in the phases that inherit it, while it drains or holds; one that grows
    /// by more than the limit in a phase where resex did not hold the VM back is the host's.
    pub(crate) fn blame(&mut self, p: PhaseBacklog, limited: bool) -> Option<String> {
        let reason = p.reason();
        let inherited = self.resex_made && p.end <= p.start + p.limit();
        self.resex_made = reason.is_some() && (limited || inherited);
        reason.filter(|_| !self.resex_made)
    }
}

/// What a phase saw of the backlog: the orders waiting at its measured part's start and end,
/// the orders it served per second in between, and its mean latency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PhaseBacklog {
    /// Orders waiting at the start of the measured part.
    pub start: f64,
    /// Orders waiting at its end.
    pub end: f64,
    /// Orders served per second in between.
    pub served_per_s: f64,
    /// Orders offered per second.
    pub offered_per_s: f64,
    /// The VM's mean latency over the measured part, us (None: it reported nothing).
    pub latency_us: Option<f64>,
}

impl PhaseBacklog {
    /// The most orders that may wait before the latency is the queue's.
    fn limit(&self) -> f64 {
        (MAX_BACKLOG_S * self.offered_per_s).max(1.0)
    }

    /// The phase's latency is its queue's: more than the limit waiting at its start or end,
    /// and a mean latency as long as the queue that stood through it (the smaller of the two)
    /// makes it.
    pub(crate) fn queued(&self) -> bool {
        let least = self.start.min(self.end).max(0.0);
        let wait_us = 1e6 * least / self.offered_per_s.max(1e-9);
        self.start.max(self.end) > self.limit()
            && self.latency_us.is_some_and(|l| l >= WAIT_SHARE * wait_us)
    }

    /// The reason the phase's latency is its queue's, when it is (None: it kept up).
    pub(crate) fn reason(&self) -> Option<String> {
        self.queued().then(|| {
            format!(
                "the reporting VM fell behind its clients: about {:.0} orders waiting at the \
                 phase's end ({:.0} at its start), having served {:.0} of the {:.0} orders/s \
                 offered, so its latency is mostly its wait in that queue (which the next phase \
                 inherits)",
                self.end.max(0.0),
                self.start.max(0.0),
                self.served_per_s,
                self.offered_per_s
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(start: f64, end: f64, latency_us: f64) -> PhaseBacklog {
        PhaseBacklog {
            start,
            end,
            served_per_s: 930.0,
            offered_per_s: 1000.0,
            latency_us: Some(latency_us),
        }
    }

    #[test]
    fn the_backlog_grows_by_the_shortfall_and_drains_by_the_surplus() {
        let mut b = Backlog::new(1000.0);
        assert_eq!(b.at(5_000, 4_000), 0.0, "the first look is the origin");
        // 2 s later, 1860 served of 2000 offered.
        assert_eq!(b.at(7_000, 5_860), 140.0);
        // 1 s more: 1100 served of 1000 offered, 100 of the queue drained.
        assert_eq!(b.at(8_000, 6_960), 40.0);
        // Kept up exactly.
        assert_eq!(b.at(9_000, 7_960), 40.0);
        // A report late at the origin: a little below zero is kept.
        assert_eq!(b.at(10_000, 9_005), -5.0);
        // A clock or a count that went back counts as no time and nothing served.
        assert_eq!(b.at(1_000, 3_000), 0.0);
        assert_eq!(b.offered_per_s(), 1000.0);
    }

    #[test]
    fn no_queue_is_negative_the_origin_moves_instead() {
        let mut b = Backlog::new(1000.0);
        assert_eq!(b.at(0, 0), 0.0);
        // A queue the origin had drains: 300 more served than offered.
        assert_eq!(b.at(1_000, 1_300), 0.0, "the origin moves here");
        // A later shortfall of 200 shows in full.
        assert_eq!(b.at(2_000, 2_100), 200.0);
    }

    #[test]
    fn a_phase_is_queued_when_many_wait_and_its_latency_is_their_wait() {
        assert_eq!(
            phase(0.0, 12.0, 20_000.0).reason(),
            None,
            "within the error"
        );
        assert_eq!(phase(-30.0, 24.0, 20_000.0).reason(), None);
        let grew = phase(3.0, 140.0, 60_000.0).reason().unwrap();
        assert!(grew.contains("about 140 orders waiting"), "{grew}");
        assert!(grew.contains("930 of the 1000 orders/s"), "{grew}");
        // Inherited from the phase before, still draining at the end.
        assert!(phase(400.0, 20.0, 150_000.0).queued());
        assert!(!phase(-50.0, -10.0, 150_000.0).queued());
        // Grown from nothing late in the phase: its mean is not a whole queue's wait, but is.
        assert!(phase(6.0, 990.0, 35_000.0).queued());
        // Reports lost on the way read as a queue; a latency of 500 us says there is none.
        assert!(!phase(300.0, 320.0, 500.0).queued());
        assert!(!PhaseBacklog {
            latency_us: None,
            ..phase(300.0, 320.0, 0.0)
        }
        .queued());
    }

    #[test]
    fn a_backlog_resex_made_is_its_own_until_it_drains_or_the_host_adds_to_it() {
        let p = |start, end| phase(start, end, 1e6);
        let mut b = Backlog::new(1000.0);
        assert!(b.blame(p(0.0, 300.0), false).is_some(), "the host's");
        assert!(b.blame(p(300.0, 900.0), true).is_none(), "resex capped it");
        // Inherited from the phase resex held back, draining: still resex's.
        assert!(b.blame(p(900.0, 100.0), false).is_none());
        // Drained: a new queue is the host's again.
        assert!(b.blame(p(10.0, 5.0), false).is_none());
        assert!(b.blame(p(5.0, 200.0), false).is_some());
        // Resex's queue, then one the host grows further: the host's.
        assert!(b.blame(p(200.0, 600.0), true).is_none());
        assert!(b.blame(p(600.0, 1200.0), false).is_some());
    }
}
