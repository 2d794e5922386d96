//! The sliding-window transport the status-byte paper measures against (its Fig. 1): the
//! sender RDMA WRITEs with immediate into a ring of N receive blocks (the immediate names the
//! block and length), tail advances per block; the receiver takes blocks in order from its
//! receive CQ, processes them and returns an ACK by RDMA SEND, which moves the sender's head.
//! As in the paper (section 4.2.1), the sender handles ACKs on a thread of its own: here the
//! ACK side is [`BlockSender::poll`], which the lab runs as its own CPU and the real-time
//! driver on its own thread ([`super::realtime::spawn_poller`]); with `ack_thread` off,
//! `try_send` handles them itself.
//!
//! Hostile input: the immediate is checked against the ring, the block header by the framing,
//! and an unexpected completion is an error, never a panic.

use super::status_byte::Config;
use super::{
    poll_ok, poll_write_imm, BlockReceiver, BlockSender, Framing, Kind, Message, Work, HEADER,
};
use crate::provider::{
    access, CompletionQueue, Mr, Provider, QpAddr, QpInit, QueuePair, RecvWr, RemoteAddr, SendOp,
    SendWr, Wc,
};
use crate::{ShimError, TransportError};
use std::collections::VecDeque;

/// What the sender needs of the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    /// The receiver's QP.
    pub qp: QpAddr,
    /// Its ring of blocks.
    pub ring: RemoteAddr,
    /// Blocks.
    pub n: u32,
    /// Bytes per block, header included.
    pub block_size: u64,
}

fn qp_init(cfg: &Config) -> QpInit {
    QpInit {
        max_send_wr: cfg.blocks + 2,
        max_recv_wr: cfg.blocks,
        max_recv_sge: 1,
        max_inline: 16,
        path_mtu: cfg.path_mtu,
    }
}

fn imm(block: u32, len: u32) -> u32 {
    (block << 24) | (len & 0x00ff_ffff)
}

/// The receiving side: the ring, a receive per block, ACKs by SEND, in order.
pub struct WindowReceiver {
    qp: Box<dyn QueuePair>,
    send_cq: Box<dyn CompletionQueue>,
    recv_cq: Box<dyn CompletionQueue>,
    ring: Mr,
    n: u32,
    block_size: u64,
    framing: Framing,
    wcs: Vec<Wc>,
    acks_unreaped: u32,
    /// ACKs withheld (block numbers, in order) while a block is held.
    withheld: VecDeque<u32>,
    holding: bool,
    work: Work,
}

impl std::fmt::Debug for WindowReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WindowReceiver {{ n: {} }}", self.n)
    }
}

impl WindowReceiver {
    /// Allocates the ring and posts a receive per block.
    pub fn new(p: &dyn Provider, cfg: &Config) -> Result<Self, ShimError> {
        if cfg.blocks == 0 || cfg.blocks > 255 || HEADER + cfg.payload > 1 << 24 {
            return Err(TransportError::Geometry {
                kind: Kind::SlidingWindow,
                blocks: cfg.blocks,
                block_size: HEADER.saturating_add(cfg.payload),
            }
            .into());
        }
        let block_size = HEADER + cfg.payload;
        let ring = p.alloc(block_size * u64::from(cfg.blocks))?;
        let ring = p.reg_mr(&ring, access::REMOTE_WRITE | access::LOCAL_WRITE)?;
        let send_cq = p.create_cq(cfg.blocks + 4)?;
        let recv_cq = p.create_cq(cfg.blocks + 4)?;
        let mut qp = p.create_qp(&qp_init(cfg), send_cq.cqn(), recv_cq.cqn())?;
        let wrs: Vec<RecvWr<'_>> = (0..cfg.blocks)
            .map(|k| RecvWr {
                wr_id: u64::from(k),
                sges: &[],
            })
            .collect();
        qp.post_recv(&wrs)?;
        Ok(Self {
            qp,
            send_cq,
            recv_cq,
            ring,
            n: cfg.blocks,
            block_size,
            framing: Framing::new(block_size),
            wcs: Vec::new(),
            acks_unreaped: 0,
            withheld: VecDeque::new(),
            holding: false,
            work: Work::default(),
        })
    }

    /// What the sender needs.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            qp: self.qp.addr(),
            ring: self.ring.remote(0),
            n: self.n,
            block_size: self.block_size,
        }
    }

    /// Connects to the sender's QP.
    pub fn accept(&mut self, sender: QpAddr) -> Result<(), ShimError> {
        self.qp.connect(sender)
    }

    /// Holds the next block taken (its ACK, and every later one, since ACKs go in order, is
    /// withheld until [`Self::release`]): the paper's Fig. 18 retention.
    pub fn hold(&mut self) {
        self.holding = true;
    }

    /// Releases a held block: the withheld ACKs go out, in order.
    pub fn release(&mut self) -> Result<(), ShimError> {
        self.holding = false;
        while let Some(block) = self.withheld.pop_front() {
            self.ack(block)?;
        }
        Ok(())
    }

    fn ack(&mut self, block: u32) -> Result<(), ShimError> {
        self.qp.post_recv(&[RecvWr {
            wr_id: u64::from(block),
            sges: &[],
        }])?;
        let ack = block.to_be_bytes();
        self.qp.post_send(&[SendWr {
            wr_id: u64::from(block),
            op: SendOp::Send,
            sges: &[],
            inline: Some(&ack),
            signaled: true,
        }])?;
        self.work.post(1);
        self.work.post(1);
        self.acks_unreaped += 1;
        Ok(())
    }

    /// The next block, if one arrived: copied out, its receive re-posted, its ACK sent.
    pub fn try_recv(&mut self) -> Result<Option<Message>, ShimError> {
        // Keep the ACK send queue drained.
        if self.acks_unreaped > 0 {
            poll_ok(&mut *self.send_cq, &mut self.wcs)?;
            self.work.poll(self.wcs.len());
            self.acks_unreaped = self
                .acks_unreaped
                .saturating_sub(u32::try_from(self.wcs.len()).unwrap_or(0));
        }
        let got = poll_write_imm(&mut *self.recv_cq, &mut self.wcs, self.n, "block");
        self.work.poll(self.wcs.len());
        let Some((block, _)) = got? else {
            return Ok(None);
        };
        let message = self.framing.read(&self.ring.buf, block)?;
        self.work.copy(HEADER + message.data.len() as u64);
        if self.holding || !self.withheld.is_empty() {
            self.withheld.push_back(block);
        } else {
            self.ack(block)?;
        }
        Ok(Some(message))
    }
}

impl BlockReceiver for WindowReceiver {
    fn kind(&self) -> Kind {
        Kind::SlidingWindow
    }

    fn try_recv(&mut self, _now_ns: u64) -> Result<Option<Message>, ShimError> {
        WindowReceiver::try_recv(self)
    }

    fn take_work(&mut self) -> Work {
        self.work.take()
    }
}

/// The sending side: head (oldest unacknowledged block), tail (next block to write).
pub struct WindowSender {
    qp: Box<dyn QueuePair>,
    send_cq: Box<dyn CompletionQueue>,
    recv_cq: Box<dyn CompletionQueue>,
    send: Mr,
    acks: Mr,
    remote: Endpoint,
    head: u64,
    tail: u64,
    unreaped: u64,
    framing: Framing,
    wcs: Vec<Wc>,
    ack_thread: bool,
    /// ACKs processed.
    pub acks_seen: u64,
    work: Work,
}

impl std::fmt::Debug for WindowSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WindowSender {{ head: {}, tail: {} }}",
            self.head, self.tail
        )
    }
}

impl WindowSender {
    /// Allocates send blocks and ACK buffers, posts a receive per ACK, connects. With
    /// `ack_thread`, ACKs are handled only by [`BlockSender::poll`] (the ACK thread's work).
    pub fn connect(
        p: &dyn Provider,
        cfg: &Config,
        remote: Endpoint,
        ack_thread: bool,
    ) -> Result<Self, ShimError> {
        let n = remote.n;
        if n == 0 || n > 255 || remote.block_size < HEADER {
            return Err(TransportError::Endpoint {
                kind: Kind::SlidingWindow,
                blocks: n,
                block_size: remote.block_size,
            }
            .into());
        }
        let send = p.alloc(remote.block_size * u64::from(n))?;
        let send = p.reg_mr(&send, access::LOCAL_WRITE)?;
        let acks = p.alloc(4 * u64::from(n))?;
        let acks = p.reg_mr(&acks, access::LOCAL_WRITE)?;
        let send_cq = p.create_cq(n + 4)?;
        let recv_cq = p.create_cq(n + 4)?;
        let init = QpInit {
            max_send_wr: n + 2,
            max_recv_wr: n,
            max_recv_sge: 1,
            max_inline: 16,
            path_mtu: cfg.path_mtu,
        };
        let mut qp = p.create_qp(&init, send_cq.cqn(), recv_cq.cqn())?;
        for k in 0..n {
            let sge = acks.sge(4 * u64::from(k), 4);
            qp.post_recv(&[RecvWr {
                wr_id: u64::from(k),
                sges: &[sge],
            }])?;
        }
        qp.connect(remote.qp)?;
        Ok(Self {
            qp,
            send_cq,
            recv_cq,
            send,
            acks,
            remote,
            head: 0,
            tail: 0,
            unreaped: 0,
            framing: Framing::new(remote.block_size),
            wcs: Vec::new(),
            ack_thread,
            acks_seen: 0,
            work: Work::default(),
        })
    }

    /// The sender QP's address.
    pub fn qp(&self) -> QpAddr {
        self.qp.addr()
    }

    /// Blocks written and not yet acknowledged.
    pub fn in_window(&self) -> u64 {
        self.tail - self.head
    }

    /// Processes ACKs: each frees the oldest block, in order. True if any arrived.
    pub fn poll_acks(&mut self) -> Result<bool, ShimError> {
        poll_ok(&mut *self.recv_cq, &mut self.wcs)?;
        self.work.poll(self.wcs.len());
        let acked: Vec<u64> = self.wcs.iter().map(|w| w.wr_id).collect();
        for wr_id in &acked {
            // Our own receive's id: bounded by the ring (the device echoes what we posted).
            let slot = wr_id % u64::from(self.remote.n);
            let sge = self.acks.sge(4 * slot, 4);
            self.qp.post_recv(&[RecvWr {
                wr_id: slot,
                sges: &[sge],
            }])?;
            self.work.post(1);
            // An ACK beyond what was sent (a hostile receiver) moves nothing.
            if self.head < self.tail {
                self.head += 1;
            }
            self.acks_seen += 1;
        }
        Ok(!acked.is_empty())
    }

    fn reap_sends(&mut self) -> Result<(), ShimError> {
        if self.unreaped > 0 {
            poll_ok(&mut *self.send_cq, &mut self.wcs)?;
            self.work.poll(self.wcs.len());
            self.unreaped = self.unreaped.saturating_sub(self.wcs.len() as u64);
        }
        Ok(())
    }
}

impl BlockSender for WindowSender {
    fn kind(&self) -> Kind {
        Kind::SlidingWindow
    }

    /// Sends into the block at the tail if the window has room.
    fn try_send(&mut self, _now_ns: u64, dev: u8, data: &[u8]) -> Result<Option<u16>, ShimError> {
        self.framing.check(data.len())?;
        let n = u64::from(self.remote.n);
        if !self.ack_thread {
            self.poll_acks()?;
        }
        self.reap_sends()?;
        if self.tail - self.head >= n || self.unreaped >= n {
            return Ok(None);
        }
        let block = u32::try_from(self.tail % n).unwrap_or(0);
        let (packet, bytes) = self.framing.fill(&self.send.buf, block, dev, data)?;
        self.work.copy(u64::from(bytes));
        let base = u64::from(block) * self.remote.block_size;
        let sge = self.send.sge(base, bytes);
        self.qp.post_send(&[SendWr {
            wr_id: u64::from(block),
            op: SendOp::WriteImm(
                RemoteAddr {
                    addr: self.remote.ring.addr + base,
                    rkey: self.remote.ring.rkey,
                },
                imm(block, bytes),
            ),
            sges: &[sge],
            inline: None,
            signaled: true,
        }])?;
        self.work.post(1);
        self.unreaped += 1;
        self.tail += 1;
        Ok(Some(packet))
    }

    /// The ACK thread's work (and the WRITEs' completions).
    fn poll(&mut self, _now_ns: u64) -> Result<bool, ShimError> {
        self.reap_sends()?;
        self.poll_acks()
    }

    fn unfinished(&self) -> u64 {
        self.unreaped
    }

    fn in_flight(&self) -> u64 {
        self.tail - self.head
    }

    fn take_work(&mut self) -> Work {
        self.work.take()
    }
}
