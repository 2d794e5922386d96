//! Adaptive unfairness between compatible periodic jobs on a shared link (issue 33 item 3; the
//! rule of Rajasekaran et al., HotNets '22, and of the lab's `progress` policy): the job
//! further into its communication gets the larger share of the link, so jobs that collide
//! slide apart over a few iterations and end up taking the link in turns.
//!
//! The fleet's coordinator finds the links whose periodic jobs are compatible and hands each
//! job's host a [`Schedule`]: the link's pool for those jobs and every job's timing (period,
//! when its latest arc began, how long its arc is), all measured by the hosts' own monitors.
//! Each host evaluates the same rule for its own job at every step ([`Schedule::ceiling_at`]):
//! a job's progress is how far into its predicted arc it is, its weight `1 + gain x progress`
//! (1 when it is not predicted to send), and its ceiling the pool times its weight over the
//! weights of itself and the jobs predicted to send now. Every host computes every job's
//! weight from the same figures, so the ceilings of the jobs predicted to send add up to the
//! pool. Pure: times are the core's (ns), the driver converts the fleet's Unix times.

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
}

/// The most other jobs a schedule takes into account.
pub const MAX_OTHERS: usize = 15;

/// Ceilings are multiples of the pool over this many steps (a change at most every such step:
/// bounded actuation).
pub const STEPS: u64 = 20;

impl Schedule {
    /// This VM's transmit ceiling at `now_ns`, bits per second: the pool times its weight over
    /// the weights of itself and the other jobs predicted to send now, rounded down to a
    /// twentieth of the pool (at least one twentieth).
    #[must_use]
    pub fn ceiling_at(&self, now_ns: u64) -> u64 {
        let gain = if self.gain.is_finite() {
            self.gain.clamp(0.0, 100.0)
        } else {
            0.0
        };
        let weight = |p: Option<f64>| 1.0 + gain * p.unwrap_or(0.0);
        let mine = weight(self.me.progress(now_ns));
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
}
