//! The checks of one guest of a scenario ([`GuestSpec`]), first problem first.

use crate::GuestSpec;

/// A problem with a number: `Some(text)` when `ok` is false.
pub(crate) fn unless(ok: bool, text: impl FnOnce() -> String) -> Option<String> {
    (!ok).then(text)
}

impl GuestSpec {
    /// What is wrong with this guest besides its name (the first problem), if anything.
    pub(crate) fn problem(&self) -> Option<String> {
        let g = self;
        let max_pct = 100.0 * f64::from(g.vcpus);
        unless((1..=64).contains(&g.vcpus), || {
            format!("vcpus = {} must be 1..=64", g.vcpus)
        })
        .or_else(|| {
            let c = g.cap?;
            unless(c.is_finite() && c > 0.0 && c <= max_pct, || {
                format!("cap = {c} must be in (0, {}] (% of one CPU)", 100 * g.vcpus)
            })
        })
        .or_else(|| g.workload_problem())
        .or_else(|| g.report_problem())
        .or_else(|| g.turns_problem())
        .or_else(|| g.grant_problem())
    }

    /// RAM for the workload, its buffer, rate and clients, and its start.
    fn workload_problem(&self) -> Option<String> {
        let (g, w) = (self, &self.benchex);
        let min_ram = (8 << 20) + 4 * (w.buffer.0 + 4096) * u64::from(w.clients.max(1));
        unless(g.ram.0 >= min_ram && g.ram.0 <= (16 << 30), || {
            format!(
                "ram = {} bytes: this workload needs at least {min_ram} (and at most 16 GiB)",
                g.ram.0
            )
        })
        .or_else(|| {
            unless(w.buffer.0 >= 64 && w.buffer.0 <= (64 << 20), || {
                format!("buffer = {} must be 64 B..64 MiB", w.buffer.0)
            })
        })
        .or_else(|| {
            unless(w.rate.is_finite() && w.rate >= 0.0 && w.rate <= 1e6, || {
                format!("rate = {} must be 0..=1e6 orders/s", w.rate)
            })
        })
        .or_else(|| {
            unless((1..=64).contains(&w.clients), || {
                format!("clients = {} must be 1..=64", w.clients)
            })
        })
        .or_else(|| {
            unless(g.start_s.is_finite() && g.start_s >= 0.0, || {
                format!("start_s = {} must be >= 0", g.start_s)
            })
        })
    }

    /// The lab's lying reports and the guest's weight.
    fn report_problem(&self) -> Option<String> {
        let g = self;
        unless(
            g.report_scale.is_finite() && g.report_scale > 0.0 && g.report_scale <= 1000.0,
            || format!("report_scale = {} must be in (0, 1000]", g.report_scale),
        )
        .or_else(|| {
            unless(
                g.report_scale_from_s.is_finite() && g.report_scale_from_s >= 0.0,
                || {
                    format!(
                        "report_scale_from_s = {} must be >= 0",
                        g.report_scale_from_s
                    )
                },
            )
        })
        .or_else(|| {
            unless(g.weight.is_finite() && g.weight > 0.0, || {
                format!("weight = {} must be > 0", g.weight)
            })
        })
    }

    /// The workload the guest turns to, if it turns.
    fn turns_problem(&self) -> Option<String> {
        let t = self.turns.as_ref()?;
        let need = (8 << 20) + 4 * (t.buffer.0 + 4096) * u64::from(self.benchex.clients.max(1));
        unless(t.at_s.is_finite() && t.at_s >= 0.0, || {
            format!("turns.at_s = {} must be >= 0", t.at_s)
        })
        .or_else(|| {
            unless(t.buffer.0 >= 64 && t.buffer.0 <= (64 << 20), || {
                format!("turns.buffer = {} must be 64 B..64 MiB", t.buffer.0)
            })
        })
        .or_else(|| {
            unless(t.rate.is_finite() && t.rate >= 0.0 && t.rate <= 1e6, || {
                format!("turns.rate = {} must be 0..=1e6 orders/s", t.rate)
            })
        })
        .or_else(|| {
            unless(self.ram.0 >= need, || {
                format!(
                    "ram = {} bytes: the workload it turns to needs at least {need}",
                    self.ram.0
                )
            })
        })
    }

    /// What the admin grants it: its CPU floor, entitlement and transmit limit.
    fn grant_problem(&self) -> Option<String> {
        let g = self;
        let max_pct = 100.0 * f64::from(g.vcpus);
        g.cpu_floor
            .and_then(|f| {
                unless(f.is_finite() && f > 0.0 && f <= max_pct, || {
                    format!(
                        "cpu_floor = {f} must be in (0, {}] (% of one CPU)",
                        100 * g.vcpus
                    )
                })
            })
            .or_else(|| {
                unless(g.entitlement.is_none_or(|e| e.0 != 0), || {
                    "entitlement must be above 0".into()
                })
            })
            .or_else(|| match (g.tx_share, g.tx_max) {
                (Some(s), Some(m)) if s.0 > m.0 => Some(format!(
                    "tx_share = {} bit/s is above tx_max = {} bit/s",
                    s.0, m.0
                )),
                _ => None,
            })
    }
}
