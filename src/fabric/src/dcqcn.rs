//! A DCQCN-like rate controller per flow (Zhu et al., SIGCOMM '15), as the reaction point
//! runs it: on a congestion notification (CNP) the target rate becomes the current rate and the
//! current rate is cut by `alpha / 2`; `alpha` rises on each CNP and decays every `alpha_us`
//! without one; every `T` without a CNP the rate recovers towards the target (fast recovery,
//! `fast_recovery` times) and then the target grows by `R_AI` (additive increase). The
//! byte-counter trigger and hyper increase are left out: at these rates the timer leads.
//!
//! The paper's adaptive unfairness replaces `R_AI` with `R_AI (1 + progress)`, progress the
//! fraction of the current communication phase the flow has sent ([`Dcqcn::advance`]'s
//! `progress`).

use serde::{Deserialize, Serialize};

/// `[cc.dcqcn]`: the controller's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcqcnParams {
    /// Rate-increase period `T`, µs (the paper's testbed: 125).
    #[serde(default = "DcqcnParams::t")]
    pub t_us: f64,
    /// Additive increase `R_AI`, Mb/s (default 400: the DCQCN paper's 40 Mb/s was for 40 Gb/s
    /// with its byte counter also triggering increases; this model has the timer only).
    #[serde(default = "DcqcnParams::rai")]
    pub rai_mbps: f64,
    /// `alpha`'s gain `g`.
    #[serde(default = "DcqcnParams::g")]
    pub g: f64,
    /// `alpha` decays every this many µs without a CNP.
    #[serde(default = "DcqcnParams::alpha_us")]
    pub alpha_us: f64,
    /// At most one CNP per flow per this many µs (the notification point's pacing).
    #[serde(default = "DcqcnParams::cnp_us")]
    pub cnp_us: f64,
    /// Fast-recovery steps before additive increase.
    #[serde(default = "DcqcnParams::fast_recovery")]
    pub fast_recovery: u32,
    /// The rate never drops below this, Mb/s.
    #[serde(default = "DcqcnParams::min_rate")]
    pub min_rate_mbps: f64,
    /// The adaptive scheme's additive increase is `R_AI (1 + gain * progress)` (the paper:
    /// gain 1).
    #[serde(default = "DcqcnParams::gain")]
    pub adaptive_gain: f64,
}

impl DcqcnParams {
    fn t() -> f64 {
        125.0
    }
    fn rai() -> f64 {
        400.0
    }
    fn g() -> f64 {
        1.0 / 256.0
    }
    fn alpha_us() -> f64 {
        55.0
    }
    fn cnp_us() -> f64 {
        50.0
    }
    fn fast_recovery() -> u32 {
        5
    }
    fn min_rate() -> f64 {
        100.0
    }
    fn gain() -> f64 {
        1.0
    }

    /// Refuses what cannot work (zero or huge periods, negative rates, `g` outside (0, 1]).
    pub fn check(&self) -> Result<(), DcqcnError> {
        let us = |x: f64| x.is_finite() && (0.5..=1e6).contains(&x);
        if !(us(self.t_us) && us(self.alpha_us) && us(self.cnp_us)) {
            return Err(DcqcnError::Periods {
                t_us: self.t_us,
                alpha_us: self.alpha_us,
                cnp_us: self.cnp_us,
            });
        }
        if !(self.g > 0.0 && self.g <= 1.0) {
            return Err(DcqcnError::G { g: self.g });
        }
        let mbps = |x: f64| x.is_finite() && (0.0..=1e8).contains(&x);
        if !(mbps(self.rai_mbps) && mbps(self.min_rate_mbps)) || self.fast_recovery > 1000 {
            return Err(DcqcnError::Rates {
                rai_mbps: self.rai_mbps,
                min_rate_mbps: self.min_rate_mbps,
                fast_recovery: self.fast_recovery,
            });
        }
        if !(self.adaptive_gain.is_finite() && (0.0..=1e4).contains(&self.adaptive_gain)) {
            return Err(DcqcnError::AdaptiveGain {
                adaptive_gain: self.adaptive_gain,
            });
        }
        Ok(())
    }
}

/// DCQCN parameters that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum DcqcnError {
    /// A period (`t_us`, `alpha_us`, `cnp_us`) outside 0.5..=1e6 µs.
    #[error("dcqcn: t_us {t_us}, alpha_us {alpha_us}, cnp_us {cnp_us} must be 0.5..1e6 µs")]
    Periods {
        /// `T`, µs.
        t_us: f64,
        /// `alpha`'s decay period, µs.
        alpha_us: f64,
        /// The CNP pacing, µs.
        cnp_us: f64,
    },
    /// `g` outside (0, 1].
    #[error("dcqcn: g {g} must be in (0, 1]")]
    G {
        /// The gain given.
        g: f64,
    },
    /// A rate outside 0..=1e8 Mb/s, or more than 1000 fast-recovery steps.
    #[error("dcqcn: rai_mbps and min_rate_mbps must be 0..1e8, fast_recovery <= 1000")]
    Rates {
        /// `R_AI`, Mb/s.
        rai_mbps: f64,
        /// The floor rate, Mb/s.
        min_rate_mbps: f64,
        /// Fast-recovery steps.
        fast_recovery: u32,
    },
    /// `adaptive_gain` outside 0..=1e4.
    #[error("dcqcn: adaptive_gain {adaptive_gain} must be 0..=1e4")]
    AdaptiveGain {
        /// The gain given.
        adaptive_gain: f64,
    },
}

impl Default for DcqcnParams {
    fn default() -> Self {
        Self {
            t_us: Self::t(),
            rai_mbps: Self::rai(),
            g: Self::g(),
            alpha_us: Self::alpha_us(),
            cnp_us: Self::cnp_us(),
            fast_recovery: Self::fast_recovery(),
            min_rate_mbps: Self::min_rate(),
            adaptive_gain: Self::gain(),
        }
    }
}

/// One flow's controller, with its own `T` (the paper's unfairness sets it per job).
#[derive(Debug, Clone, PartialEq)]
pub struct Dcqcn {
    /// Current rate, bytes/s.
    pub rc: f64,
    /// Target rate, bytes/s.
    pub rt: f64,
    /// The congestion estimate.
    pub alpha: f64,
    /// Increase events since the last CNP.
    pub stage: u32,
    /// CNPs received.
    pub cnps: u64,
    line: f64,
    min: f64,
    t_ns: u64,
    alpha_ns: u64,
    cnp_ns: u64,
    next_inc: u64,
    next_alpha: u64,
    next_cnp: u64,
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn ns(us: f64) -> u64 {
    (us * 1e3).round().max(1.0) as u64
}

impl Dcqcn {
    /// A flow starting at line rate (`line`, bytes/s) at `now`, with period `t_us`.
    #[must_use]
    pub fn new(p: &DcqcnParams, t_us: f64, line: f64, now: u64) -> Self {
        let t_ns = ns(t_us);
        Self {
            rc: line,
            rt: line,
            alpha: 1.0,
            stage: 0,
            cnps: 0,
            line,
            min: (p.min_rate_mbps * 1e6 / 8.0).min(line),
            t_ns,
            alpha_ns: ns(p.alpha_us),
            cnp_ns: ns(p.cnp_us),
            next_inc: now + t_ns,
            next_alpha: now + ns(p.alpha_us),
            next_cnp: now,
        }
    }

    /// May the notification point send this flow a CNP at `now`?
    #[must_use]
    pub fn can_notify(&self, now: u64) -> bool {
        now >= self.next_cnp
    }

    /// A CNP arrives at `now`.
    pub fn on_cnp(&mut self, p: &DcqcnParams, now: u64) {
        self.rt = self.rc;
        self.rc = (self.rc * (1.0 - self.alpha / 2.0)).max(self.min);
        self.alpha = (1.0 - p.g) * self.alpha + p.g;
        self.stage = 0;
        self.cnps += 1;
        self.next_inc = now + self.t_ns;
        self.next_alpha = now + self.alpha_ns;
        self.next_cnp = now + self.cnp_ns;
    }

    /// Runs the timers up to `now`: `alpha` decays, and each `T` the rate recovers or grows by
    /// `R_AI (1 + progress)` (`progress` 0 outside the adaptive scheme). Bounded: once the
    /// rate is back at line rate the remaining periods are skipped in one go.
    pub fn advance(&mut self, p: &DcqcnParams, now: u64, progress: f64) {
        if now >= self.next_alpha {
            // Every decay period since the last, at once (a compute phase may hold millions).
            let k = (now - self.next_alpha) / self.alpha_ns + 1;
            #[allow(clippy::cast_precision_loss)]
            let f = (1.0 - p.g).powf(k as f64);
            self.alpha *= f;
            if self.alpha < 1e-9 {
                self.alpha = 0.0;
            }
            self.next_alpha += k * self.alpha_ns;
        }
        let rai = p.rai_mbps * 1e6 / 8.0 * (1.0 + p.adaptive_gain * progress.clamp(0.0, 1.0));
        // Increase events one by one through fast recovery and 64 more (by then the rate has
        // closed on its target to 2^-64); any further ones in one go.
        let mut budget = p.fast_recovery.saturating_add(64);
        while now >= self.next_inc {
            if budget == 0 {
                let m = (now - self.next_inc) / self.t_ns + 1;
                #[allow(clippy::cast_precision_loss)]
                let grown = self.rt + rai * m as f64;
                self.rt = grown.min(self.line);
                self.rc = self.rt;
                self.stage = self
                    .stage
                    .saturating_add(u32::try_from(m).unwrap_or(u32::MAX));
                self.next_inc += m * self.t_ns;
                break;
            }
            budget -= 1;
            self.stage = self.stage.saturating_add(1);
            if self.stage > p.fast_recovery {
                self.rt = (self.rt + rai).min(self.line);
            }
            self.rc = ((self.rt + self.rc) / 2.0).min(self.line);
            self.next_inc += self.t_ns;
            if self.rc >= self.line * (1.0 - 1e-12) && self.rt >= self.line {
                self.rc = self.line;
                if now >= self.next_inc {
                    let behind = (now - self.next_inc) / self.t_ns + 1;
                    self.next_inc += behind * self.t_ns;
                }
            }
        }
    }

    /// Line rate, bytes/s.
    #[must_use]
    pub fn line(&self) -> f64 {
        self.line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_then_recover_then_grow() {
        let p = DcqcnParams::default();
        let line = 50e9 / 8.0;
        let mut d = Dcqcn::new(&p, 125.0, line, 0);
        d.on_cnp(&p, 0);
        // alpha 1: the rate halves.
        assert!((d.rc - line / 2.0).abs() < 1.0);
        assert_eq!(d.rt, line);
        // Five fast-recovery steps close 31/32 of the gap to the target.
        d.advance(&p, 5 * 125_000, 0.0);
        assert!((d.rc - (line - line / 64.0)).abs() < 1.0, "{}", d.rc);
        // Then additive increase, capped at line rate.
        d.advance(&p, 1_000_000_000, 0.0);
        assert_eq!(d.rc, line);
        assert!(d.alpha < 1e-6);
    }

    #[test]
    fn cnps_are_paced_and_progress_speeds_increase() {
        let p = DcqcnParams::default();
        let line = 50e9 / 8.0;
        let mut a = Dcqcn::new(&p, 125.0, line, 0);
        assert!(a.can_notify(0));
        a.on_cnp(&p, 0);
        assert!(!a.can_notify(49_999));
        assert!(a.can_notify(50_000));
        for _ in 0..20 {
            a.on_cnp(&p, 0);
        }
        let mut b = a.clone();
        a.advance(&p, 3_000_000, 0.0);
        b.advance(&p, 3_000_000, 1.0);
        assert!(b.rc > a.rc, "{} vs {}", b.rc, a.rc);
        // A shorter T is more aggressive.
        let mut c = Dcqcn::new(&p, 100.0, line, 0);
        let mut d = Dcqcn::new(&p, 125.0, line, 0);
        for _ in 0..20 {
            c.on_cnp(&p, 0);
            d.on_cnp(&p, 0);
        }
        c.advance(&p, 3_000_000, 0.0);
        d.advance(&p, 3_000_000, 0.0);
        assert!(c.rc > d.rc);
    }

    #[test]
    fn a_long_idle_catches_up_in_bounded_work() {
        // g so small that 1 - g == 1.0, no additive increase: neither shortcut of the old
        // period-by-period loops applied, and a day of idle was 1.7e12 iterations.
        let p = DcqcnParams {
            g: 1e-17,
            rai_mbps: 0.0,
            alpha_us: 0.5,
            t_us: 0.5,
            ..DcqcnParams::default()
        };
        let line = 50e9 / 8.0;
        let mut d = Dcqcn::new(&p, 0.5, line, 0);
        d.on_cnp(&p, 0);
        let day = 86_400 * 1_000_000_000u64;
        d.advance(&p, day, 0.0);
        assert!(d.rc <= line && d.rc > 0.0);
        assert!(d.can_notify(day));
        // The next period is after `day`, on the grid.
        d.advance(&p, day, 0.0);
    }

    #[test]
    fn bad_params_are_refused() {
        let p = DcqcnParams {
            t_us: 0.0,
            ..DcqcnParams::default()
        };
        assert!(matches!(
            p.check(),
            Err(DcqcnError::Periods { t_us, .. }) if t_us == 0.0
        ));
        let p = DcqcnParams {
            g: f64::NAN,
            ..DcqcnParams::default()
        };
        assert!(matches!(p.check(), Err(DcqcnError::G { g }) if g.is_nan()));
        let p = DcqcnParams {
            fast_recovery: 1001,
            ..DcqcnParams::default()
        };
        let e = p.check().unwrap_err();
        assert!(matches!(
            e,
            DcqcnError::Rates {
                fast_recovery: 1001,
                ..
            }
        ));
        assert_eq!(
            e.to_string(),
            "dcqcn: rai_mbps and min_rate_mbps must be 0..1e8, fast_recovery <= 1000"
        );
        assert!(DcqcnParams::default().check().is_ok());
    }
}
