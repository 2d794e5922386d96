//! Any mechanism behind one pair of types, for programs that choose one at run time (BenchEx,
//! [`super::pair`]): a receiver's endpoint and a sender's address are one serialisable type
//! each, so a bootstrap exchange (as perftest's exchange of QP numbers) carries whichever
//! mechanism the receiving side chose, and a mismatch is one clear error.

use super::status_byte::{Config, SbSender, StatusByteReceiver};
use super::{cpwr, hipower, window, BlockReceiver, BlockSender, Kind};
use crate::provider::{Provider, QpAddr};
use crate::{SenderKind, ShimError, TransportError};
use serde::{Deserialize, Serialize};

/// Options beyond the sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The sliding window's ACKs on a poller of their own (the paper's ACK thread): the
    /// sender's `try_send` then leaves them to [`BlockSender::poll`]. Without it `try_send`
    /// reads them itself.
    pub ack_thread: bool,
    /// HiPower's refill threshold, percent of C.
    pub hipower_threshold_pct: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            ack_thread: true,
            hipower_threshold_pct: hipower::THRESHOLD_PCT,
        }
    }
}

/// What a sender needs of a receiver, of any mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AnyEndpoint {
    /// A status-byte receiver.
    StatusByte(super::status_byte::Endpoint),
    /// A sliding-window receiver.
    SlidingWindow(window::Endpoint),
    /// A CPWR responder.
    Cpwr(cpwr::Endpoint),
    /// A HiPower responder.
    Hipower(hipower::Endpoint),
}

impl AnyEndpoint {
    /// The receiver's mechanism.
    pub fn kind(&self) -> Kind {
        match self {
            Self::StatusByte(_) => Kind::StatusByte,
            Self::SlidingWindow(_) => Kind::SlidingWindow,
            Self::Cpwr(_) => Kind::Cpwr,
            Self::Hipower(_) => Kind::Hipower,
        }
    }
}

/// What a receiver needs of its sender: its QP, or (HiPower, whose responder READs the
/// requester's bitmap) the requester's endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SenderAddr {
    /// The sender's QP (status-byte, sliding window, CPWR).
    Qp(QpAddr),
    /// A HiPower requester.
    Hipower(hipower::Endpoint),
}

enum Inner {
    StatusByte(Box<StatusByteReceiver>),
    SlidingWindow(Box<window::WindowReceiver>),
    Cpwr(Box<cpwr::CpwrReceiver>),
    Hipower(Box<hipower::HpReceiver>),
}

/// A receiver created and waiting for its sender ([`Self::accept`]).
pub struct PendingReceiver(Inner);

impl std::fmt::Debug for PendingReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingReceiver({})", self.endpoint().kind())
    }
}

impl PendingReceiver {
    /// Allocates a `kind` receiver's buffers and QP on `p`.
    pub fn new(kind: Kind, p: &dyn Provider, cfg: &Config) -> Result<Self, ShimError> {
        Ok(Self(match kind {
            Kind::StatusByte => Inner::StatusByte(Box::new(StatusByteReceiver::new(p, cfg)?)),
            Kind::SlidingWindow => {
                Inner::SlidingWindow(Box::new(window::WindowReceiver::new(p, cfg)?))
            }
            Kind::Cpwr => Inner::Cpwr(Box::new(cpwr::CpwrReceiver::new(p, cfg)?)),
            Kind::Hipower => Inner::Hipower(Box::new(hipower::HpReceiver::new(p, cfg)?)),
        }))
    }

    /// What its sender needs.
    pub fn endpoint(&self) -> AnyEndpoint {
        match &self.0 {
            Inner::StatusByte(r) => AnyEndpoint::StatusByte(r.endpoint()),
            Inner::SlidingWindow(r) => AnyEndpoint::SlidingWindow(r.endpoint()),
            Inner::Cpwr(r) => AnyEndpoint::Cpwr(r.endpoint()),
            Inner::Hipower(r) => AnyEndpoint::Hipower(r.endpoint()),
        }
    }

    /// Connects to the sender at `sender`; an address of another mechanism is an error.
    pub fn accept(self, sender: SenderAddr) -> Result<Box<dyn BlockReceiver>, ShimError> {
        Ok(match (self.0, sender) {
            (Inner::StatusByte(mut r), SenderAddr::Qp(q)) => {
                r.accept(q)?;
                r
            }
            (Inner::SlidingWindow(mut r), SenderAddr::Qp(q)) => {
                r.accept(q)?;
                r
            }
            (Inner::Cpwr(mut r), SenderAddr::Qp(q)) => {
                r.accept(q)?;
                r
            }
            (Inner::Hipower(mut r), SenderAddr::Hipower(e)) => {
                r.accept(e)?;
                r
            }
            (inner, sender) => {
                let receiver = PendingReceiver(inner).endpoint().kind();
                let sender = match sender {
                    SenderAddr::Qp(_) => SenderKind::Qp,
                    SenderAddr::Hipower(_) => SenderKind::Hipower,
                };
                return Err(TransportError::Mismatch { receiver, sender }.into());
            }
        })
    }
}

/// Creates a sender of the receiver's mechanism on `p` and connects it to `remote`; returns it
/// and the address its receiver must [`PendingReceiver::accept`].
pub fn connect_sender(
    p: &dyn Provider,
    cfg: &Config,
    remote: AnyEndpoint,
    opts: Options,
) -> Result<(Box<dyn BlockSender>, SenderAddr), ShimError> {
    Ok(match remote {
        AnyEndpoint::StatusByte(e) => {
            let tx = SbSender::connect(p, cfg, e)?;
            let addr = SenderAddr::Qp(tx.qp());
            (Box::new(tx), addr)
        }
        AnyEndpoint::SlidingWindow(e) => {
            let tx = window::WindowSender::connect(p, cfg, e, opts.ack_thread)?;
            let addr = SenderAddr::Qp(tx.qp());
            (Box::new(tx), addr)
        }
        AnyEndpoint::Cpwr(e) => {
            let tx = cpwr::CpwrSender::connect(p, cfg, e)?;
            let addr = SenderAddr::Qp(tx.qp());
            (Box::new(tx), addr)
        }
        AnyEndpoint::Hipower(e) => {
            let tx = hipower::HpSender::connect(p, cfg, e, Some(opts.hipower_threshold_pct))?;
            let addr = SenderAddr::Hipower(tx.endpoint());
            (Box::new(tx), addr)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::RemoteAddr;

    fn remote(addr: u64) -> RemoteAddr {
        RemoteAddr { addr, rkey: 7 }
    }

    #[test]
    fn endpoints_and_addresses_cross_the_wire_with_their_mechanism() {
        let qp = QpAddr::default();
        let eps = [
            AnyEndpoint::StatusByte(crate::transport::status_byte::Endpoint {
                qp,
                blocks: remote(4096),
                status: remote(8192),
                n: 3,
                block_size: 1024,
            }),
            AnyEndpoint::SlidingWindow(window::Endpoint {
                qp,
                ring: remote(4096),
                n: 3,
                block_size: 1024,
            }),
            AnyEndpoint::Cpwr(cpwr::Endpoint {
                qp,
                pool: remote(4096),
                n: 3,
                block_size: 1024,
            }),
            AnyEndpoint::Hipower(hipower::Endpoint {
                qp,
                pool: remote(4096),
                bitmap0: remote(1),
                end: remote(2),
                n: 16,
                block_size: 1024,
            }),
        ];
        for (e, kind) in eps.iter().zip(Kind::ALL) {
            assert_eq!(e.kind(), kind);
            let json = serde_json::to_string(e).unwrap();
            assert!(json.contains(&format!("\"kind\":\"{kind}\"")), "{json}");
            assert_eq!(serde_json::from_str::<AnyEndpoint>(&json).unwrap(), *e);
        }
        let a = SenderAddr::Qp(qp);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<SenderAddr>(&json).unwrap(), a);
        // A peer's unknown mechanism is an error, not a guess.
        assert!(serde_json::from_str::<AnyEndpoint>(r#"{"kind":"tcp"}"#).is_err());
    }

    #[test]
    fn kinds_parse_by_name_and_others_are_refused() {
        for k in Kind::ALL {
            assert_eq!(k.name().parse::<Kind>().unwrap(), k);
        }
        let e = "tcp".parse::<Kind>().unwrap_err().to_string();
        assert!(
            e.contains("status_byte, sliding_window, cpwr or hipower"),
            "{e}"
        );
    }
}
