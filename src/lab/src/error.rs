//! Why the lab could not run: [`LabError`].

use crate::driver::DriverError;

/// Why the lab could not run.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The shim refused something (the model's own verbs).
    #[error("guest {guest}: {source}")]
    Shim {
        /// Which guest.
        guest: String,
        /// Why.
        source: resex_shim::ShimError,
    },
    /// The host core refused something (a registration, a step).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// A step that is 0 or does not divide the interval.
    #[error("the step ({dt_ns} ns) must divide the interval ({interval_ns} ns)")]
    Step {
        /// The step, ns.
        dt_ns: u64,
        /// The interval, ns.
        interval_ns: u64,
    },
    /// A policy that prices on another interval than the lab's.
    #[error("policy {policy} prices every {policy_ms} ms; the lab's interval is {interval_ns} ns")]
    PolicyInterval {
        /// The policy's name.
        policy: String,
        /// The policy's pricing interval, ms.
        policy_ms: u64,
        /// The lab's interval, ns.
        interval_ns: u64,
    },
    /// A guest whose reply takes more WRITEs than a server posts.
    #[error(
        "guest {guest}: benchex.chunk {chunk} splits the {buffer}-byte reply into more than \
         {max} WRITEs"
    )]
    Chunks {
        /// The guest.
        guest: String,
        /// Its chunk, bytes.
        chunk: u64,
        /// Its reply, bytes.
        buffer: u64,
        /// The most WRITEs per reply.
        max: u64,
    },
    /// A guest that runs a periodic job, which the lab's client model does not.
    #[error(
        "guest {guest}: a periodic job (benchex.think_ms, benchex.burst) runs on the embedded \
         host only; run it with `resex host`, or drop those keys for the lab"
    )]
    Periodic {
        /// The guest.
        guest: String,
    },
    /// A guest's latency mailbox could not be placed.
    #[error("guest {guest}: {source}")]
    Mailbox {
        /// The guest.
        guest: String,
        /// Why.
        source: resex_shim::mailbox::MailboxError,
    },
    /// A policy file that cannot be read.
    #[error("{path}: {source}")]
    PolicyFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A policy file that is not a usable policy.
    #[error("{path}: {source}")]
    Policy {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: resex_pricing::ConfigError,
    },
}
