//! A connected sender and receiver of any mechanism, for one process that owns both sides (the
//! lab, tests, `benchex local`); across machines each side exchanges its endpoint out of band
//! and connects as each mechanism's module shows.

use super::status_byte::{Config, SbSender, StatusByteReceiver};
use super::{cpwr, hipower, window, BlockReceiver, BlockSender, Kind};
use crate::provider::Provider;
use crate::ShimError;

/// Options beyond the sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The sliding window's ACKs on a poller of their own (the paper's ACK thread): the
    /// sender's `try_send` then leaves them to [`BlockSender::poll`].
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

/// Both ends of one connection.
pub struct Pair {
    /// The sending side (on the `sender` provider).
    pub tx: Box<dyn BlockSender>,
    /// The receiving side.
    pub rx: Box<dyn BlockReceiver>,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pair({})", self.tx.kind())
    }
}

/// Creates both sides of a `kind` connection and connects them.
pub fn connect(
    kind: Kind,
    sender: &dyn Provider,
    receiver: &dyn Provider,
    cfg: &Config,
    opts: Options,
) -> Result<Pair, ShimError> {
    Ok(match kind {
        Kind::StatusByte => {
            let mut rx = StatusByteReceiver::new(receiver, cfg)?;
            let tx = SbSender::connect(sender, cfg, rx.endpoint())?;
            rx.accept(tx.qp())?;
            Pair {
                tx: Box::new(tx),
                rx: Box::new(rx),
            }
        }
        Kind::SlidingWindow => {
            let mut rx = window::WindowReceiver::new(receiver, cfg)?;
            let tx = window::WindowSender::connect(sender, cfg, rx.endpoint(), opts.ack_thread)?;
            rx.accept(tx.qp())?;
            Pair {
                tx: Box::new(tx),
                rx: Box::new(rx),
            }
        }
        Kind::Cpwr => {
            let mut rx = cpwr::CpwrReceiver::new(receiver, cfg)?;
            let tx = cpwr::CpwrSender::connect(sender, cfg, rx.endpoint())?;
            rx.accept(tx.qp())?;
            Pair {
                tx: Box::new(tx),
                rx: Box::new(rx),
            }
        }
        Kind::Hipower => {
            let mut rx = hipower::HpReceiver::new(receiver, cfg)?;
            let tx = hipower::HpSender::connect(
                sender,
                cfg,
                rx.endpoint(),
                Some(opts.hipower_threshold_pct),
            )?;
            rx.accept(tx.endpoint())?;
            Pair {
                tx: Box::new(tx),
                rx: Box::new(rx),
            }
        }
    })
}
