//! The status-byte receiver: blocks, region 3, and a QP it never posts on. It polls its own
//! status bytes; every byte and block header it reads was written by the sender, so both are
//! checked (any status other than DATA is not data; a header claiming more than a block is
//! dropped with an error and the block freed), and it never waits.

use super::{qp_init, Config, Endpoint, Reorder, DATA, FREE, UNAVAILABLE};
use crate::provider::{access, CompletionQueue, Mr, Provider, QpAddr, QueuePair};
use crate::transport::realtime::{spin, Polling};
use crate::transport::{BlockReceiver, Framing, Kind, Message, Work, HEADER};
use crate::ShimError;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

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
    work: Work,
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
            return Err(crate::TransportError::Geometry {
                kind: crate::transport::Kind::StatusByte,
                blocks: cfg.blocks,
                block_size: HEADER.saturating_add(cfg.payload),
            }
            .into());
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
            work: Work::default(),
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
            return Err(crate::RequestError::Block { block, n: self.n }.into());
        }
        self.status.buf.write_u8(u64::from(block), v)
    }

    /// Takes one block whose status is DATA, if any (scanning from where the last one was
    /// found), copies it out and frees it. Returns the block number and the message, in arrival
    /// order (not yet put in packet order).
    pub fn poll_block(&mut self) -> Result<Option<(u32, Message)>, ShimError> {
        for k in 0..self.n {
            let j = (self.next + k) % self.n;
            self.work.scan(1);
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
            self.work.copy(HEADER + m.data.len() as u64);
            fence(Ordering::Release);
            self.set(j, FREE)?;
            self.work.scan(1);
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

    /// Waits for the next message (the real-time driver's busy poll).
    pub fn recv(&mut self, timeout: Duration) -> Result<Message, ShimError> {
        spin(timeout, Polling::Spin, "waiting for a block", || {
            self.try_recv()
        })
    }
}

impl BlockReceiver for StatusByteReceiver {
    fn kind(&self) -> Kind {
        Kind::StatusByte
    }

    fn try_recv(&mut self, _now_ns: u64) -> Result<Option<Message>, ShimError> {
        StatusByteReceiver::try_recv(self)
    }

    fn take_work(&mut self) -> Work {
        self.work.take()
    }
}
