//! The status-byte transport (section 3 of the paper), under idiomatic names:
//! `RmInit` is [`StatusByteReceiver::new`] / [`StatusByteSender::connect`], `RmWrite` is
//! [`StatusByteSender::send`], `RmFree` (the synchronisation) is [`StatusByteSender::sync`].
//!
//! Three status-byte regions, one byte per block, values [`FREE`], [`DATA`], [`UNAVAILABLE`]:
//! region 1, the sender's own send blocks; region 2, the sender's cached copy of the receiver's
//! statuses (the target of the synchronising RDMA READ); region 3, the receiver's statuses, which
//! the sender writes with an inline RDMA WRITE. A block goes out as an unsignalled RDMA WRITE of
//! header + data chained with a signalled inline RDMA WRITE of its status byte, so the receiver
//! never takes part: it polls region 3, consumes, and sets the byte back to free.
//!
//! - `sender`: [`SbSender`], the sender's state machine (no clock, no waiting);
//! - `receiver`: [`StatusByteReceiver`], the receiver's (it never posts);
//! - `reorder`: [`Reorder`], each device's packets back in order;
//! - here: the endpoint, sizes, and [`StatusByteSender`], the sender for threads on the real
//!   clock (a lock around the machine, waits by [`super::realtime`]).

mod receiver;
mod reorder;
mod sender;

pub use receiver::StatusByteReceiver;
pub use reorder::Reorder;
pub use sender::{SbSender, SenderStats};

use super::realtime::{self, Polling, RealClock};
use crate::provider::{Provider, QpAddr, QpInit, RemoteAddr};
use crate::ShimError;
use std::sync::Mutex;
use std::time::Duration;

/// Block is free.
pub const FREE: u8 = 0;
/// Block holds data.
pub const DATA: u8 = 1;
/// Block is unavailable (held by the receiver): senders skip it.
pub const UNAVAILABLE: u8 = 2;

/// What a sender needs to know of a receiver (exchanged out of band, like QP numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    /// The receiver's QP.
    pub qp: QpAddr,
    /// Its block region (block `j` at `addr + j x block_size`).
    pub blocks: RemoteAddr,
    /// Its status bytes (region 3).
    pub status: RemoteAddr,
    /// Number of blocks.
    pub n: u32,
    /// Bytes per block, header included.
    pub block_size: u64,
}

/// Transport sizes (shared by every mechanism).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Blocks on each side (the paper uses 3).
    pub blocks: u32,
    /// Largest payload per block.
    pub payload: u64,
    /// Path MTU of the QPs.
    pub path_mtu: u32,
    /// How long a sender on the real clock waits for a free block before giving up.
    pub timeout: Duration,
    /// Sender send-queue and CQ entries (0: just enough, about 2 x blocks). A monitor reading
    /// the rings between ticks needs them deep enough not to be lapped in between.
    pub ring_entries: u32,
    /// How a sender on the real clock waits for completions and free blocks.
    pub polling: Polling,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            blocks: 3,
            payload: 64 * 1024,
            path_mtu: 1024,
            timeout: Duration::from_secs(10),
            ring_entries: 0,
            polling: Polling::Spin,
        }
    }
}

pub(crate) fn qp_init(cfg: &Config) -> QpInit {
    QpInit {
        max_send_wr: (2 * cfg.blocks + 2).max(cfg.ring_entries),
        max_recv_wr: 0,
        max_recv_sge: 1,
        max_inline: 16,
        path_mtu: cfg.path_mtu,
    }
}

/// The active side for threads on the real clock: `send` may be called from several threads
/// (filling and sending are serialised on the one QP; each device's packets are numbered in
/// the order they are filled).
pub struct StatusByteSender {
    inner: Mutex<SbSender>,
    clock: RealClock,
    timeout: Duration,
    polling: Polling,
}

impl std::fmt::Debug for StatusByteSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StatusByteSender")
    }
}

impl StatusByteSender {
    /// Allocates the send blocks and regions 1 and 2, creates a QP and connects it to the
    /// receiver at `remote` (the receiver must [`StatusByteReceiver::accept`] this QP's address,
    /// [`Self::qp`]).
    pub fn connect(p: &dyn Provider, cfg: &Config, remote: Endpoint) -> Result<Self, ShimError> {
        Ok(Self {
            inner: Mutex::new(SbSender::connect(p, cfg, remote)?),
            clock: RealClock::new(),
            timeout: cfg.timeout,
            polling: cfg.polling,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SbSender> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sender QP's address (for the receiver's `accept`).
    pub fn qp(&self) -> QpAddr {
        self.lock().qp()
    }

    /// Counters.
    pub fn stats(&self) -> SenderStats {
        self.lock().stats()
    }

    /// Sends `data` as the next packet of device `dev`; returns its packet number. Waits while
    /// no send block is free (for completions) or no receive block is known free
    /// (synchronising by RDMA READ, skipping blocks the receiver marked unavailable).
    pub fn send(&self, dev: u8, data: &[u8]) -> Result<u16, ShimError> {
        let mut s = self.lock();
        realtime::send(&mut *s, &self.clock, dev, data, self.timeout, self.polling)
    }

    /// Synchronises now: reads all the receiver's status bytes into region 2 (one RDMA READ)
    /// and returns how long it took.
    pub fn sync(&self) -> Result<Duration, ShimError> {
        let mut s = self.lock();
        let start = std::time::Instant::now();
        let clock = self.clock;
        realtime::spin(self.timeout, self.polling, "starting a sync", || {
            Ok(s.start_sync(clock.now_ns())?.then_some(()))
        })?;
        realtime::spin(
            self.timeout,
            self.polling,
            "synchronising status bytes",
            || {
                s.reap(clock.now_ns())?;
                Ok((!s.syncing()).then_some(()))
            },
        )?;
        Ok(start.elapsed())
    }

    /// Waits until every block sent so far has left the send blocks.
    pub fn flush(&self) -> Result<(), ShimError> {
        let mut s = self.lock();
        realtime::flush(&mut *s, &self.clock, self.timeout, self.polling)
    }
}
