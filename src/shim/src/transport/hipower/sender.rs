//! HiPower's requester as a state machine: a pool of reusable buffers, refilled in batches by
//! one RDMA READ of the responder's bitmap0 when it falls below the threshold; a WRITE per
//! message, its bitmap0 bit flipped when the WRITE completed; the end flag.

use super::bitmap;
use super::{check, init, Endpoint, THRESHOLD_PCT};
use crate::provider::{access, CompletionQueue, Mr, Provider, QueuePair, RemoteAddr};
use crate::provider::{SendOp, SendWr, Wc};
use crate::transport::status_byte::Config;
use crate::transport::{poll_ok, BlockSender, Framing, Kind, Work};
use crate::ShimError;
use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

const READ_WR: u64 = u64::MAX;
const END_WR: u64 = u64::MAX - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    NotSent,
    Posted,
    Done,
}

/// The requester.
pub struct HpSender {
    qp: Box<dyn QueuePair>,
    cq: Box<dyn CompletionQueue>,
    send: Mr,
    bitmap0: Mr,
    bitmap1: Mr,
    remote: Endpoint,
    pool: VecDeque<u32>,
    pooled: Vec<bool>,
    busy: Vec<bool>,
    threshold: usize,
    read_in_flight: bool,
    end: End,
    framing: Framing,
    wcs: Vec<Wc>,
    scratch: (Vec<u8>, Vec<u8>, Vec<u32>),
    /// Bitmap READs completed.
    pub reads: u64,
    work: Work,
}

impl std::fmt::Debug for HpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HpSender {{ pool: {} }}", self.pool.len())
    }
}

impl HpSender {
    /// Registers C local buffers and both bitmaps, connects to the responder at `remote`.
    /// `threshold_pct`: refill below this percentage of C (None: [`THRESHOLD_PCT`]).
    pub fn connect(
        p: &dyn Provider,
        cfg: &Config,
        remote: Endpoint,
        threshold_pct: Option<u32>,
    ) -> Result<Self, ShimError> {
        check(remote.n, remote.block_size)?;
        let n = remote.n;
        let bytes = bitmap::bytes(n) as u64;
        let send = p.alloc(remote.block_size * u64::from(n))?;
        let send = p.reg_mr(&send, access::LOCAL_WRITE)?;
        let bitmap0 = p.alloc(bytes)?;
        let bitmap0 = p.reg_mr(&bitmap0, access::LOCAL_WRITE | access::REMOTE_READ)?;
        let bitmap1 = p.alloc(bytes)?;
        let bitmap1 = p.reg_mr(&bitmap1, access::LOCAL_WRITE)?;
        let cq = p.create_cq(2 * n + 8)?;
        let mut qp = p.create_qp(&init(n, cfg.path_mtu), cq.cqn(), cq.cqn())?;
        qp.connect(remote.qp)?;
        let pct = threshold_pct.unwrap_or(THRESHOLD_PCT).min(100);
        let threshold = (n as usize * pct as usize).div_ceil(100).max(1);
        Ok(Self {
            qp,
            cq,
            send,
            bitmap0,
            bitmap1,
            remote,
            pool: (0..n).collect(),
            pooled: vec![true; n as usize],
            busy: vec![false; n as usize],
            threshold,
            read_in_flight: false,
            end: End::NotSent,
            framing: Framing::new(remote.block_size),
            wcs: Vec::new(),
            scratch: (Vec::new(), Vec::new(), Vec::new()),
            reads: 0,
            work: Work::default(),
        })
    }

    /// What the responder needs (its `accept`).
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            qp: self.qp.addr(),
            pool: self.send.remote(0),
            bitmap0: self.bitmap0.remote(0),
            end: RemoteAddr::default(),
            n: self.remote.n,
            block_size: self.remote.block_size,
        }
    }

    /// Buffers in the pool now.
    pub fn pooled(&self) -> usize {
        self.pool.len()
    }

    fn post_read(&mut self) -> Result<(), ShimError> {
        let bytes = u32::try_from(bitmap::bytes(self.remote.n)).unwrap_or(u32::MAX);
        let sge = self.bitmap1.sge(0, bytes);
        self.qp.post_send(&[SendWr {
            wr_id: READ_WR,
            op: SendOp::Read(self.remote.bitmap0),
            sges: &[sge],
            inline: None,
            signaled: true,
        }])?;
        self.work.post(1);
        self.read_in_flight = true;
        Ok(())
    }

    fn refill(&mut self) -> Result<(), ShimError> {
        // The device wrote bitmap1 before the completion: read it after.
        fence(Ordering::Acquire);
        let len = bitmap::bytes(self.remote.n);
        let (mine, peer, out) = &mut self.scratch;
        mine.resize(len, 0);
        peer.resize(len, 0);
        self.bitmap0.buf.read(0, mine)?;
        self.bitmap1.buf.read(0, peer)?;
        self.work.scan(2 * len as u64);
        out.clear();
        bitmap::reusable(mine, peer, &self.busy, &mut self.pooled, out);
        self.pool.extend(out.iter().copied());
        Ok(())
    }

    fn handed_over(&mut self, buf: u64) -> Result<(), ShimError> {
        let Some(i) = u32::try_from(buf).ok().filter(|&i| i < self.remote.n) else {
            return Ok(());
        };
        if !std::mem::take(&mut self.busy[i as usize]) {
            return Ok(());
        }
        let at = u64::from(i / 8);
        let mut b = [self.bitmap0.buf.read_u8(at)?];
        bitmap::flip(&mut b, i % 8);
        self.bitmap0.buf.write_u8(at, b[0])?;
        self.work.scan(1);
        Ok(())
    }

    fn reap(&mut self) -> Result<bool, ShimError> {
        let mut wcs = std::mem::take(&mut self.wcs);
        let r = poll_ok(&mut *self.cq, &mut wcs);
        self.work.poll(wcs.len());
        let any = !wcs.is_empty();
        for wc in &wcs {
            match wc.wr_id {
                READ_WR => {
                    self.read_in_flight = false;
                    self.reads += 1;
                    self.refill()?;
                }
                END_WR => self.end = End::Done,
                buf => self.handed_over(buf)?,
            }
        }
        self.wcs = wcs;
        r.map(|()| any)
    }

    fn busy_count(&self) -> usize {
        self.busy.iter().filter(|b| **b).count()
    }
}

impl BlockSender for HpSender {
    fn kind(&self) -> Kind {
        Kind::Hipower
    }

    fn try_send(&mut self, _now_ns: u64, dev: u8, data: &[u8]) -> Result<Option<u16>, ShimError> {
        self.framing.check(data.len())?;
        self.reap()?;
        if self.pool.len() < self.threshold && !self.read_in_flight {
            self.post_read()?;
        }
        let Some(i) = self.pool.pop_front() else {
            return Ok(None);
        };
        self.pooled[i as usize] = false;
        let (packet, bytes) = self.framing.fill(&self.send.buf, i, dev, data)?;
        self.work.copy(u64::from(bytes));
        let base = u64::from(i) * self.remote.block_size;
        let sge = self.send.sge(base, bytes);
        self.qp.post_send(&[SendWr {
            wr_id: u64::from(i),
            op: SendOp::Write(RemoteAddr {
                addr: self.remote.pool.addr + base,
                rkey: self.remote.pool.rkey,
            }),
            sges: &[sge],
            inline: None,
            signaled: true,
        }])?;
        self.work.post(1);
        self.busy[i as usize] = true;
        Ok(Some(packet))
    }

    /// Completions; and while buffers are out, READs of the responder's bitmap0 to get them
    /// back (how a flush learns everything was consumed).
    fn poll(&mut self, _now_ns: u64) -> Result<bool, ShimError> {
        let any = self.reap()?;
        if self.pool.len() < self.remote.n as usize && !self.read_in_flight {
            self.post_read()?;
        }
        Ok(any)
    }

    fn in_flight(&self) -> u64 {
        (self.remote.n as usize - self.pool.len()) as u64
    }

    /// A WRITE's buffer is marked busy until its completion flips its bitmap0 bit: only then
    /// can the responder see the data.
    fn unfinished(&self) -> u64 {
        self.busy_count() as u64
    }

    fn take_work(&mut self) -> Work {
        self.work.take()
    }

    /// Once every WRITE completed, WRITEs the end flag; true when that completed.
    fn finish(&mut self, _now_ns: u64) -> Result<bool, ShimError> {
        self.reap()?;
        if self.end == End::NotSent && self.busy_count() == 0 {
            self.qp.post_send(&[SendWr {
                wr_id: END_WR,
                op: SendOp::Write(self.remote.end),
                sges: &[],
                inline: Some(&[1]),
                signaled: true,
            }])?;
            self.work.post(1);
            self.end = End::Posted;
        }
        Ok(self.end == End::Done)
    }
}
