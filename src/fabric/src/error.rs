//! Why a fabric cannot be built or run.

use crate::dcqcn::DcqcnError;

/// A fabric scenario that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// The TOML does not parse or has unknown fields.
    #[error("fabric scenario: {0}")]
    Parse(#[from] toml::de::Error),
    /// A name used but never defined (a host, a link).
    #[error("{what} {name:?} is not defined (known: {known})")]
    Unknown {
        /// What kind of thing.
        what: &'static str,
        /// The name used.
        name: String,
        /// The names defined.
        known: String,
    },
    /// A name defined twice.
    #[error("{what} {name:?} is defined twice")]
    Duplicate {
        /// What kind of thing.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A `[net]` value out of its range.
    #[error(transparent)]
    Net(#[from] NetError),
    /// A `[cc.dcqcn]` value out of its range.
    #[error(transparent)]
    Dcqcn(#[from] DcqcnError),
    /// A job that cannot run.
    #[error("job {job}: {problem}")]
    Job {
        /// The job's name.
        job: String,
        /// What is wrong with it.
        problem: JobError,
    },
    /// A link rate not in (0, 100000] Gb/s.
    #[error("{what} {name}: {gbps} Gb/s is not a rate (0 < rate <= 100000)")]
    Rate {
        /// What kind of thing has the rate (`host`, `tor`, `link`).
        what: &'static str,
        /// Its name.
        name: String,
        /// The rate given, Gb/s.
        gbps: f64,
    },
    /// More of something than the simulator takes.
    #[error(transparent)]
    TooLarge(#[from] Limit),
    /// A run's duration out of its range.
    #[error("duration {seconds} s: must be in (0, {max:e}]")]
    Duration {
        /// The duration asked for, s.
        seconds: f64,
        /// The longest run, s.
        max: f64,
    },
    /// A step out of 0.1..=1000 µs.
    #[error("dt_us {dt_us}: must be 0.1..=1000")]
    Step {
        /// The step given, µs.
        dt_us: f64,
    },
    /// A per-VM interval or a recording bucket of 0 ns.
    #[error("interval and bucket must be > 0 ns")]
    Interval {
        /// The per-VM interval, ns.
        interval_ns: u64,
        /// The recording bucket, ns.
        bucket_ns: u64,
    },
}

/// What is wrong with a job.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobError {
    /// Fewer than two workers.
    #[error("needs two or more workers, has {workers}")]
    TooFewWorkers {
        /// Workers given.
        workers: usize,
    },
    /// `jitter` outside 0..=10 or `start_ms` negative or not finite.
    #[error("jitter 0..=10 and start_ms >= 0, finite")]
    Timing {
        /// The jitter given.
        jitter: f64,
        /// The start given, ms.
        start_ms: f64,
    },
    /// Neither a preset nor both `compute_ms` and `comm_mb`.
    #[error("give a preset or both compute_ms and comm_mb")]
    NoShape,
    /// A compute time or a communication size out of range.
    #[error(
        "compute_ms {compute_ms} and comm_mb {comm_mb} must be finite, compute >= 0, bytes > 0"
    )]
    Shape {
        /// Compute per iteration, ms.
        compute_ms: f64,
        /// Bytes per iteration (after `comm_scale`), MB.
        comm_mb: f64,
    },
    /// The job's own DCQCN parameters (its `t_us`) out of range.
    #[error(transparent)]
    Dcqcn(#[from] DcqcnError),
}

/// A fabric larger than the simulator takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Limit {
    /// More names of a kind than a `u32` counts.
    #[error("too many {what}s")]
    Names {
        /// What kind of thing.
        what: &'static str,
    },
    /// No host, or more than the simulator takes.
    #[error("a fabric needs 1..={max} hosts, this one has {hosts}")]
    Hosts {
        /// Hosts given.
        hosts: usize,
        /// The most hosts.
        max: usize,
    },
    /// A route over more links than the simulator takes.
    #[error("route {from} -> {to}: more than {max} links")]
    Route {
        /// The route's first host.
        from: String,
        /// The route's last host.
        to: String,
        /// The most links on a route.
        max: usize,
    },
    /// More workers in all than the simulator takes.
    #[error("more than {max} workers")]
    Workers {
        /// The most workers.
        max: usize,
    },
    /// A priority above 7.
    #[error("priority classes are 0..=7")]
    Priority {
        /// Classes the jobs' priorities need.
        classes: usize,
    },
    /// Per-VM traffic too large to record.
    #[error("per-VM traffic of {vms} VMs over {intervals} intervals is too large to record")]
    Traffic {
        /// VMs.
        vms: usize,
        /// Intervals of the run.
        intervals: usize,
    },
    /// Recorded links too large to record.
    #[error(
        "recorded links: {buckets} buckets x their jobs is too large to record; record fewer \
         links or run shorter"
    )]
    Recorded {
        /// Buckets of the run.
        buckets: usize,
    },
}

/// `[net]` values that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum NetError {
    /// A threshold or the buffer outside 0..=1000000 KB.
    #[error("[net] {field} = {value}: must be 0..=1000000 KB")]
    Kb {
        /// `kmin_kb`, `kmax_kb` or `buffer_kb`.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// `kmax_kb` not above `kmin_kb`.
    #[error("[net] kmax_kb = {kmax_kb} must be above kmin_kb = {kmin_kb}")]
    Thresholds {
        /// The lower marking threshold, KB.
        kmin_kb: f64,
        /// The upper marking threshold, KB.
        kmax_kb: f64,
    },
    /// A buffer of 0 KB.
    #[error("[net] buffer_kb must be above 0")]
    NoBuffer {
        /// The buffer given, KB.
        buffer_kb: f64,
    },
    /// `pmax` outside [0, 1].
    #[error("[net] pmax = {pmax}: must be 0..=1")]
    Pmax {
        /// The value given.
        pmax: f64,
    },
    /// `mtu` outside 64..=65536 bytes.
    #[error("[net] mtu = {mtu}: must be 64..=65536 bytes")]
    Mtu {
        /// The value given, bytes.
        mtu: f64,
    },
}
