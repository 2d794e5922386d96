//! resexd's local API: JSON lines over a Unix socket (mode 0600). One definition of every
//! message, used by the daemon (server side), `resex top`, `resex status` and `resex cap`
//! (client side): nobody writes the JSON by hand.
//!
//! - [`request`]: [`Request`] (`status`, `subscribe`, `pin`) and the answers to `pin`
//!   ([`PinAnswer`]) and to errors ([`ErrorAnswer`]).
//! - [`snapshot`]: [`Snapshot`], what `status` and `subscribe` answer.
//! - [`client`]: [`ApiClient`], the client end.

pub mod client;
pub mod request;
pub mod snapshot;

pub use client::{ApiClient, ApiError};
pub use request::{BadRequest, ErrorAnswer, PinAnswer, Request};
pub use resex_common::VmId;
pub use snapshot::{HostSnap, LateQp, PeriodFound, PeriodSnap, Snapshot, VmSnap};
