//! The status-byte sender as a state machine: it fills a free send block (region 1), picks a
//! receive block believed free (region 2), and posts the data WRITE chained with the inline
//! WRITE of the status byte; when region 2 has no free block it synchronises with one RDMA READ
//! of region 3. It never waits and never reads a clock: a call that cannot go on returns
//! `None`, and the time it is given only spaces fruitless synchronisations.

use super::{qp_init, Config, Endpoint, DATA, FREE, UNAVAILABLE};
use crate::buffer::Buffer;
use crate::provider::{access, CompletionQueue, Mr, Provider, QpAddr, QueuePair, RemoteAddr};
use crate::provider::{SendOp, SendWr, Wc};
use crate::transport::{poll_ok, BlockSender, Framing, Kind, Work, HEADER};
use crate::ShimError;
use std::sync::atomic::{fence, Ordering};

const SYNC_WR: u64 = u64::MAX;
/// The first wait after a synchronisation that found no free block, ns (then doubling).
const BACKOFF_MIN_NS: u64 = 1_000;
/// The longest wait between fruitless synchronisations, ns.
const BACKOFF_MAX_NS: u64 = 100_000;

/// Counters of a sender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Blocks sent.
    pub blocks: u64,
    /// Synchronisations (RDMA READs of region 3) completed.
    pub syncs: u64,
    /// Total time from posting each synchronisation to seeing its completion, ns (as the
    /// driver's clock says).
    pub sync_ns: u64,
    /// Times a block was skipped because the receiver marked it unavailable.
    pub skipped_unavailable: u64,
}

/// The status-byte sender's state machine.
pub struct SbSender {
    qp: Box<dyn QueuePair>,
    cq: Box<dyn CompletionQueue>,
    /// Local send blocks.
    send: Mr,
    /// Region 1: the send blocks' statuses (local only).
    region1: Buffer,
    /// Region 2: cached receiver statuses (RDMA READ target).
    region2: Mr,
    remote: Endpoint,
    local_n: u32,
    next_remote: u32,
    next_local: u32,
    framing: Framing,
    wcs: Vec<Wc>,
    in_flight: u32,
    /// When the synchronisation in flight was posted.
    sync_since: Option<u64>,
    /// No synchronisation before this time (after fruitless ones).
    next_sync_ns: u64,
    backoff_ns: u64,
    stats: SenderStats,
    work: Work,
}

impl std::fmt::Debug for SbSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SbSender {{ in_flight: {} }}", self.in_flight)
    }
}

impl SbSender {
    /// Allocates the send blocks and regions 1 and 2, creates a QP and connects it to the
    /// receiver at `remote`.
    pub fn connect(p: &dyn Provider, cfg: &Config, remote: Endpoint) -> Result<Self, ShimError> {
        if remote.n == 0 || remote.n > 255 || remote.block_size < HEADER {
            return Err(crate::TransportError::Endpoint {
                kind: crate::transport::Kind::StatusByte,
                blocks: remote.n,
                block_size: remote.block_size,
            }
            .into());
        }
        let n = cfg.blocks.clamp(1, 255);
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
            qp,
            cq,
            send,
            region1,
            region2,
            remote,
            local_n: n,
            next_remote: 0,
            next_local: 0,
            framing: Framing::new(block_size),
            wcs: Vec::new(),
            in_flight: 0,
            sync_since: None,
            next_sync_ns: 0,
            backoff_ns: 0,
            stats: SenderStats::default(),
            work: Work::default(),
        })
    }

    /// The sender QP's address.
    pub fn qp(&self) -> QpAddr {
        self.qp.addr()
    }

    /// Counters.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// True while a synchronisation is in flight.
    pub fn syncing(&self) -> bool {
        self.sync_since.is_some()
    }

    /// Posts a synchronisation (one RDMA READ of all the receiver's status bytes into region
    /// 2) unless one is in flight; true if posted.
    pub fn start_sync(&mut self, now_ns: u64) -> Result<bool, ShimError> {
        if self.sync_since.is_some() {
            return Ok(false);
        }
        let sge = self.region2.sge(0, self.remote.n);
        self.qp.post_send(&[SendWr {
            wr_id: SYNC_WR,
            op: SendOp::Read(self.remote.status),
            sges: &[sge],
            inline: None,
            signaled: true,
        }])?;
        self.work.post(1);
        self.sync_since = Some(now_ns);
        Ok(true)
    }

    /// Processes completions: a completed status write frees its local send block; a completed
    /// synchronisation refreshes region 2. True if any completed.
    pub fn reap(&mut self, now_ns: u64) -> Result<bool, ShimError> {
        let mut wcs = std::mem::take(&mut self.wcs);
        let r = poll_ok(&mut *self.cq, &mut wcs);
        self.work.poll(wcs.len());
        let any = !wcs.is_empty();
        for wc in &wcs {
            if wc.wr_id == SYNC_WR {
                self.synced(now_ns)?;
            } else {
                self.region1.write_u8(wc.wr_id, FREE)?;
                self.work.scan(1);
                self.in_flight = self.in_flight.saturating_sub(1);
            }
        }
        self.wcs = wcs;
        r.map(|()| any)
    }

    fn synced(&mut self, now_ns: u64) -> Result<(), ShimError> {
        // Region 2 was written by the device before the completion: read it after.
        fence(Ordering::Acquire);
        if let Some(since) = self.sync_since.take() {
            self.stats.syncs += 1;
            self.stats.sync_ns += now_ns.saturating_sub(since);
        }
        if self.free_remote()?.is_some() {
            self.backoff_ns = 0;
            self.next_sync_ns = now_ns;
        } else {
            // Fruitless: each doubles the wait before the next (1 us .. 100 us), so a slow
            // receiver does not turn the link into a stream of status READs.
            self.backoff_ns = (self.backoff_ns * 2).clamp(BACKOFF_MIN_NS, BACKOFF_MAX_NS);
            self.next_sync_ns = now_ns.saturating_add(self.backoff_ns);
        }
        Ok(())
    }

    fn free_local(&mut self) -> Result<Option<u32>, ShimError> {
        let n = self.local_n;
        for k in 0..n {
            let i = (self.next_local + k) % n;
            self.work.scan(1);
            if self.region1.read_u8(u64::from(i))? == FREE {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// A receive block region 2 says is free. Any other value (the receiver's, or garbage a
    /// hostile receiver put in region 3) means not free.
    fn free_remote(&mut self) -> Result<Option<u32>, ShimError> {
        let n = self.remote.n;
        for k in 0..n {
            let j = (self.next_remote + k) % n;
            self.work.scan(1);
            match self.region2.buf.read_u8(u64::from(j))? {
                FREE => return Ok(Some(j)),
                UNAVAILABLE => self.stats.skipped_unavailable += 1,
                _ => {}
            }
        }
        Ok(None)
    }

    fn post_block(&mut self, i: u32, j: u32, bytes: u32) -> Result<(), ShimError> {
        let base = u64::from(i) * self.remote.block_size;
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
        self.work.post(2);
        Ok(())
    }
}

impl BlockSender for SbSender {
    fn kind(&self) -> Kind {
        Kind::StatusByte
    }

    fn try_send(&mut self, now_ns: u64, dev: u8, data: &[u8]) -> Result<Option<u16>, ShimError> {
        self.framing.check(data.len())?;
        self.reap(now_ns)?;
        // Filling needs a free local send block (region 1) ...
        let Some(i) = self.free_local()? else {
            return Ok(None);
        };
        // ... and sending a receive block believed free (region 2); synchronise when none is.
        let Some(j) = self.free_remote()? else {
            if now_ns >= self.next_sync_ns {
                self.start_sync(now_ns)?;
            }
            return Ok(None);
        };
        let (packet, bytes) = self.framing.fill(&self.send.buf, i, dev, data)?;
        self.work.copy(u64::from(bytes));
        self.region1.write_u8(u64::from(i), DATA)?;
        self.next_local = (i + 1) % self.local_n;
        self.post_block(i, j, bytes)?;
        self.in_flight += 1;
        self.region2.buf.write_u8(u64::from(j), DATA)?;
        self.work.scan(2);
        self.next_remote = (j + 1) % self.remote.n;
        self.stats.blocks += 1;
        Ok(Some(packet))
    }

    fn poll(&mut self, now_ns: u64) -> Result<bool, ShimError> {
        self.reap(now_ns)
    }

    fn in_flight(&self) -> u64 {
        u64::from(self.in_flight)
    }

    fn wake_at(&self) -> Option<u64> {
        (self.sync_since.is_none()).then_some(self.next_sync_ns)
    }

    fn take_work(&mut self) -> Work {
        self.work.take()
    }
}
