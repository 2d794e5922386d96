//! Target arcs for the jobs of a compatible link whose jobs share one period: a grid the
//! coordinator draws once and keeps, so that every host predicts the others the same way.
//!
//! Predicting each other job from its measured timing (its latest arc start and period, up to a
//! round old) goes wrong while the schedules move the jobs: their periods change iteration by
//! iteration as they slide apart, and each host's picture of the others is its own, so two
//! hosts may both yield (neither sends) or both take the link (the pair stays fair). Measured
//! on the lab fabric, that made a compatible pair anywhere from 0.91x to 1.27x of fair with the
//! second job's start moved by a few ms.
//!
//! On a grid every host predicts every job at its target arc: the grid's period is the
//! longest of the jobs' periods alone (their time off the wire plus their bytes at the pool's
//! rate) with [`GRID_SLACK`] to spare, each job's target arc its bytes at the pool's rate, the
//! arcs laid end to end in the order the jobs run now, the period's spare time split evenly
//! between them. Each host sees its own job (its progress is the bytes it sent in its arc) and
//! takes the others at their targets, so two hosts' shares agree while the jobs keep to the
//! grid, and a job that sends in another's target arc is held back as that arc progresses:
//! it slides to its own. A job's period alone is no longer than the grid's, so a job on time
//! waits (held back) rather than falls behind. The grid is kept while the link stays
//! compatible with the same jobs, each sending within [`SAME_BYTES`] of the bytes it was drawn
//! with (a new one otherwise); its period follows the jobs ([`Grid::follow`]), within
//! [`GRID_MAX_GROWTH`] of the one it was drawn with.

use super::{alone, SAME_PERIOD};
use crate::alloc::JobArc;
use crate::record::JobPeriod;

/// The grid's period is the longest period alone times `1 + GRID_SLACK`: room for a period
/// measured a little short.
pub const GRID_SLACK: f64 = 0.03;

/// A link's grid: its jobs (host, VM) and each one's target arc.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Grid {
    pub(crate) jobs: Vec<(String, String)>,
    pub(crate) period_ms: f64,
    /// When the first job's arc starts (any cycle), Unix ms.
    anchor_ms: f64,
    /// The jobs in the order their arcs follow each other.
    order: Vec<usize>,
    /// Each job's bytes per period and time on the wire at the pool's rate, ms.
    bytes: Vec<f64>,
    wire: Vec<f64>,
    /// The grid's period when it last grew, a job behind it (None: it has not grown): it
    /// probes no lower than [`GRID_PROBE`] above it.
    floor_ms: Option<f64>,
    /// Rounds in a row in which a job's latest period was longer than the grid.
    late_rounds: u32,
    /// The period it was drawn with: it grows to at most [`GRID_MAX_GROWTH`] times that.
    drawn_ms: f64,
    /// When it was drawn or last grew, Unix ms: it grows by the jobs' byte counts no sooner
    /// than [`GRID_COUNT_WAIT_MS`] after.
    grown_at_ms: f64,
    /// Whether it last grew by a byte count: it then holds until the count reads again.
    grew_by_count: bool,
}

/// A grid shorter than a job's latest period by more than this, [`GRID_LATE_ROUNDS`] rounds
/// in a row, is shorter than the job can keep: it grows by [`GRID_SLACK`]; one they all keep
/// shrinks by [`GRID_PROBE`]. Live, a job that keeps its grid is seen 2-3% either side of it
/// (its wake-ups and the 1 ms intervals its arcs are seen in): at 1% a grid the jobs kept grew
/// round after round, to its cap (measured: a pair that runs 268 ms held at 310 ms).
pub const GRID_BEHIND: f64 = 0.03;

/// Rounds in a row a job must be behind the grid for it to grow: one long iteration is a job
/// sliding to its arc or a hiccup of the machine (seen live two rounds in a row, 1.3-1.5x the
/// grid), not a job that cannot keep it.
pub const GRID_LATE_ROUNDS: u32 = 3;

/// A grid grows to at most this many times the period it was drawn with (a hostile or noisy
/// period cannot raise it for good; a job that slows more is out of step with it until the
/// link is drawn again).
pub const GRID_MAX_GROWTH: f64 = 1.25;

/// A job whose bytes per period moved by more than this is another job: its link gets a new
/// grid (live, a job's measured bytes per period move by a few percent as its periods do).
pub const SAME_BYTES: f64 = 0.25;

/// How long after a grid was drawn or grew its jobs' byte counts speak for it: a detector's
/// history (8.2 s at 1 ms, resexd's and the lab's) and a verdict's age (up to 2 s) and a
/// round, so that the iterations before the change have left the count.
pub const GRID_COUNT_WAIT_MS: f64 = 11_000.0;

/// A job counted longer than the grid by more than this is late by its bytes: twice
/// [`GRID_BEHIND`], for the count's own error (the bytes the grid was drawn with, read over a
/// period read 1-2% off, and the window's edges: up to half an iteration in about 28).
pub const GRID_COUNT_BEHIND: f64 = 0.06;

/// A reading of k iterations is taken at its fundamental only when its bytes are within this
/// of k times the bytes the grid was drawn with, and its period within this of k times the
/// grid's (a job whose work grew is another job: [`SAME_BYTES`]).
pub const FUNDAMENTAL_TOLERANCE: f64 = 0.1;

/// How much a grid the jobs keep shrinks each round: the period alone is measured while the
/// jobs collide, long; under the grid they wait for their arcs, so the grid probes down
/// towards their periods alone until one falls behind.
pub const GRID_PROBE: f64 = 0.01;

impl Grid {
    /// The grid for `jobs` (host, VM, as measured) on a pool of `pool_mbps`: None when their
    /// periods alone are not one period, or their arcs do not fit it.
    pub(crate) fn draw(
        jobs: &[(&str, &str, JobPeriod)],
        pool_mbps: f64,
        now_ms: f64,
    ) -> Option<Self> {
        let first = jobs.first()?.2.last_start_unix_ms;
        let alone: Vec<JobPeriod> = jobs.iter().map(|(_, _, p)| alone(p, pool_mbps)).collect();
        let shortest = alone.iter().map(|p| p.period_ms).fold(f64::MAX, f64::min);
        let longest = alone.iter().map(|p| p.period_ms).fold(0.0, f64::max);
        if !(shortest > 0.0 && longest <= shortest * (1.0 + SAME_PERIOD)) {
            return None;
        }
        // Room to grow within what a reader takes (`JobPeriod::MAX_PERIOD_MS`).
        let period_ms = longest * (1.0 + GRID_SLACK);
        if !(period_ms.is_finite() && period_ms * GRID_MAX_GROWTH <= JobPeriod::MAX_PERIOD_MS) {
            return None;
        }
        let wire: Vec<f64> = jobs
            .iter()
            .map(|(_, _, p)| (p.bytes_per_period * 8.0 / (pool_mbps * 1e3)).max(0.001))
            .collect();
        let busy: f64 = wire.iter().sum();
        if !(busy.is_finite() && busy <= period_ms) {
            return None;
        }
        // In the order they run now, from the first job's latest arc (one more than a period
        // ahead of `now_ms`, a hostile start, moved back whole periods to it: every target start
        // is then one a reader takes).
        let phase = |i: usize| (jobs[i].2.last_start_unix_ms - first).rem_euclid(period_ms);
        let anchor_ms = if first > now_ms + period_ms {
            let back = first - ((first - now_ms) / period_ms).ceil() * period_ms;
            if back < 0.0 {
                back + period_ms
            } else {
                back
            }
        } else {
            first
        };
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by(|a, b| phase(*a).total_cmp(&phase(*b)));
        Some(Self {
            jobs: jobs
                .iter()
                .map(|(h, v, _)| ((*h).to_owned(), (*v).to_owned()))
                .collect(),
            period_ms,
            anchor_ms,
            order,
            bytes: jobs.iter().map(|(_, _, p)| p.bytes_per_period).collect(),
            wire,
            floor_ms: None,
            late_rounds: 0,
            drawn_ms: period_ms,
            grown_at_ms: now_ms,
            grew_by_count: false,
        })
    }

    /// Every job's target arc: end to end in the grid's order from the anchor, the spare time
    /// split evenly.
    pub(crate) fn arcs(&self) -> Vec<JobArc> {
        let busy: f64 = self.wire.iter().sum();
        #[allow(clippy::cast_precision_loss)]
        let spare = ((self.period_ms - busy) / self.jobs.len() as f64).max(0.0);
        let mut arcs = vec![JobArc::default(); self.jobs.len()];
        let mut at = self.anchor_ms;
        for &i in &self.order {
            arcs[i] = JobArc {
                period_ms: self.period_ms,
                last_start_unix_ms: at,
                arc_ms: self.wire[i],
                bytes: self.bytes[i],
            };
            at += self.wire[i] + spare;
        }
        arcs
    }

    /// Whether it is the grid of these jobs (host, VM), in this order.
    pub(crate) fn serves<'a>(&self, jobs: impl Iterator<Item = (&'a str, &'a str)>) -> bool {
        let mut n = 0;
        for (k, (h, v)) in jobs.enumerate() {
            n += 1;
            if self.jobs.get(k).is_none_or(|(gh, gv)| gh != h || gv != v) {
                return false;
            }
        }
        n == self.jobs.len()
    }

    /// Whether its jobs still send the bytes it was drawn with: each within [`SAME_BYTES`]
    /// (`measured`, in its job order).
    pub(crate) fn holds_for(&self, measured: &[JobPeriod]) -> bool {
        self.bytes.len() == measured.len()
            && self.bytes.iter().zip(measured).all(|(a, m)| {
                (a - m.bytes_per_period).abs() <= SAME_BYTES * a.max(m.bytes_per_period)
            })
    }

    /// The readings of its jobs (`measured`, in its job order) at their fundamental: a job
    /// whose reading has k times the bytes it was drawn with and k times the grid's period
    /// (k 2 to 4, each within [`FUNDAMENTAL_TOLERANCE`]) is read at k periods, the pair's
    /// alternation repeating every k of its iterations (seen live: 549 ms and 2.2 MB for a job
    /// of 1.18 MB on a grid of 274-282 ms, which dropped the grid); its period and bytes are
    /// divided by k, and its latest period by the number of the grid's periods it spans (2 to
    /// k; as read when it spans one).
    pub(crate) fn fundamentals(&self, measured: &[JobPeriod]) -> Vec<JobPeriod> {
        measured
            .iter()
            .zip(self.bytes.iter().chain(std::iter::repeat(&0.0)))
            .map(|(m, &drawn)| self.fundamental(m, drawn))
            .collect()
    }

    /// `m` at its fundamental when it is k of its iterations (see [`Self::fundamentals`]).
    fn fundamental(&self, m: &JobPeriod, drawn: f64) -> JobPeriod {
        let near = |x: f64, want: f64| (x - want).abs() <= FUNDAMENTAL_TOLERANCE * want;
        if !(drawn > 0.0 && m.bytes_per_period.is_finite() && self.period_ms > 0.0) {
            return *m;
        }
        let k = (m.bytes_per_period / drawn).round();
        if !((2.0..=4.0).contains(&k)
            && near(m.bytes_per_period, k * drawn)
            && near(m.period_ms, k * self.period_ms))
        {
            return *m;
        }
        let period_ms = m.period_ms / k;
        JobPeriod {
            period_ms,
            bytes_per_period: m.bytes_per_period / k,
            latest_period_ms: m.latest_period_ms.map(|l| {
                let r = (l / period_ms).round();
                if (2.0..=k).contains(&r) {
                    l / r
                } else {
                    l
                }
            }),
            ..*m
        }
    }

    /// One round on: the anchor moved to the latest cycle that began by `now_ms`; then the
    /// period follows the jobs (`measured`, in the grid's job order). A job is behind the grid
    /// when its latest period (the time between its two latest arcs as its host saw them) is
    /// longer than it by more than [`GRID_BEHIND`]; behind it for [`GRID_LATE_ROUNDS`] rounds
    /// in a row it cannot keep it (a job sliding to its arc takes one long iteration, one that
    /// cannot keep up every one): the period grows by [`GRID_SLACK`] and the grid probes no
    /// lower than the period it left (and [`GRID_PROBE`]) again. Behind it for fewer rounds:
    /// it holds. A job is also late by its bytes when its iterations as they count them (the
    /// bytes it was drawn with over its rate: its detector's bytes per period over its period)
    /// are longer than the grid by more than [`GRID_COUNT_BEHIND`], counted once the grid was
    /// drawn or last grew [`GRID_COUNT_WAIT_MS`] ago (before, the count holds the iterations
    /// from before): the grid grows a step and holds there until the count reads again (a
    /// step it probed back down from in three rounds would grow it by 1%). A job that falls behind
    /// a short grid every few iterations is held back a whole turn each time; its latest
    /// periods miss those turns, its bytes do not (measured live: latest periods 270-274 ms
    /// on a grid of 268, iterations counted at 292-301 ms). Every job on time by both: it
    /// shrinks by [`GRID_PROBE`], never below that floor nor the jobs' busy time. Never above
    /// [`GRID_MAX_GROWTH`] times the period it was drawn with. Growth is a step, not the
    /// periods measured: the jobs' periods under a grid that does not fit them are its own
    /// doing (measured live: a jump to them held a pair at 404 ms that runs 268 ms).
    pub(crate) fn follow(&mut self, measured: &[JobPeriod], now_ms: f64) {
        let p = self.period_ms;
        if now_ms > self.anchor_ms && p > 0.0 {
            self.anchor_ms += ((now_ms - self.anchor_ms) / p).floor() * p;
        }
        let longest = measured.iter().map(seen_period).fold(0.0, f64::max);
        let counted = self.counted_longest(measured);
        let busy: f64 = self.wire.iter().sum();
        let behind = |x: f64| x > p * (1.0 + GRID_BEHIND);
        let late = behind(longest);
        let counting = now_ms - self.grown_at_ms >= GRID_COUNT_WAIT_MS;
        let late_by_bytes = counting && counted > p * (1.0 + GRID_COUNT_BEHIND);
        let holding = self.grew_by_count && !counting;
        let most = self.drawn_ms * GRID_MAX_GROWTH;
        self.late_rounds = if late { self.late_rounds + 1 } else { 0 };
        if self.late_rounds >= GRID_LATE_ROUNDS || late_by_bytes {
            self.floor_ms = Some(self.floor_ms.map_or(p, |f| f.max(p)).min(most));
            self.period_ms = (p * (1.0 + GRID_SLACK)).min(most).max(busy);
            self.late_rounds = 0;
            self.grown_at_ms = now_ms;
            self.grew_by_count = late_by_bytes;
        } else if !late && !late_by_bytes && !holding {
            let floor = self.floor_ms.map_or(0.0, |f| f * (1.0 + GRID_PROBE));
            self.period_ms = (p * (1.0 - GRID_PROBE)).max(floor).min(most).max(busy);
        }
    }

    /// The longest of its jobs' iterations as their bytes count them (0 when none can say).
    fn counted_longest(&self, measured: &[JobPeriod]) -> f64 {
        self.bytes
            .iter()
            .zip(measured)
            .map(|(&drawn, m)| drawn * m.period_ms / m.bytes_per_period)
            .filter(|t| t.is_finite() && *t > 0.0)
            .fold(0.0, f64::max)
    }
}

/// The time between a job's two latest arcs as its host saw them, else its detector's period.
pub(crate) fn seen_period(m: &JobPeriod) -> f64 {
    m.latest_period_ms
        .filter(|l| l.is_finite() && *l > 0.0)
        .unwrap_or(m.period_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(start: f64, period_ms: f64, duty: f64, bytes: f64) -> JobPeriod {
        JobPeriod {
            period_ms,
            last_start_unix_ms: start,
            bytes_per_period: bytes,
            duty,
            confidence: 0.8,
            latest_period_ms: None,
        }
    }

    #[test]
    fn two_colliding_jobs_get_arcs_end_to_end_with_the_spare_time_split() {
        // 11.75 MB at 1 Gb/s: 94 ms on the wire; measured 308 ms with 154 ms arcs while they
        // collide (alone: 248 ms).
        let jobs = [
            ("h1", "a1", job(1000.0, 308.0, 0.5, 11.75e6)),
            ("h2", "a2", job(1010.0, 308.0, 0.5, 11.75e6)),
        ];
        let mut g = Grid::draw(&jobs, 1000.0, 2000.0).unwrap();
        let p = 248.0 * 1.03;
        assert!((g.period_ms - p).abs() < 1e-9, "{}", g.period_ms);
        let spare = (p - 188.0) / 2.0;
        let arcs = g.arcs();
        assert_eq!(arcs[0].last_start_unix_ms, 1000.0);
        assert!((arcs[1].last_start_unix_ms - (1000.0 + 94.0 + spare)).abs() < 1e-9);
        assert!(arcs.iter().all(|a| (a.arc_ms - 94.0).abs() < 1e-9));
        // The same jobs: the grid holds; other bytes: a new one.
        let measured: Vec<JobPeriod> = jobs.iter().map(|j| j.2).collect();
        assert!(g.holds_for(&measured));
        let mut bigger = measured.clone();
        bigger[1].bytes_per_period = 16e6;
        assert!(!g.holds_for(&bigger));
        assert!(!g.holds_for(&measured[..1]), "another number of jobs");
        // Jobs that keep it: it shrinks a step, anchored at the cycle under way.
        let kept = [job(0.0, p, 0.4, 11.75e6), job(0.0, p, 0.4, 11.75e6)];
        g.follow(&kept, 1000.0 + 10.5 * p);
        assert!((g.period_ms - p * 0.99).abs() < 1e-9);
        assert!((g.arcs()[0].last_start_unix_ms - (1000.0 + 10.0 * p)).abs() < 1e-6);
        // Seen within GRID_BEHIND of it (a job's jitter): it still shrinks.
        let q = g.period_ms;
        let behind = |l: f64| [job(0.0, q * 0.9, 0.4, 11.75e6), job(0.0, l, 0.4, 11.75e6)];
        let seen = |mut j: [JobPeriod; 2], l: f64| {
            j[1].latest_period_ms = Some(l);
            j
        };
        g.follow(&seen(behind(q), q * 1.025), 1000.0 + 11.0 * p);
        assert!((g.period_ms - q * 0.99).abs() < 1e-9);
        // Behind it once or twice (sliding to its arc, a hiccup): it holds; then on time
        // again: it shrinks; behind it three rounds in a row (it cannot keep it): it grows a
        // step (held for the first two), and probes no lower than GRID_PROBE above the period
        // it left.
        let late = |g: &mut Grid, base: f64, k: u32, by: f64| {
            g.follow(
                &seen(behind(base), base * by),
                1000.0 + f64::from(12 + k) * p,
            );
        };
        let r = g.period_ms;
        late(&mut g, r, 0, 1.4);
        late(&mut g, r, 1, 1.05);
        assert!((g.period_ms - r).abs() < 1e-9, "held: {}", g.period_ms);
        g.follow(&seen(behind(r), r), 1000.0 + 14.0 * p);
        assert!((g.period_ms - r * 0.99).abs() < 1e-9, "{}", g.period_ms);
        let r = g.period_ms;
        for k in 0..2 {
            late(&mut g, r, 3 + k, 1.05);
            assert!(
                (g.period_ms - r).abs() < 1e-9,
                "held, round {k}: {}",
                g.period_ms
            );
        }
        late(&mut g, r, 5, 1.05);
        assert!((g.period_ms - r * 1.03).abs() < 1e-9, "{}", g.period_ms);
        // Kept from then on: it probes down to its floor, GRID_PROBE above the period it left.
        let kept = [job(0.0, r, 0.4, 11.75e6); 2];
        g.follow(&kept, 1000.0 + 20.0 * p);
        assert!(
            (g.period_ms - r * 1.03 * 0.99).abs() < 1e-9,
            "{}",
            g.period_ms
        );
        for k in 0..10 {
            g.follow(&kept, 1000.0 + f64::from(21 + k) * p);
        }
        assert!(
            (g.period_ms - r * 1.01).abs() < 1e-9,
            "at its floor: {}",
            g.period_ms
        );
        // A job that claims a huge period round after round raises it no further than
        // GRID_MAX_GROWTH times the period it was drawn with.
        for k in 0..40 {
            g.follow(&seen(behind(1e5), 1e5), 1000.0 + f64::from(30 + k) * p);
        }
        assert!(
            (g.period_ms - p * GRID_MAX_GROWTH).abs() < 1e-6,
            "{}",
            g.period_ms
        );
        assert!(g.serves([("h1", "a1"), ("h2", "a2")].into_iter()));
        assert!(!g.serves([("h2", "a2"), ("h1", "a1")].into_iter()));
        assert!(!g.serves([("h1", "a1")].into_iter()));
    }

    #[test]
    fn a_job_late_by_its_bytes_grows_the_grid_a_step_and_holds_it_until_the_count_reads_again() {
        let jobs = [
            ("h1", "a1", job(1000.0, 308.0, 0.5, 11.75e6)),
            ("h2", "a2", job(1010.0, 308.0, 0.5, 11.75e6)),
        ];
        let mut g = Grid::draw(&jobs, 1000.0, 2000.0).unwrap();
        let drawn = g.period_ms;
        // Latest periods on time (the grid's), but the bytes count iterations `by` times
        // longer: a job held back a turn every few iterations. Its detector's period reads
        // the grid's; its bytes per period, that period at its rate.
        let counted = |q: f64, by: f64| {
            let mut j = job(0.0, q, 0.4, 11.75e6 / by);
            j.latest_period_ms = Some(q);
            [job(0.0, q, 0.4, 11.75e6), j]
        };
        let at = |k: f64| 2000.0 + k * GRID_COUNT_WAIT_MS;
        let step = |g: &mut Grid, by: f64, t: f64| {
            let q = g.period_ms;
            g.follow(&counted(q, by), t);
            g.period_ms / q
        };
        let same = |x: f64, want: f64| (x - want).abs() < 1e-9;
        // Before a history has passed since it was drawn the count holds the iterations from
        // before (colliding, long): not read, the grid shrinks.
        assert!(same(step(&mut g, 1.1, at(0.1)), 0.99));
        // Read: it grows a step, and holds there while the count cannot read the new grid.
        let grew_from = g.period_ms;
        assert!(same(step(&mut g, 1.1, at(1.0)), 1.03));
        assert!(same(step(&mut g, 1.1, at(1.4)), 1.0), "held, late");
        assert!(same(step(&mut g, 1.0, at(1.8)), 1.0), "held, on time");
        // Read again, on time: it shrinks, no lower than GRID_PROBE above the period it grew
        // from; within GRID_COUNT_BEHIND (5% by the count) is on time.
        assert!(same(step(&mut g, 1.0, at(2.1)), 0.99));
        assert!(step(&mut g, 1.05, at(2.2)) < 1.0);
        for k in 0..10 {
            step(&mut g, 1.0, at(2.3 + 0.01 * f64::from(k)));
        }
        assert!(same(g.period_ms, grew_from * 1.01), "{}", g.period_ms);
        // A job counted late round after round (a count biased long, or a lie) grows it one
        // step a history, to GRID_MAX_GROWTH times the period it was drawn with at most.
        let mut steps = 0;
        for k in 0..40 {
            if step(&mut g, 1.5, at(3.0 + f64::from(k) * 0.5)) > 1.0 {
                steps += 1;
            }
        }
        assert!(steps <= 20, "{steps} steps in 20 histories");
        assert!(
            same(g.period_ms, drawn * GRID_MAX_GROWTH),
            "{}",
            g.period_ms
        );
        // A growth by the latest periods restarts the wait, and does not hold: the count is
        // not read in the history after it.
        let mut g = Grid::draw(&jobs, 1000.0, 2000.0).unwrap();
        let late = |q: f64| {
            let mut j = counted(q, 1.0);
            j[0].latest_period_ms = Some(q * 1.1);
            j
        };
        for k in 0..3 {
            let q = g.period_ms;
            g.follow(&late(q), at(1.0) + f64::from(k));
        }
        let q = g.period_ms;
        assert!(same(q, drawn * 1.03), "grew by the latest periods: {q}");
        assert!(
            same(step(&mut g, 1.1, at(1.5)), 0.99),
            "count not read, no hold"
        );
    }

    #[test]
    fn a_reading_of_two_iterations_is_taken_at_its_fundamental() {
        let jobs = [
            ("h1", "a1", job(1000.0, 290.0, 0.4, 1.18e6)),
            ("h2", "a2", job(1010.0, 290.0, 0.4, 1.18e6)),
        ];
        let g = Grid::draw(&jobs, 100.0, 2000.0).unwrap();
        let mut two = job(0.0, 549.0, 0.44, 2.2e6);
        two.latest_period_ms = Some(560.0);
        let read = g.fundamentals(&[job(0.0, 280.0, 0.4, 1.15e6), two]);
        assert_eq!(read[0], job(0.0, 280.0, 0.4, 1.15e6), "as read");
        assert!((read[1].period_ms - 274.5).abs() < 1e-9, "{:?}", read[1]);
        assert!((read[1].bytes_per_period - 1.1e6).abs() < 1e-3);
        assert_eq!(read[1].latest_period_ms, Some(280.0));
        assert_eq!(read[1].duty, 0.44);
        assert!(g.holds_for(&read));
        // The grid's period: 290 ms less its arc's stretch (116 - 94.4 ms), plus GRID_SLACK.
        let q = g.period_ms;
        assert!((q - 268.4 * 1.03).abs() < 0.1, "{q}");
        // Bytes 1.5, 2.5 and 3.4 times the drawn ones, or more than 4 times; twice the bytes
        // at one period (a job whose work doubled); k times the bytes at a period more than
        // FUNDAMENTAL_TOLERANCE off k periods: as read (another job).
        for (p, b) in [
            (2.0 * q, 1.77e6),
            (2.0 * q, 2.95e6),
            (3.0 * q, 4.01e6),
            (5.0 * q, 5.9e6),
            (q, 2.36e6),
            (2.25 * q, 2.36e6),
        ] {
            let odd = job(0.0, p, 0.4, b);
            assert_eq!(g.fundamentals(&[odd, odd])[1], odd, "{p} ms, {b} B");
        }
        let three = job(0.0, 3.0 * q, 0.4, 3.0 * 1.18e6);
        assert!((g.fundamentals(&[three, three])[1].period_ms - q).abs() < 1e-9);
        // Fewer readings than jobs, or a zero: no panic, as read.
        assert_eq!(g.fundamentals(&[two]).len(), 1);
        let zero = job(0.0, 290.0, 0.0, 0.0);
        assert_eq!(g.fundamentals(&[zero, zero]), vec![zero, zero]);
    }

    #[test]
    fn jobs_that_do_not_share_a_period_or_do_not_fit_get_no_grid() {
        let two = [
            ("h1", "a", job(0.0, 200.0, 0.2, 5e6)),
            ("h2", "b", job(0.0, 300.0, 0.2, 5e6)),
        ];
        assert_eq!(Grid::draw(&two, 1000.0, 0.0), None);
        let full = [
            ("h1", "a", job(0.0, 100.0, 0.7, 8.75e6)),
            ("h2", "b", job(0.0, 100.0, 0.7, 8.75e6)),
        ];
        assert_eq!(
            Grid::draw(&full, 1000.0, 0.0),
            None,
            "140 ms of arcs in 100 ms"
        );
        assert_eq!(Grid::draw(&[], 1000.0, 0.0), None, "no jobs");
        // A period a reader would refuse once grown, and a start in the future.
        let long = [
            ("h1", "a", job(0.0, 590_000.0, 0.1, 5e6)),
            ("h2", "b", job(0.0, 590_000.0, 0.1, 5e6)),
        ];
        assert_eq!(Grid::draw(&long, 1000.0, 0.0), None);
        let ahead = [
            ("h1", "a", job(99_999_999_999_000.0, 308.0, 0.5, 11.75e6)),
            ("h2", "b", job(1010.0, 308.0, 0.5, 11.75e6)),
        ];
        let g = Grid::draw(&ahead, 1000.0, 5000.0).unwrap();
        assert!(g
            .arcs()
            .iter()
            .all(|a| a.last_start_unix_ms <= 5000.0 + g.period_ms));
    }
}
