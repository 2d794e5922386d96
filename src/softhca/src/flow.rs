//! What the link and its schedulers move: a flow, one QP's packets in one direction.

/// A direction of a QP's traffic: its requests, or the responses to its READs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Request packets (WRITE, SEND data; READ requests), sent by the QP's port.
    Request,
    /// READ response packets, sent by the remote QP's port back to the QP.
    Response,
}

/// A flow waiting for the wire: a QP's requests or READ responses.
pub type Flow = (u32, Dir);
