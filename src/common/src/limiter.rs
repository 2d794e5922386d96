//! Rate-limited logging for events a guest can trigger, without reading a clock: the first few
//! occurrences are logged, then only the 2^k-th ones, so a guest cannot flood the host's log
//! (at most ~64 lines for 2^64 events) and an admin still sees that it keeps happening.

/// Decides which occurrences of one kind of event get a log line.
#[derive(Clone, Debug, Default)]
pub struct LogLimiter {
    seen: u64,
}

/// Occurrences always logged before thinning starts.
const BURST: u64 = 8;

impl LogLimiter {
    /// Records one occurrence; returns `Some(n)` (the occurrence number) when it should be logged.
    pub fn hit(&mut self) -> Option<u64> {
        self.seen = self.seen.saturating_add(1);
        (self.seen <= BURST || self.seen.is_power_of_two()).then_some(self.seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_a_burst_then_powers_of_two() {
        let mut l = LogLimiter::default();
        let logged: Vec<u64> = (0..1000).filter_map(|_| l.hit()).collect();
        assert_eq!(
            logged,
            vec![1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512]
        );
    }
}
