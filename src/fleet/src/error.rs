//! Why the fleet cannot be reached or used.

/// A fleet failure.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// This build has no etcd client.
    #[error(
        "fleet mode needs the etcd client, not in this build: rebuild with `--features fleet` \
         (Debian: apt-get install protobuf-compiler; run etcd with apt-get install etcd-server)"
    )]
    NotBuilt,
    /// etcd did not answer.
    #[error("etcd at {endpoints} is not reachable: {reason} (is etcd running? `etcd --listen-client-urls ...`, Debian package etcd-server)")]
    Unreachable {
        /// The endpoints tried.
        endpoints: String,
        /// What the client said.
        reason: String,
    },
    /// etcd answered with an error.
    #[error("etcd: {0}")]
    Etcd(String),
    /// A value in etcd that is not what resex writes (another tool's key, a hostile writer).
    #[error("{key}: {reason}")]
    BadValue {
        /// The key.
        key: String,
        /// Why it was refused.
        reason: String,
    },
    /// A setting that cannot work.
    #[error("fleet: {0}")]
    Invalid(String),
}
