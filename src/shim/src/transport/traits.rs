//! The transport trait every mechanism implements: non-blocking, clock-free state machines (the
//! protocol owns no thread, no clock and no loop that waits; time comes in as an argument, as
//! in quinn-proto). A driver calls them: [`super::realtime`] on the real clock with spinning
//! waits, the lab's virtual-time driver with softhca on a virtual clock.

use super::{Message, Work};
use crate::ShimError;

/// The sending side of a block transport.
pub trait BlockSender: Send {
    /// Which mechanism.
    fn kind(&self) -> Kind;
    /// Sends `data` as the next packet of device `dev` if a block is free on both sides now:
    /// `Ok(Some(packet number))`; `Ok(None)`: not now (the machine may have started a
    /// synchronisation with the peer); call again after time passes.
    fn try_send(&mut self, now_ns: u64, dev: u8, data: &[u8]) -> Result<Option<u16>, ShimError>;
    /// Processes completions and the peer's feedback; true if anything changed.
    fn poll(&mut self, now_ns: u64) -> Result<bool, ShimError>;
    /// Blocks sent whose block is not yet known to be reusable.
    fn in_flight(&self) -> u64;
    /// Blocks sent whose WRITE's local completion this side has not yet reaped (its own
    /// progress: [`Self::in_flight`] also counts blocks the peer has not handed back). Polling
    /// reaps them.
    fn unfinished(&self) -> u64 {
        self.in_flight()
    }
    /// The work done since the last call.
    fn take_work(&mut self) -> Work;
    /// When the machine wants to be called again even if nothing changes (a timer: the
    /// status-byte sender's next synchronisation after fruitless ones), ns; `None`: only when
    /// something changes.
    fn wake_at(&self) -> Option<u64> {
        None
    }
    /// Tells the peer the stream has ended (HiPower's end flag); true once that is done.
    fn finish(&mut self, _now_ns: u64) -> Result<bool, ShimError> {
        Ok(true)
    }
}

/// The receiving side of a block transport.
pub trait BlockReceiver: Send {
    /// Which mechanism.
    fn kind(&self) -> Kind;
    /// The next message, in each device's packet order, if one is ready.
    fn try_recv(&mut self, now_ns: u64) -> Result<Option<Message>, ShimError>;
    /// The work done since the last call.
    fn take_work(&mut self) -> Work;
    /// True once the sender said the stream ended and every message was taken.
    fn finished(&self) -> bool {
        false
    }
}

/// The mechanisms.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The status-byte mechanism (`status_byte`).
    StatusByte,
    /// The sliding window with its ACK thread (`window`).
    SlidingWindow,
    /// Confirming per work request: WRITE_IMM, one receive per message, feedback by SEND
    /// (`cpwr`, HiPower's "Vanilla").
    Cpwr,
    /// HiPower's batched confirmation with bitmaps (`hipower`).
    Hipower,
}

impl Kind {
    /// Every mechanism.
    pub const ALL: [Kind; 4] = [
        Kind::StatusByte,
        Kind::SlidingWindow,
        Kind::Cpwr,
        Kind::Hipower,
    ];

    /// The name used in JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::StatusByte => "status_byte",
            Kind::SlidingWindow => "sliding_window",
            Kind::Cpwr => "cpwr",
            Kind::Hipower => "hipower",
        }
    }
}

/// A word that names no transport.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the transport must be status_byte, sliding_window, cpwr or hipower, not {0:?}")]
pub struct UnknownKind(pub String);

impl std::str::FromStr for Kind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, UnknownKind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
