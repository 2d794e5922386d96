//! `benchex local`: server and clients in one process on an in-process software HCA, the
//! quickest way to see BenchEx's figures. The run itself is host-side (it needs softhca): the
//! command line is handed a [`LocalRunner`] (`resex_embedded::benchex_local::run`); this
//! library only defines its inputs and result, so the guest side never links the HCA.

use crate::client::{ClientConfig, ClientResult};
use crate::server::{ServerConfig, ServerStats};
use crate::BenchError;
use serde::Serialize;

/// One local run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LocalResult {
    /// The transport mechanism the connections used.
    pub transport: resex_shim::transport::Kind,
    /// The server's counters.
    pub server: ServerStats,
    /// The server's own per-order latency.
    #[serde(serialize_with = "crate::ser_summary")]
    pub server_latency: resex_common::LatencySummary,
    /// Each client's figures.
    pub clients: Vec<ClientResult>,
}

/// Runs a local benchmark: link preset name (`testbed`, `100g`), server and client
/// configurations, clients.
pub type LocalRunner =
    dyn Fn(&str, ServerConfig, ClientConfig, u32) -> Result<LocalResult, BenchError>;
