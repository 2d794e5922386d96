//! What wakes a session ([`crate::session`]): a message from the host, or a nudge from the
//! [`crate::gate`].

use resex_proto::channel::HostMsg;

/// What wakes a session: a message from the host (or the stream's end), or a QP that was just
/// created and waits to be registered ([`crate::gate`]).
#[derive(Debug)]
pub enum Event {
    /// What the reader read.
    Host(Result<Option<HostMsg>, resex_proto::channel::LineError>),
    /// Register now if the rings changed.
    Nudge,
}
