//! Closing the gaps inside communication arcs, the detector's second look.
//!
//! resex's monitor counts a WRITE in the interval it was posted. A job whose messages each
//! take longer on the wire than an interval (a slow or shared link, or a rate ceiling) posts
//! in some intervals of its arc and not in the others: its on/off signal is a comb of short
//! runs with gaps of one or a few intervals, and the holes decorrelate the arcs (measured on
//! live resexd traces: best autocorrelation 0.04-0.34 for jobs whose arcs are plain to the
//! eye). When neither estimator finds a period in the signal as counted, the detector looks
//! again with the off runs of at most `g` samples between two on samples filled, for `g` in
//! [`CLOSE_GAPS`] in turn, and keeps the first that is periodic with its arcs whole: at most
//! [`MAX_GAPS_PER_PERIOD`] off runs left per period (a job's think time, and a rare longer
//! hole), and on for at most [`MAX_DUTY`] of the time. Random traffic, whose off runs of every
//! length are many per period, is not turned into arcs. A signal that was periodic as counted
//! is never changed.
//!
//! Work: O(n) per gap length tried, then the estimators' own work.

/// The gap lengths tried, in samples, shortest first.
pub const CLOSE_GAPS: [usize; 4] = [2, 4, 8, 16];

/// The most off runs per period a closed signal may keep.
pub const MAX_GAPS_PER_PERIOD: f64 = 3.0;

/// The fewest periods the history must span for a period found on the second look: filled
/// holes make arcs of random bursts as well, and over a few periods they can happen to repeat
/// (a reviewer found 5-9 in 40 random burst traces of 2 048 samples called periodic).
pub const MIN_PERIODS: f64 = 8.0;

/// The shortest history the second look runs on, samples: over a short one, random bursts
/// whose holes were filled happened to repeat (3-9 in 40 traces of 2 048 samples, confidence
/// 0.51-0.60; none in 40 of 4 096 or 8 192).
pub const MIN_SAMPLES: usize = 4096;

/// The largest share of samples a closed signal may have on.
pub const MAX_DUTY: f64 = 0.95;

/// True when `closed`, periodic with `period` samples, has at most [`MAX_GAPS_PER_PERIOD`]
/// off runs per period.
pub(super) fn whole_arcs(closed: &[bool], period: f64) -> bool {
    let runs = closed
        .iter()
        .enumerate()
        .filter(|&(i, &v)| !v && (i == 0 || closed[i - 1]))
        .count();
    let periods = closed.len() as f64 / period.max(1.0);
    runs as f64 <= MAX_GAPS_PER_PERIOD * periods
}

/// The share of the period the arcs of `on` (periodic with `period` samples) span with their
/// holes filled: the duty of the first closing in [`CLOSE_GAPS`] that leaves whole arcs
/// ([`whole_arcs`], at most [`MAX_DUTY`] on); `None` when no closing changes anything or none
/// leaves whole arcs.
pub(super) fn arc_duty(on: &[bool], period: f64) -> Option<f64> {
    CLOSE_GAPS
        .iter()
        .find_map(|&g| accept(&close(on, g)?, g, period))
}

/// The duty of `closed` (closed with gaps of `g`, periodic with `period` samples) when its arcs
/// are whole: at most [`MAX_DUTY`] on, `g` at most a quarter of what is left off per period
/// (a job's think time is not a hole), at most [`MAX_GAPS_PER_PERIOD`] off runs per period.
pub(super) fn accept(closed: &[bool], g: usize, period: f64) -> Option<f64> {
    let duty = closed.iter().filter(|&&b| b).count() as f64 / closed.len().max(1) as f64;
    let off = (1.0 - duty) * period;
    (duty <= MAX_DUTY && g as f64 <= 0.25 * off && whole_arcs(closed, period)).then_some(duty)
}

/// `on` with every off run of at most `gap` samples that has on samples on both sides
/// turned on; `None` when there is none (nothing would change).
pub(super) fn close(on: &[bool], gap: usize) -> Option<Vec<bool>> {
    let mut out = on.to_vec();
    let mut changed = false;
    let mut last_on: Option<usize> = None;
    for (i, &v) in on.iter().enumerate() {
        if !v {
            continue;
        }
        if let Some(l) = last_on {
            let run = i - l - 1;
            if run > 0 && run <= gap {
                out[l + 1..i].iter_mut().for_each(|s| *s = true);
                changed = true;
            }
        }
        last_on = Some(i);
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(s: &str) -> Vec<bool> {
        s.chars().map(|c| c == '#').collect()
    }

    #[test]
    fn short_inner_gaps_are_filled_and_edges_and_long_gaps_kept() {
        let on = signal("..#.#..#...#....#.");
        assert_eq!(close(&on, 2), Some(signal("..######...#....#.")));
        assert_eq!(close(&on, 3), Some(signal("..##########....#.")));
        assert_eq!(close(&signal("..###....###."), 2), None, "nothing to fill");
        assert_eq!(close(&[], 2), None);
        assert_eq!(close(&signal("#.#"), 0), None, "a gap of 0 fills nothing");
    }

    #[test]
    fn arcs_are_whole_with_few_off_runs_per_period() {
        let two_arcs = signal("####....####....");
        assert!(whole_arcs(&two_arcs, 8.0));
        let combed = signal("#.#.#.#.#...#.#.#.#.#...");
        assert!(!whole_arcs(&combed, 12.0), "five off runs per period");
        assert!(whole_arcs(&[], 8.0));
    }
}
