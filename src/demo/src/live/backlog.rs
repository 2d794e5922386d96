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
//! served since.

/// The reporting VM's backlog, from the daemon's snapshots.
#[derive(Debug, Clone)]
pub(crate) struct Backlog {
    /// Orders offered per second (rate x clients).
    offered_per_s: f64,
    /// The first look: the snapshot's uptime, ms, and the orders served by then.
    origin: Option<(u64, u64)>,
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
    /// then; the first look is the origin (zero waiting). Negative: a backlog the origin had
    /// and that drained since.
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn at(&mut self, uptime_ms: u64, served: u64) -> f64 {
        let (t0, n0) = *self.origin.get_or_insert((uptime_ms, served));
        let offered = self.offered_per_s * uptime_ms.saturating_sub(t0) as f64 / 1000.0;
        offered - served.saturating_sub(n0) as f64
    }

    /// The host's reason for phase `p`'s latency, when a backlog makes it the queue's and
    /// resex did not make that backlog (`limited`: the daemon held the VM back in the phase;
    /// a backlog it made stays its own in the phases that inherit it, until it drains).
    pub(crate) fn blame(&mut self, p: PhaseBacklog, limited: bool) -> Option<String> {
        let reason = p.reason();
        self.resex_made = reason.is_some() && (limited || self.resex_made);
        reason.filter(|_| !self.resex_made)
    }
}

/// Above this many seconds' worth of offered orders waiting, the reporting VM's latency is its
/// queue's: 25 ms at the demo's 1000 orders/s, a hundred times the latency it has alone, and
/// above the estimate's own error (its reports come every 10 ms).
pub(crate) const MAX_BACKLOG_S: f64 = 0.025;

/// What a phase saw of the backlog: the orders waiting at its measured part's start and end,
/// and the orders it served per second in between.
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
}

impl PhaseBacklog {
    /// The reason the phase's latency is its queue's, when it is (None: it kept up).
    pub(crate) fn reason(&self) -> Option<String> {
        let limit = (MAX_BACKLOG_S * self.offered_per_s).max(1.0);
        (self.start.max(self.end) > limit).then(|| {
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
        // A clock or a count that went back counts as no time and nothing served.
        assert_eq!(b.at(1_000, 3_000), 0.0);
        assert_eq!(b.offered_per_s(), 1000.0);
    }

    #[test]
    fn a_phase_is_queued_when_its_start_or_its_end_waits_above_the_limit() {
        let p = |start, end| PhaseBacklog {
            start,
            end,
            served_per_s: 930.0,
            offered_per_s: 1000.0,
        };
        assert_eq!(p(0.0, 12.0).reason(), None, "within the estimate's error");
        assert_eq!(p(-30.0, 24.0).reason(), None);
        let grew = p(3.0, 140.0).reason().unwrap();
        assert!(grew.contains("about 140 orders waiting"), "{grew}");
        assert!(grew.contains("930 of the 1000 orders/s"), "{grew}");
        // Inherited from the phase before, still draining at the end.
        assert!(p(400.0, 20.0).reason().is_some());
        assert!(p(-50.0, -10.0).reason().is_none());
    }

    #[test]
    fn a_backlog_resex_made_is_never_the_hosts_until_it_drains() {
        let p = |start, end| PhaseBacklog {
            start,
            end,
            served_per_s: 800.0,
            offered_per_s: 1000.0,
        };
        let mut b = Backlog::new(1000.0);
        assert!(b.blame(p(0.0, 300.0), false).is_some(), "the host's");
        assert!(b.blame(p(300.0, 900.0), true).is_none(), "resex capped it");
        // Inherited from the phase resex held back: still resex's.
        assert!(b.blame(p(900.0, 100.0), false).is_none());
        // Drained: a new backlog is the host's again.
        assert!(b.blame(p(10.0, 5.0), false).is_none());
        assert!(b.blame(p(5.0, 200.0), false).is_some());
    }
}
