//! HiPower's responder as a state machine: when it has no buffer known to hold data it READs
//! the requester's bitmap0; the buffers whose bit differs from its own bitmap0 hold data; it
//! consumes them (in packet order, per device) and flips its bits, which hands them back.
//! Every buffer it takes was written by the requester: headers are checked, a bad buffer is
//! handed back with an error.

use super::bitmap;
use super::{check, init, Endpoint};
use crate::provider::{access, CompletionQueue, Mr, Provider, QueuePair};
use crate::provider::{SendOp, SendWr, Wc};
use crate::transport::status_byte::{Config, Reorder};
use crate::transport::{poll_ok, BlockReceiver, Framing, Kind, Message, Work, HEADER};
use crate::ShimError;
use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

const READ_WR: u64 = u64::MAX;

/// The responder.
pub struct HpReceiver {
    qp: Box<dyn QueuePair>,
    cq: Box<dyn CompletionQueue>,
    pool: Mr,
    bitmap0: Mr,
    bitmap1: Mr,
    end: Mr,
    n: u32,
    block_size: u64,
    peer: Option<Endpoint>,
    queue: VecDeque<u32>,
    queued: Vec<bool>,
    read_in_flight: bool,
    /// The end flag was set when the READ in flight was posted.
    end_before_read: bool,
    drained: bool,
    framing: Framing,
    order: Reorder,
    wcs: Vec<Wc>,
    scratch: (Vec<u8>, Vec<u8>, Vec<u32>),
    /// Bitmap READs completed.
    pub reads: u64,
    work: Work,
}

impl std::fmt::Debug for HpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HpReceiver {{ n: {} }}", self.n)
    }
}

impl HpReceiver {
    /// Registers C = `cfg.blocks` buffers, both bitmaps and the end flag.
    pub fn new(p: &dyn Provider, cfg: &Config) -> Result<Self, ShimError> {
        let n = cfg.blocks;
        let block_size = HEADER + cfg.payload;
        check(n, block_size)?;
        let bytes = bitmap::bytes(n) as u64;
        let pool = p.alloc(block_size * u64::from(n))?;
        let pool = p.reg_mr(&pool, access::LOCAL_WRITE | access::REMOTE_WRITE)?;
        let bitmap0 = p.alloc(bytes)?;
        let bitmap0 = p.reg_mr(&bitmap0, access::LOCAL_WRITE | access::REMOTE_READ)?;
        let bitmap1 = p.alloc(bytes)?;
        let bitmap1 = p.reg_mr(&bitmap1, access::LOCAL_WRITE)?;
        let end = p.alloc(1)?;
        let end = p.reg_mr(&end, access::LOCAL_WRITE | access::REMOTE_WRITE)?;
        let cq = p.create_cq(8)?;
        let qp = p.create_qp(&init(4, cfg.path_mtu), cq.cqn(), cq.cqn())?;
        Ok(Self {
            qp,
            cq,
            pool,
            bitmap0,
            bitmap1,
            end,
            n,
            block_size,
            peer: None,
            queue: VecDeque::new(),
            queued: vec![false; n as usize],
            read_in_flight: false,
            end_before_read: false,
            drained: false,
            framing: Framing::new(block_size),
            order: Reorder::default(),
            wcs: Vec::new(),
            scratch: (Vec::new(), Vec::new(), Vec::new()),
            reads: 0,
            work: Work::default(),
        })
    }

    /// What the requester needs.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            qp: self.qp.addr(),
            pool: self.pool.remote(0),
            bitmap0: self.bitmap0.remote(0),
            end: self.end.remote(0),
            n: self.n,
            block_size: self.block_size,
        }
    }

    /// Connects to the requester (its QP and bitmap0); it must have the same C.
    pub fn accept(&mut self, requester: Endpoint) -> Result<(), ShimError> {
        if requester.n != self.n {
            return Err(crate::TransportError::Buffers {
                requester: requester.n,
                responder: self.n,
            }
            .into());
        }
        self.qp.connect(requester.qp)?;
        self.peer = Some(requester);
        Ok(())
    }

    fn post_read(&mut self) -> Result<(), ShimError> {
        let Some(peer) = self.peer else {
            return Ok(());
        };
        self.end_before_read = self.end.buf.read_u8(0)? != 0;
        self.work.scan(1);
        let bytes = u32::try_from(bitmap::bytes(self.n)).unwrap_or(u32::MAX);
        let sge = self.bitmap1.sge(0, bytes);
        self.qp.post_send(&[SendWr {
            wr_id: READ_WR,
            op: SendOp::Read(peer.bitmap0),
            sges: &[sge],
            inline: None,
            signaled: true,
        }])?;
        self.work.post(1);
        self.read_in_flight = true;
        Ok(())
    }

    fn discover(&mut self) -> Result<(), ShimError> {
        fence(Ordering::Acquire);
        let len = bitmap::bytes(self.n);
        let (mine, peer, out) = &mut self.scratch;
        mine.resize(len, 0);
        peer.resize(len, 0);
        self.bitmap0.buf.read(0, mine)?;
        self.bitmap1.buf.read(0, peer)?;
        self.work.scan(2 * len as u64);
        out.clear();
        bitmap::with_data(mine, peer, &mut self.queued, out);
        self.queue.extend(out.iter().copied());
        if self.end_before_read && self.queue.is_empty() {
            self.drained = true;
        }
        Ok(())
    }

    fn reap(&mut self) -> Result<(), ShimError> {
        let mut wcs = std::mem::take(&mut self.wcs);
        let r = poll_ok(&mut *self.cq, &mut wcs);
        self.work.poll(wcs.len());
        for wc in &wcs {
            if wc.wr_id == READ_WR {
                self.read_in_flight = false;
                self.reads += 1;
                self.discover()?;
            }
        }
        self.wcs = wcs;
        r
    }

    /// Takes buffer `i` out and hands it back (flips its bitmap0 bit), even when it is bad.
    fn consume(&mut self, i: u32) -> Result<Message, ShimError> {
        fence(Ordering::Acquire);
        let m = self.framing.read(&self.pool.buf, i);
        fence(Ordering::Release);
        let at = u64::from(i / 8);
        let mut b = [self.bitmap0.buf.read_u8(at)?];
        bitmap::flip(&mut b, i % 8);
        self.bitmap0.buf.write_u8(at, b[0])?;
        self.work.scan(1);
        if let Some(q) = self.queued.get_mut(i as usize) {
            *q = false;
        }
        let m = m?;
        self.work.copy(HEADER + m.data.len() as u64);
        Ok(m)
    }
}

impl BlockReceiver for HpReceiver {
    fn kind(&self) -> Kind {
        Kind::Hipower
    }

    fn try_recv(&mut self, _now_ns: u64) -> Result<Option<Message>, ShimError> {
        if let Some(m) = self.order.pop() {
            return Ok(Some(m));
        }
        self.reap()?;
        while let Some(i) = self.queue.pop_front() {
            let m = self.consume(i)?;
            self.order.push(m);
            if let Some(m) = self.order.pop() {
                return Ok(Some(m));
            }
        }
        if !self.read_in_flight && !self.drained {
            self.post_read()?;
        }
        Ok(None)
    }

    fn take_work(&mut self) -> Work {
        self.work.take()
    }

    fn finished(&self) -> bool {
        self.drained && self.queue.is_empty()
    }
}
