//! BenchEx: the ResEx paper's latency benchmark (section IV), rebuilt on the shim.
//!
//! Clients send timestamped orders over the status-byte transport; the server queues them first
//! come first served, prices each with Black-Scholes, and replies with a buffer of the configured
//! size. Clients record round trips; the server records its own per-order latency (what the
//! reporting VM's agent reports) split into queue, compute, I/O wait and polling time.
//!
//! - [`bs`], Black-Scholes.
//! - [`wire`], orders, replies, the bootstrap handshake.
//! - [`boot`], the bootstrap socket (Unix path or `tcp:HOST:PORT`).
//! - [`clock`], the clock and idle backoff.
//! - [`server`], [`client`]: the two roles, over any shim `Provider`.
//! - [`opts`], the command line's options and running the server (what `resex-agent` uses).
//! - [`cli`], the `benchex` command line; [`local`], what `benchex local` takes and gives (its
//!   runner, on an in-process software HCA, is host-side: `resex_embedded::benchex_local`).
//!
//! This library runs inside guests (`resex-agent` links it): it depends on guest crates only.

pub mod boot;
pub mod bs;
pub mod cli;
pub mod client;
pub mod clock;
pub mod local;
pub mod opts;
pub mod server;
/// Byte sizes as people write them (the scenario format's too: `resex_common::size`).
pub mod size {
    pub use resex_common::size::*;
}
pub mod wire;

use resex_common::LatencySummary;
use resex_shim::ShimError;

/// What can stop a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The transport or device failed.
    #[error(transparent)]
    Shim(#[from] ShimError),
    /// The bootstrap socket failed.
    #[error("bootstrap: {0}")]
    Io(#[from] std::io::Error),
    /// A reply buffer too small for the reply's header.
    #[error("buffer must be at least {min} bytes")]
    Buffer {
        /// The buffer asked for, bytes.
        buffer: u64,
        /// The reply header, bytes.
        min: u64,
    },
    /// A client offering a reply receiver of another transport than the server's.
    #[error("the client offered a {offered} reply receiver to a {server} server")]
    Transport {
        /// The client's transport.
        offered: resex_shim::transport::Kind,
        /// The server's.
        server: resex_shim::transport::Kind,
    },
    /// A link preset softhca does not have.
    #[error("unknown link preset `{name}` (use testbed or 100g)")]
    UnknownLink {
        /// The name given.
        name: String,
    },
    /// Guest memory larger than this machine can address.
    #[error("memory too large ({bytes} bytes)")]
    Memory {
        /// The size asked for, bytes.
        bytes: u64,
    },
    /// A periodic job's settings that cannot work (think, burst, rate).
    #[error(transparent)]
    Periodic(#[from] client::PeriodicError),
    /// A thread of the benchmark panicked.
    #[error("{thread} panicked")]
    Panicked {
        /// Which (`reply thread`, `client`, `server`).
        thread: &'static str,
    },
}

/// Serialises a latency summary with named fields (ns).
pub fn ser_summary<S: serde::Serializer>(s: &LatencySummary, ser: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut st = ser.serialize_struct("LatencySummary", 8)?;
    st.serialize_field("count", &s.count)?;
    st.serialize_field("mean_ns", &s.mean_ns)?;
    st.serialize_field("stddev_ns", &s.stddev_ns)?;
    st.serialize_field("min_ns", &s.min_ns)?;
    st.serialize_field("max_ns", &s.max_ns)?;
    st.serialize_field("p50_ns", &s.p50_ns)?;
    st.serialize_field("p99_ns", &s.p99_ns)?;
    st.serialize_field("p999_ns", &s.p999_ns)?;
    st.end()
}
