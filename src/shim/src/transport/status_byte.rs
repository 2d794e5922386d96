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

use super::{poll_ok, spin, Framing, Message, Polling, HEADER};
use crate::buffer::Buffer;
use crate::provider::{
    access, CompletionQueue, Mr, Provider, QpAddr, QpInit, QueuePair, RemoteAddr, SendOp, SendWr,
    Wc,
};
use crate::ShimError;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{fence, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Block is free.
pub const FREE: u8 = 0;
/// Block holds data.
pub const DATA: u8 = 1;
/// Block is unavailable (held by the receiver): senders skip it.
pub const UNAVAILABLE: u8 = 2;

const SYNC_WR: u64 = u64::MAX;

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

/// Transport sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Blocks on each side (the paper uses 3).
    pub blocks: u32,
    /// Largest payload per block.
    pub payload: u64,
    /// Path MTU of the QPs.
    pub path_mtu: u32,
    /// How long a sender waits for a free block before giving up.
    pub timeout: Duration,
    /// Sender send-queue and CQ entries (0: just enough, about 2 x blocks). A monitor reading
    /// the rings between ticks needs them deep enough not to be lapped in between.
    pub ring_entries: u32,
    /// How the sender waits for completions and free blocks.
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

fn qp_init(cfg: &Config) -> QpInit {
    QpInit {
        max_send_wr: (2 * cfg.blocks + 2).max(cfg.ring_entries),
        max_recv_wr: 0,
        max_recv_sge: 1,
        max_inline: 16,
        path_mtu: cfg.path_mtu,
    }
}

/// The passive side: blocks, region 3, and a QP it never posts on.
pub struct StatusByteReceiver {
    qp: Box<dyn QueuePair>,
    _cq: Box<dyn CompletionQueue>,
    blocks: Mr,
    status: Mr,
    n: u32,
    block_size: u64,
    framing: Framing,
    next: u32,
    order: Reorder,
}

impl std::fmt::Debug for StatusByteReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "StatusByteReceiver {{ n: {}, block_size: {} }}",
            self.n, self.block_size
        )
    }
}

impl StatusByteReceiver {
    /// Allocates and registers the receive blocks and region 3, and a QP for the sender.
    pub fn new(p: &dyn Provider, cfg: &Config) -> Result<Self, ShimError> {
        if cfg.blocks == 0 || cfg.blocks > 255 {
            return Err(ShimError::Invalid("blocks must be 1..=255".into()));
        }
        let block_size = HEADER + cfg.payload;
        let blocks = p.alloc(block_size * u64::from(cfg.blocks))?;
        let blocks = p.reg_mr(&blocks, access::REMOTE_WRITE | access::LOCAL_WRITE)?;
        let status = p.alloc(u64::from(cfg.blocks))?;
        let status = p.reg_mr(
            &status,
            access::REMOTE_WRITE | access::REMOTE_READ | access::LOCAL_WRITE,
        )?;
        let cq = p.create_cq(4)?;
        let qp = p.create_qp(&qp_init(cfg), cq.cqn(), cq.cqn())?;
        Ok(Self {
            qp,
            _cq: cq,
            blocks,
            status,
            n: cfg.blocks,
            block_size,
            framing: Framing::new(block_size),
            next: 0,
            order: Reorder::default(),
        })
    }

    /// What the sender needs.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            qp: self.qp.addr(),
            blocks: self.blocks.remote(0),
            status: self.status.remote(0),
            n: self.n,
            block_size: self.block_size,
        }
    }

    /// Connects the receiver's QP to the sender's.
    pub fn accept(&mut self, sender: QpAddr) -> Result<(), ShimError> {
        self.qp.connect(sender)
    }

    /// A block's status byte (region 3).
    pub fn status(&self, block: u32) -> Result<u8, ShimError> {
        self.status.buf.read_u8(u64::from(block))
    }

    /// Marks a free block unavailable: senders skip it until [`Self::mark_available`].
    pub fn mark_unavailable(&self, block: u32) -> Result<(), ShimError> {
        self.set(block, UNAVAILABLE)
    }

    /// Makes an unavailable block free again.
    pub fn mark_available(&self, block: u32) -> Result<(), ShimError> {
        self.set(block, FREE)
    }

    fn set(&self, block: u32, v: u8) -> Result<(), ShimError> {
        if block >= self.n {
            return Err(ShimError::Invalid(format!("block {block} of {}", self.n)));
        }
        self.status.buf.write_u8(u64::from(block), v)
    }

    /// Takes one block whose status is DATA, if any (scanning from where the last one was
    /// found), copies it out and frees it. Returns the block number and the message, in arrival
    /// order (not yet put in packet order).
    pub fn poll_block(&mut self) -> Result<Option<(u32, Message)>, ShimError> {
        for k in 0..self.n {
            let j = (self.next + k) % self.n;
            if self.status.buf.read_u8(u64::from(j))? != DATA {
                continue;
            }
            // The status byte was written after the data: read the data after it.
            fence(Ordering::Acquire);
            let read = self.framing.read(&self.blocks.buf, j);
            let m = match read {
                Ok(m) => m,
                Err(e) => {
                    // A bad block is dropped, not left to block the ring.
                    self.set(j, FREE)?;
                    return Err(e);
                }
            };
            fence(Ordering::Release);
            self.set(j, FREE)?;
            self.next = (j + 1) % self.n;
            return Ok(Some((j, m)));
        }
        Ok(None)
    }

    /// The next message in each device's packet order, if one is ready.
    pub fn try_recv(&mut self) -> Result<Option<Message>, ShimError> {
        if let Some(m) = self.order.pop() {
            return Ok(Some(m));
        }
        while let Some((_, m)) = self.poll_block()? {
            self.order.push(m);
            if let Some(m) = self.order.pop() {
                return Ok(Some(m));
            }
        }
        Ok(None)
    }

    /// Waits for the next message.
    pub fn recv(&mut self, timeout: Duration) -> Result<Message, ShimError> {
        spin(timeout, Polling::Spin, "waiting for a block", || {
            self.try_recv()
        })
    }
}

/// Puts each device's packets back in packet-number order.
#[derive(Debug, Default)]
pub struct Reorder {
    next: HashMap<u8, u16>,
    early: BTreeMap<(u8, u16), Message>,
    ready: VecDeque<Message>,
}

impl Reorder {
    /// Adds an arrived message.
    pub fn push(&mut self, m: Message) {
        let dev = m.dev;
        let expected = self.next.entry(dev).or_insert(0);
        if m.packet != *expected {
            self.early.insert((dev, m.packet), m);
            return;
        }
        *expected = expected.wrapping_add(1);
        self.ready.push_back(m);
        while let Some(m) = self.early.remove(&(dev, *expected)) {
            *expected = expected.wrapping_add(1);
            self.ready.push_back(m);
        }
    }

    /// The next in-order message.
    pub fn pop(&mut self) -> Option<Message> {
        self.ready.pop_front()
    }

    /// Messages waiting for an earlier one.
    pub fn waiting(&self) -> usize {
        self.early.len()
    }
}

/// Counters of a sender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Blocks sent.
    pub blocks: u64,
    /// Synchronisations (RDMA READs of region 3).
    pub syncs: u64,
    /// Total time spent in synchronisations, ns.
    pub sync_ns: u64,
    /// Times a block was skipped because the receiver marked it unavailable.
    pub skipped_unavailable: u64,
}

struct Inner {
    qp: Box<dyn QueuePair>,
    cq: Box<dyn CompletionQueue>,
    /// Local send blocks.
    send: Mr,
    /// Region 1: the send blocks' statuses (local only).
    region1: Buffer,
    /// Region 2: cached receiver statuses (RDMA READ target).
    region2: Mr,
    remote: Endpoint,
    next_remote: u32,
    next_local: u32,
    framing: Framing,
    wcs: Vec<Wc>,
    in_flight: u32,
    stats: SenderStats,
    timeout: Duration,
    polling: Polling,
}

/// The active side. `send` may be called from several threads: filling and sending are
/// serialised on the one QP; each device's packets are numbered in the order they are filled.
pub struct StatusByteSender {
    inner: Mutex<Inner>,
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
        if remote.n == 0 || remote.n > 255 || remote.block_size < HEADER {
            return Err(ShimError::Invalid(
                "receiver endpoint has no usable blocks".into(),
            ));
        }
        let n = cfg.blocks.max(1);
        let block_size = remote.block_size;
        let send = p.alloc(block_size * u64::from(n))?;
        let send = p.reg_mr(&send, access::LOCAL_WRITE)?;
        let region1 = p.alloc(u64::from(n))?;
        let region2 = p.alloc(u64::from(remote.n))?;
        let region2 = p.reg_mr(&region2, access::LOCAL_WRITE)?;
        let cq = p.create_cq((2 * n + 4).max(cfg.ring_entries))?;
        let mut qp = p.create_qp(&qp_init(cfg), cq.cqn(), cq.cqn())?;
        qp.connect(remote.qp)?;
        Ok(Self {
            inner: Mutex::new(Inner {
                qp,
                cq,
                send,
                region1,
                region2,
                remote,
                next_remote: 0,
                next_local: 0,
                framing: Framing::new(block_size),
                wcs: Vec::new(),
                in_flight: 0,
                stats: SenderStats::default(),
                timeout: cfg.timeout,
                polling: cfg.polling,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sender QP's address (for the receiver's `accept`).
    pub fn qp(&self) -> QpAddr {
        self.lock().qp.addr()
    }

    /// Counters.
    pub fn stats(&self) -> SenderStats {
        self.lock().stats
    }

    /// Sends `data` as the next packet of device `dev`; returns its packet number. Blocks while
    /// no send block is free (waiting for completions) or no receive block is known free
    /// (synchronising by RDMA READ, skipping blocks the receiver marked unavailable).
    pub fn send(&self, dev: u8, data: &[u8]) -> Result<u16, ShimError> {
        let mut s = self.lock();
        s.send(dev, data)
    }

    /// Synchronises now: reads all the receiver's status bytes into region 2 (one RDMA READ)
    /// and returns how long it took.
    pub fn sync(&self) -> Result<Duration, ShimError> {
        self.lock().sync()
    }

    /// Waits until every block sent so far has left the send blocks.
    pub fn flush(&self) -> Result<(), ShimError> {
        let mut s = self.lock();
        let (timeout, polling) = (s.timeout, s.polling);
        spin(timeout, polling, "waiting for send completions", || {
            s.reap()?;
            Ok((s.in_flight == 0).then_some(()))
        })
    }
}

impl Inner {
    /// Processes completions: a completed status write frees its local send block.
    fn reap(&mut self) -> Result<bool, ShimError> {
        let mut wcs = std::mem::take(&mut self.wcs);
        let r = poll_ok(&mut *self.cq, &mut wcs);
        let mut synced = false;
        for wc in &wcs {
            if wc.wr_id == SYNC_WR {
                synced = true;
            } else {
                self.region1.write_u8(wc.wr_id, super::status_byte::FREE)?;
                self.in_flight = self.in_flight.saturating_sub(1);
            }
        }
        self.wcs = wcs;
        r.map(|()| synced)
    }

    fn free_local(&mut self) -> Result<Option<u32>, ShimError> {
        let n = u32::try_from(self.region1.len()).unwrap_or(1);
        for k in 0..n {
            let i = (self.next_local + k) % n;
            if self.region1.read_u8(u64::from(i))? == FREE {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    fn free_remote(&mut self) -> Result<Option<u32>, ShimError> {
        let n = self.remote.n;
        for k in 0..n {
            let j = (self.next_remote + k) % n;
            match self.region2.buf.read_u8(u64::from(j))? {
                FREE => return Ok(Some(j)),
                UNAVAILABLE => self.stats.skipped_unavailable += 1,
                _ => {}
            }
        }
        Ok(None)
    }

    fn sync(&mut self) -> Result<Duration, ShimError> {
        let start = Instant::now();
        let sge = self.region2.sge(0, self.remote.n);
        self.qp.post_send(&[SendWr {
            wr_id: SYNC_WR,
            op: SendOp::Read(self.remote.status),
            sges: &[sge],
            inline: None,
            signaled: true,
        }])?;
        let (timeout, polling) = (self.timeout, self.polling);
        spin(timeout, polling, "synchronising status bytes", || {
            Ok(self.reap()?.then_some(()))
        })?;
        fence(Ordering::Acquire);
        let took = start.elapsed();
        self.stats.syncs += 1;
        self.stats.sync_ns += u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        Ok(took)
    }

    fn send(&mut self, dev: u8, data: &[u8]) -> Result<u16, ShimError> {
        self.framing.check(data.len())?;
        // Filling: a free local send block (region 1).
        let (timeout, polling) = (self.timeout, self.polling);
        self.reap()?;
        let i = spin(timeout, polling, "waiting for a free send block", || {
            if let Some(i) = self.free_local()? {
                return Ok(Some(i));
            }
            self.reap()?;
            Ok(None)
        })?;
        let (packet, bytes) = self.framing.fill(&self.send.buf, i, dev, data)?;
        let base = u64::from(i) * self.remote.block_size;
        self.region1.write_u8(u64::from(i), DATA)?;
        self.next_local = (i + 1) % u32::try_from(self.region1.len()).unwrap_or(1);

        // Sending: a receive block believed free (region 2), synchronising when none is.
        // Each fruitless synchronisation doubles the wait before the next (1 us .. 100 us), so
        // a slow receiver does not turn the link into a stream of status READs.
        let deadline = Instant::now() + timeout;
        let mut backoff_us = 0u64;
        let j = loop {
            if let Some(j) = self.free_remote()? {
                break j;
            }
            if Instant::now() > deadline {
                return Err(ShimError::Timeout(format!(
                    "no free receive block after {timeout:?}"
                )));
            }
            if backoff_us > 0 {
                let until = Instant::now() + Duration::from_micros(backoff_us);
                while Instant::now() < until {
                    self.reap()?;
                    std::thread::yield_now();
                }
            }
            self.sync()?;
            backoff_us = (backoff_us * 2).clamp(1, 100);
        };
        let rbase = u64::from(j) * self.remote.block_size;
        let data_sge = self.send.sge(base, bytes);
        let blocks = self.remote.blocks;
        let status = self.remote.status;
        self.qp.post_send(&[
            SendWr {
                wr_id: u64::from(i),
                op: SendOp::Write(RemoteAddr {
                    addr: blocks.addr + rbase,
                    rkey: blocks.rkey,
                }),
                sges: &[data_sge],
                inline: None,
                signaled: false,
            },
            SendWr {
                wr_id: u64::from(i),
                op: SendOp::Write(RemoteAddr {
                    addr: status.addr + u64::from(j),
                    rkey: status.rkey,
                }),
                sges: &[],
                inline: Some(&[DATA]),
                signaled: true,
            },
        ])?;
        self.in_flight += 1;
        self.region2.buf.write_u8(u64::from(j), DATA)?;
        self.next_remote = (j + 1) % self.remote.n;
        self.stats.blocks += 1;
        Ok(packet)
    }
}
