//! The checks of one guest of a scenario ([`GuestSpec`]), first problem first.

use crate::{GuestProblem, GuestSpec};

/// A problem: `Some(problem())` when `ok` is false.
pub(crate) fn unless<T>(ok: bool, problem: impl FnOnce() -> T) -> Option<T> {
    (!ok).then(problem)
}

impl GuestSpec {
    /// What is wrong with this guest besides its name (the first problem), if anything.
    pub(crate) fn problem(&self) -> Option<GuestProblem> {
        let g = self;
        let max_pct = 100.0 * f64::from(g.vcpus);
        unless((1..=64).contains(&g.vcpus), || GuestProblem::Vcpus(g.vcpus))
            .or_else(|| {
                let c = g.cap?;
                unless(c.is_finite() && c > 0.0 && c <= max_pct, || {
                    GuestProblem::Cap {
                        cap: c,
                        max: 100 * g.vcpus,
                    }
                })
            })
            .or_else(|| g.workload_problem())
            .or_else(|| g.periodic_problem())
            .or_else(|| g.report_problem())
            .or_else(|| g.turns_problem())
            .or_else(|| g.grant_problem())
    }

    /// RAM for the workload, its buffer, rate and clients, and its start.
    fn workload_problem(&self) -> Option<GuestProblem> {
        let (g, w) = (self, &self.benchex);
        let min_ram = (8 << 20) + 4 * (w.buffer.0 + 4096) * u64::from(w.clients.max(1));
        unless(g.ram.0 >= min_ram && g.ram.0 <= (16 << 30), || {
            GuestProblem::Ram {
                ram: g.ram.0,
                need: min_ram,
            }
        })
        .or_else(|| {
            unless(w.buffer.0 >= 64 && w.buffer.0 <= (64 << 20), || {
                GuestProblem::Buffer(w.buffer.0)
            })
        })
        .or_else(|| {
            unless(w.rate.is_finite() && w.rate >= 0.0 && w.rate <= 1e6, || {
                GuestProblem::Rate(w.rate)
            })
        })
        .or_else(|| {
            unless((1..=64).contains(&w.clients), || {
                GuestProblem::Clients(w.clients)
            })
        })
        .or_else(|| {
            unless(g.start_s.is_finite() && g.start_s >= 0.0, || {
                GuestProblem::Start(g.start_s)
            })
        })
    }

    /// A periodic job's pause and burst, closed loop only.
    fn periodic_problem(&self) -> Option<GuestProblem> {
        let w = &self.benchex;
        unless(
            w.think_ms == 0.0
                || (w.think_ms.is_finite() && (0.001..=60_000.0).contains(&w.think_ms)),
            || GuestProblem::Think(w.think_ms),
        )
        .or_else(|| {
            unless((1..=4096).contains(&w.burst), || {
                GuestProblem::Burst(w.burst)
            })
        })
        .or_else(|| {
            unless(w.think_ms == 0.0 || w.rate == 0.0, || {
                GuestProblem::ThinkOpenLoop(w.rate)
            })
        })
        .or_else(|| {
            unless(w.burst == 1 || w.think_ms > 0.0, || {
                GuestProblem::BurstWithoutThink(w.burst)
            })
        })
    }

    /// The lab's lying reports and the guest's weight.
    fn report_problem(&self) -> Option<GuestProblem> {
        let g = self;
        unless(
            g.report_scale.is_finite() && g.report_scale > 0.0 && g.report_scale <= 1000.0,
            || GuestProblem::ReportScale(g.report_scale),
        )
        .or_else(|| {
            unless(
                g.report_scale_from_s.is_finite() && g.report_scale_from_s >= 0.0,
                || GuestProblem::ReportScaleFrom(g.report_scale_from_s),
            )
        })
        .or_else(|| {
            unless(g.weight.is_finite() && g.weight > 0.0, || {
                GuestProblem::Weight(g.weight)
            })
        })
    }

    /// The workload the guest turns to, if it turns.
    fn turns_problem(&self) -> Option<GuestProblem> {
        let t = self.turns.as_ref()?;
        let need = (8 << 20) + 4 * (t.buffer.0 + 4096) * u64::from(self.benchex.clients.max(1));
        unless(t.at_s.is_finite() && t.at_s >= 0.0, || {
            GuestProblem::TurnsAt(t.at_s)
        })
        .or_else(|| {
            unless(t.buffer.0 >= 64 && t.buffer.0 <= (64 << 20), || {
                GuestProblem::TurnsBuffer(t.buffer.0)
            })
        })
        .or_else(|| {
            unless(t.rate.is_finite() && t.rate >= 0.0 && t.rate <= 1e6, || {
                GuestProblem::TurnsRate(t.rate)
            })
        })
        .or_else(|| {
            unless(self.ram.0 >= need, || GuestProblem::TurnsRam {
                ram: self.ram.0,
                need,
            })
        })
    }

    /// What the admin grants it: its CPU floor, entitlement and transmit limit.
    fn grant_problem(&self) -> Option<GuestProblem> {
        let g = self;
        let max_pct = 100.0 * f64::from(g.vcpus);
        g.cpu_floor
            .and_then(|f| {
                unless(f.is_finite() && f > 0.0 && f <= max_pct, || {
                    GuestProblem::CpuFloor {
                        floor: f,
                        max: 100 * g.vcpus,
                    }
                })
            })
            .or_else(|| {
                unless(g.entitlement.is_none_or(|e| e.0 != 0), || {
                    GuestProblem::Entitlement
                })
            })
            .or_else(|| {
                let (s, m) = (g.tx_share?, g.tx_max?);
                unless(s.0 <= m.0, || GuestProblem::TxShare {
                    share: s.0,
                    max: m.0,
                })
            })
    }
}
