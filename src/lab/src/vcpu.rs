//! A vCPU under a cap, as credit2 enforces one: each 10 ms period grants `cap% x 10 ms` of run
//! time; a vCPU that has spent it is parked until the next period. Uncapped, it runs whenever
//! it wants (one physical CPU per vCPU: the lab does not model CPU contention between guests).

/// The enforcement period, ns.
pub const PERIOD_NS: u64 = 10_000_000;

/// One vCPU's budget.
#[derive(Debug, Clone)]
pub struct Vcpu {
    cap_pct: Option<f64>,
    period: u64,
    left_ns: i64,
    /// Run time used since the last [`Vcpu::take_used`], ns.
    used_ns: u64,
}

impl Default for Vcpu {
    fn default() -> Self {
        Self::new()
    }
}

impl Vcpu {
    /// An uncapped vCPU.
    pub fn new() -> Self {
        Self {
            cap_pct: None,
            period: 0,
            left_ns: i64::MAX,
            used_ns: 0,
        }
    }

    /// Sets the cap (percent of one CPU; `None`: uncapped). A lower cap bites at once (what is
    /// left of this period shrinks to the new grant); a higher one at the next period.
    pub fn set_cap(&mut self, cap_pct: Option<f64>) {
        self.cap_pct = cap_pct.map(|c| c.clamp(0.0, 100.0));
        self.left_ns = self.left_ns.min(self.grant());
    }

    /// The cap in force.
    pub fn cap(&self) -> Option<f64> {
        self.cap_pct
    }

    #[allow(clippy::cast_possible_truncation)]
    fn grant(&self) -> i64 {
        match self.cap_pct {
            None => i64::MAX,
            Some(c) => (c / 100.0 * PERIOD_NS as f64) as i64,
        }
    }

    /// Whether the vCPU may run at `now_ns` (refilling its budget at each period boundary).
    pub fn can_run(&mut self, now_ns: u64) -> bool {
        let p = now_ns / PERIOD_NS;
        if p != self.period {
            self.period = p;
            self.left_ns = self.grant();
        }
        self.left_ns > 0
    }

    /// Run time left in the current period, ns (`None`: unlimited: uncapped since the period
    /// began; a cap lifted mid-period still limits the rest of that period).
    pub fn left_ns(&self) -> Option<i64> {
        (self.left_ns != i64::MAX).then_some(self.left_ns)
    }

    /// Accounts `ns` of run time.
    pub fn run(&mut self, ns: u64) {
        self.used_ns += ns;
        if self.left_ns != i64::MAX {
            self.left_ns = self
                .left_ns
                .saturating_sub(i64::try_from(ns).unwrap_or(i64::MAX));
        }
    }

    /// Run time since the last call, ns.
    pub fn take_used(&mut self) -> u64 {
        std::mem::take(&mut self.used_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_grants_its_share_of_each_period() {
        let mut v = Vcpu::new();
        v.set_cap(Some(20.0));
        let dt = 1_000;
        let mut ran = 0;
        for step in 0..(3 * PERIOD_NS / dt) {
            if v.can_run(step * dt) {
                v.run(dt);
                ran += dt;
            }
        }
        assert_eq!(ran, 3 * PERIOD_NS / 5, "20% of three periods");
        v.set_cap(None);
        assert!(v.can_run(3 * PERIOD_NS + 5));
        assert_eq!(v.take_used(), 3 * PERIOD_NS / 5);
        assert_eq!(v.take_used(), 0);
    }
}
