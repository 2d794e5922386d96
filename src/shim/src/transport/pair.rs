//! A connected sender and receiver of any mechanism, for one process that owns both sides (the
//! lab, tests, `benchex local`); across machines each side exchanges its endpoint out of band
//! ([`super::any`]: BenchEx's bootstrap does).

pub use super::any::Options;
use super::any::{connect_sender, PendingReceiver};
use super::status_byte::Config;
use super::{BlockReceiver, BlockSender, Kind};
use crate::provider::Provider;
use crate::ShimError;

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
    let rx = PendingReceiver::new(kind, receiver, cfg)?;
    let (tx, addr) = connect_sender(sender, cfg, rx.endpoint(), opts)?;
    let rx = rx.accept(addr)?;
    Ok(Pair { tx, rx })
}
