//! `resex top`: the admin's dashboard for an RDMA host, fed by the daemon's API socket.
//!
//! - [`collect`]: the collection thread: subscribes, forwards snapshots, reconnects.
//! - [`columns`]: the table's columns: header, sort key, cell text, CSV value (one definition).
//! - [`history`]: per-VM time series for the detail pane's charts.
//! - [`app`]: the one app state and its key handling (pure).
//! - [`ui`]: drawing the app state (pure: a function of the state and the frame size).
//! - [`batch`]: `--batch --json|--csv` and `resex status` output.
//! - [`fleet`]: `resex top --fleet`: one row per host of the fleet, a drill into one host.
//! - [`term`]: the terminal loop (raw mode, alternate screen, panic hook restores).

pub mod app;
pub mod batch;
pub mod collect;
pub mod columns;
pub mod fleet;
pub mod grant;
pub mod history;
pub mod late;
pub mod period;
pub mod term;
pub mod ui;

pub use resex_api::{ApiClient, HostSnap, Snapshot, VmSnap};
