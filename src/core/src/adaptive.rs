//! Adaptive unfairness between compatible periodic jobs on a shared link (issue 33 item 3; the
//! rule of Rajasekaran et al., HotNets '22, and of the lab's `progress` policy): the job
//! further into its communication gets the larger share of the link, so jobs that collide
//! slide apart over a few iterations and end up taking the link in turns.
//!
//! The fleet's coordinator finds the links whose periodic jobs are compatible and hands each
//! job's host a [`Schedule`]: the link's pool for those jobs and every job's timing (period,
//! when its latest arc began, how long its arc is), all measured by the hosts' own monitors.
//! Each host evaluates the rule for its own job at every step ([`Schedule::ceiling_seen`]):
//! a job's progress is how far into its arc it is, its weight `1 + gain x progress` (1 when it
//! is not sending), and its ceiling the pool times its weight over the weights of itself and
//! the jobs predicted to send now. Each host sees its own job and predicts the others, so the
//! ceilings need not add up to the pool (the link's own order serves what they allow). Pure:
//! times are the core's (ns), the driver converts the fleet's Unix times.
//!
//! **Its own job, seen.** Predictions age: the coordinator's figures are up to a few seconds
//! old, and periods change as colliding jobs slide apart, so a job whose communication outlasts
//! its predicted arc would be held to a base share just when it is furthest in. A host does not
//! need to predict its own job: its monitor counts every byte the VM sends ([`ArcWatch`]). While
//! the job is seen sending, its progress is the bytes it sent since its arc began over its bytes
//! per period (time over the predicted arc when that is unknown); the other jobs, on other
//! hosts, are predicted.
//!
//! **On a grid.** When the link's jobs share one period the coordinator hands out target arcs
//! on a grid it keeps (`resex_fleet`'s `compat::grid`) and [`Schedule::grid`] is set: a job
//! weighs `1 + gain` in its target arc and 1 outside it, its own job too, whatever it is seen
//! doing. Every host then computes the same split while the jobs keep to the grid, and a job
//! sending in another's arc yields to it and slides to its own (measured: a compatible pair
//! 1.19-1.29x faster than fair on real processes, where the predictions gave 0.92-1.18x).

/// One job's timing on the core's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobTiming {
    /// Its period, ns (at least 1).
    pub period_ns: u64,
    /// When one of its arcs began, ns on the core's clock (any one: the rule works modulo the
    /// period).
    pub start_ns: u64,
    /// How long its arc lasts, ns (at most the period).
    pub arc_ns: u64,
}

/// What a host saw of its own job's current arc, from its monitor's exact counts: when the job
/// began sending after a pause, and how much it has sent since.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArcWatch {
    /// Seen sending, the pause since its last bytes not yet long enough to end the arc.
    sending: bool,
    /// When the arc began, ns.
    started_ns: u64,
    /// When it last sent, ns.
    last_ns: u64,
    /// Bytes sent since the arc began.
    sent: u64,
}

/// The shortest pause that ends an arc, ns (a job paced by a low ceiling sends a message every
/// few ms).
pub const MIN_PAUSE_NS: u64 = 5_000_000;

impl JobTiming {
    /// How far into its arc it is at `now_ns`, in [0, 1), or None when it is not predicted to
    /// send.
    #[must_use]
    pub fn progress(&self, now_ns: u64) -> Option<f64> {
        let period = self.period_ns.max(1);
        let arc = self.arc_ns.min(period);
        // Now before the start given: count back whole periods (the rule is periodic).
        let into = if now_ns >= self.start_ns {
            (now_ns - self.start_ns) % period
        } else {
            (period - (self.start_ns - now_ns) % period) % period
        };
        (into < arc).then(|| into as f64 / arc.max(1) as f64)
    }
}

/// A host's instruction for one of its VMs on a compatible link.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// What the compatible jobs share of the link, bits per second.
    pub pool_bps: u64,
    /// The unfairness: a job's weight is `1 + gain x progress`.
    pub gain: f64,
    /// This VM's job.
    pub me: JobTiming,
    /// The other compatible jobs on the link.
    pub others: Vec<JobTiming>,
    /// This VM's job's bytes per period, as its detector measured them (0: unknown; progress
    /// is then time over the predicted arc).
    pub me_bytes: u64,
    /// The timings are targets on the link's grid: a job weighs `1 + gain` in its target arc
    /// and 1 outside it (its own too: a job sending in another's arc yields to it, and slides
    /// to its own); false: weights by progress, its own as seen.
    pub grid: bool,
}

/// The most other jobs a schedule takes into account.
pub const MAX_OTHERS: usize = 15;

/// Ceilings are multiples of the pool over this many steps (a change at most every such step:
/// bounded actuation).
pub const STEPS: u64 = 20;

impl Schedule {
    /// The pause that ends an arc of this job: a third of its predicted time off the wire, at
    /// least [`MIN_PAUSE_NS`].
    fn pause_ns(&self) -> u64 {
        let off = self.me.period_ns.saturating_sub(self.me.arc_ns);
        (off / 3).max(MIN_PAUSE_NS)
    }

    /// The fewest bytes an interval must carry to count as the job sending: a tenth of its
    /// arc's mean per millisecond (0 when its bytes are unknown), so that a trickle between
    /// arcs (acknowledgements, heartbeats) neither holds an arc open nor adds to it.
    fn trickle(&self) -> u64 {
        self.me_bytes / (self.me.arc_ns / 1_000_000).max(1) / 10
    }

    /// Records what the job sent in the interval ending at `now_ns` (bounded work: a few
    /// comparisons). An arc that runs on past twice its bytes per period or past its period
    /// starts again (the figure was wrong, or the job changed: a job that never pauses is not
    /// held at the top weight).
    pub fn observe(&self, w: &mut ArcWatch, now_ns: u64, bytes: u64) {
        if w.sending && now_ns.saturating_sub(w.last_ns) > self.pause_ns() {
            w.sending = false;
        }
        if bytes == 0 || bytes < self.trickle() {
            return;
        }
        let overrun = (self.me_bytes > 0 && w.sent >= self.me_bytes.saturating_mul(2))
            || now_ns.saturating_sub(w.started_ns) > self.me.period_ns.max(1);
        if !w.sending || overrun {
            *w = ArcWatch {
                sending: true,
                started_ns: now_ns,
                last_ns: now_ns,
                sent: 0,
            };
        }
        w.sent = w.sent.saturating_add(bytes);
        w.last_ns = now_ns;
    }

    /// How far into its arc the job is seen at `now_ns`, in [0, 1], or None when it is not
    /// seen sending.
    #[must_use]
    pub fn seen_progress(&self, w: &ArcWatch, now_ns: u64) -> Option<f64> {
        if !w.sending || now_ns.saturating_sub(w.last_ns) > self.pause_ns() {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        let p = if self.me_bytes > 0 {
            w.sent as f64 / self.me_bytes as f64
        } else {
            now_ns.saturating_sub(w.started_ns) as f64 / self.me.arc_ns.max(1) as f64
        };
        Some(p.clamp(0.0, 1.0))
    }

    /// This VM's transmit ceiling at `now_ns` with its own job as seen (`w`): its progress is
    /// the one seen while it sends, the predicted one otherwise.
    #[must_use]
    pub fn ceiling_seen(&self, w: &ArcWatch, now_ns: u64) -> u64 {
        if self.grid {
            return self.ceiling_at(now_ns);
        }
        let mine = self
            .seen_progress(w, now_ns)
            .or_else(|| self.me.progress(now_ns));
        self.ceiling_with(mine, now_ns)
    }

    /// This VM's transmit ceiling at `now_ns`, bits per second: the pool times its weight over
    /// the weights of itself and the other jobs predicted to send now, rounded down to a
    /// twentieth of the pool (at least one twentieth).
    #[must_use]
    pub fn ceiling_at(&self, now_ns: u64) -> u64 {
        self.ceiling_with(self.me.progress(now_ns), now_ns)
    }

    /// The ceiling with this job's progress `mine` (None: not sending).
    fn ceiling_with(&self, mine: Option<f64>, now_ns: u64) -> u64 {
        let gain = if self.gain.is_finite() {
            self.gain.clamp(0.0, 100.0)
        } else {
            0.0
        };
        // On a grid a job in its target arc weighs as one at its arc's end.
        let grid = self.grid;
        let weight = |p: Option<f64>| match p {
            Some(_) if grid => 1.0 + gain,
            p => 1.0 + gain * p.unwrap_or(0.0),
        };
        let mine = weight(mine);
        let others: f64 = self
            .others
            .iter()
            .take(MAX_OTHERS)
            .filter_map(|j| j.progress(now_ns))
            .map(|p| weight(Some(p)))
            .sum();
        let share = mine / (mine + others);
        let step = (self.pool_bps / STEPS).max(1);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let steps = (share * STEPS as f64).floor().clamp(1.0, STEPS as f64) as u64;
        step.saturating_mul(steps)
    }
}

/// A VM whose fleet ceiling follows a schedule.
#[derive(Debug, Clone)]
pub(crate) struct Scheduled {
    pub(crate) vm: resex_common::VmId,
    pub(crate) schedule: Schedule,
    /// What its host saw of its job's arc (kept across allocations).
    pub(crate) watch: ArcWatch,
    /// Its lowest ceiling: the admin's explicit entitlement, at most the pool (0: none).
    pub(crate) floor_bps: u64,
    /// The ceiling set last.
    pub(crate) last_bps: u64,
    /// Whether the allocation in force schedules it (a VM a round leaves out is kept, its
    /// job still watched, while the fleet's allocations last: the next round that schedules
    /// it again finds its arc where it is).
    pub(crate) active: bool,
}

impl Scheduled {
    /// Its ceiling at `now_ns`: the schedule's with its own job as seen, never below its floor.
    pub(crate) fn ceiling(&self, now_ns: u64) -> u64 {
        self.schedule
            .ceiling_seen(&self.watch, now_ns)
            .max(self.floor_bps)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn job(start_ms: u64) -> JobTiming {
        JobTiming {
            period_ns: 200 * MS,
            start_ns: start_ms * MS,
            arc_ns: 50 * MS,
        }
    }

    fn schedule(me: JobTiming, others: Vec<JobTiming>) -> Schedule {
        Schedule {
            pool_bps: 1_000_000_000,
            gain: 10.0,
            me,
            others,
            me_bytes: 0,
            grid: false,
        }
    }

    #[test]
    fn progress_is_the_position_in_the_predicted_arc_modulo_the_period() {
        let j = job(1000);
        assert_eq!(j.progress(1000 * MS), Some(0.0));
        assert_eq!(j.progress(1025 * MS), Some(0.5));
        assert_eq!(j.progress(1050 * MS), None, "the arc ended");
        assert_eq!(j.progress(1210 * MS), Some(0.2), "the next period");
        assert_eq!(j.progress(810 * MS), Some(0.2), "before the start given");
        assert_eq!(j.progress(0), Some(0.0), "1 000 ms is 5 periods");
        let odd = JobTiming {
            period_ns: 0,
            start_ns: u64::MAX,
            arc_ns: u64::MAX,
        };
        assert_eq!(odd.progress(0), Some(0.0), "no division by zero, no panic");
    }

    #[test]
    fn the_job_further_into_its_arc_gets_the_larger_share_and_the_shares_fill_the_pool() {
        // a began 30 ms ago, b 10 ms ago: both sending.
        let (a, b) = (job(970), job(990));
        let now = 1000 * MS;
        let ca = schedule(a, vec![b]).ceiling_at(now);
        let cb = schedule(b, vec![a]).ceiling_at(now);
        // Weights 1 + 10 x 0.6 = 7 and 1 + 10 x 0.2 = 3: 70% and 30%.
        assert_eq!((ca, cb), (700_000_000, 300_000_000));
        // b alone in its arc (a finished): the whole pool; a, not predicted to send, keeps a
        // base share against b's weight.
        let later = 1025 * MS;
        assert_eq!(schedule(b, vec![a]).ceiling_at(later), 1_000_000_000);
        let ca = schedule(a, vec![b]).ceiling_at(later);
        assert_eq!(
            ca, 100_000_000,
            "1 / (1 + 1 + 10 x 0.7) = 0.11: two twentieths"
        );
        // Nobody predicted to send: each may use the pool.
        assert_eq!(schedule(a, vec![b]).ceiling_at(1100 * MS), 1_000_000_000);
    }

    #[test]
    fn shares_are_bounded_below_and_odd_gains_are_tamed() {
        let (a, b) = (job(999), job(951));
        let mut s = schedule(a, vec![b; 40]);
        // Forty others far into their arcs (only 15 count): never below a twentieth.
        assert_eq!(s.ceiling_at(1000 * MS), 50_000_000);
        s.gain = f64::NAN;
        s.others.truncate(1);
        assert_eq!(s.ceiling_at(1000 * MS), 500_000_000, "NaN gain: fair");
        s.pool_bps = 0;
        assert_eq!(s.ceiling_at(1000 * MS), 10, "a zero pool: 1 bit/s steps");
    }

    #[test]
    fn a_job_seen_sending_past_its_predicted_arc_keeps_the_larger_share() {
        // a's predicted arc (50 ms from 1 000 ms) is over at 1 060 ms, but its host sees it
        // still sending: 80% of its 1 MB sent; b is predicted 54% in (weight 6.4).
        let (a, b) = (job(1000), job(1025));
        let mut s = schedule(a, vec![b]);
        s.me_bytes = 1_000_000;
        let mut w = ArcWatch::default();
        s.observe(&mut w, 1010 * MS, 400_000);
        s.observe(&mut w, 1040 * MS, 400_000);
        assert_eq!(s.seen_progress(&w, 1042 * MS), Some(0.8));
        let t = 1052 * MS;
        assert_eq!(
            s.ceiling_at(t),
            100_000_000,
            "predicted: over, a base share"
        );
        // Seen: weight 9 against 6.4: 58%, 11 twentieths.
        assert_eq!(s.ceiling_seen(&w, t), 550_000_000);
        // A pause of a third of its time off the wire (150 ms / 3) ends the arc; then the
        // prediction speaks again.
        assert_eq!(s.seen_progress(&w, 1091 * MS), None);
        assert_eq!(s.ceiling_seen(&w, 1091 * MS), s.ceiling_at(1091 * MS));
        // The next bytes begin a new arc, at progress 0.
        s.observe(&mut w, 1200 * MS, 100_000);
        assert_eq!(s.seen_progress(&w, 1200 * MS), Some(0.1));
        // Bytes unknown: time over the predicted arc.
        s.me_bytes = 0;
        assert_eq!(s.seen_progress(&w, 1225 * MS), Some(0.5));
    }

    #[test]
    fn a_trickle_between_arcs_neither_holds_an_arc_open_nor_counts_and_a_job_that_never_pauses_restarts(
    ) {
        let mut s = schedule(job(0), Vec::new());
        // 1 MB over a 50 ms arc: 20 kB a millisecond; under 2 kB is a trickle.
        s.me_bytes = 1_000_000;
        let mut w = ArcWatch::default();
        s.observe(&mut w, 0, 500_000);
        for k in 1..100 {
            s.observe(&mut w, k * 10 * MS, 1_000);
        }
        assert_eq!(s.seen_progress(&w, 990 * MS), None, "the arc ended");
        s.observe(&mut w, 1000 * MS, 100_000);
        assert_eq!(s.seen_progress(&w, 1000 * MS), Some(0.1), "a new arc");
        // Bytes unknown: a job sending without pause starts a new arc every period.
        s.me_bytes = 0;
        let mut w = ArcWatch::default();
        for k in 0..=250 {
            s.observe(&mut w, k * MS, 10);
        }
        // Restarted at 201 ms: 49 ms into a 50 ms arc.
        assert_eq!(s.seen_progress(&w, 250 * MS), Some(0.98));
    }

    #[test]
    fn an_arc_that_runs_past_twice_its_bytes_starts_again() {
        let mut s = schedule(job(0), Vec::new());
        s.me_bytes = 1000;
        let mut w = ArcWatch::default();
        for k in 0..25 {
            s.observe(&mut w, k * MS, 100);
        }
        // 2 000 bytes by the 20th ms, then a new arc: 500 bytes in.
        assert_eq!(s.seen_progress(&w, 24 * MS), Some(0.5));
        s.observe(&mut w, 30 * MS, u64::MAX);
        assert_eq!(
            s.seen_progress(&w, 30 * MS),
            Some(1.0),
            "saturates, no panic"
        );
    }
}
