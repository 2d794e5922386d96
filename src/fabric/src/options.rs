//! A run's options that are not the scenario's, and the bounds on what a run keeps.

/// The most values a run records (per-VM traffic, recorded links): 256 MiB of f64.
pub const MAX_CELLS: usize = 32 << 20;

/// The most iterations kept per job (later ones are counted in the means' place: the run
/// stops recording them).
pub const MAX_ITERS: usize = 1 << 20;

/// Options of a run that are not the scenario's.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Virtual seconds (default: the scenario's).
    pub duration_s: Option<f64>,
    /// Record every VM's bytes per interval.
    pub traffic: bool,
    /// The interval of those counts, ns (the host core's 1 ms).
    pub interval_ns: u64,
    /// Bucket of the recorded links' utilisation, ns.
    pub bucket_ns: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            duration_s: None,
            traffic: false,
            interval_ns: 1_000_000,
            bucket_ns: 1_000_000,
        }
    }
}
