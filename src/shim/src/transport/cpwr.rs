//! Confirming per work request (CPWR), HiPower's baseline ("Vanilla", section 4.1 of
//! `papers/hipower-batched-confirmation.txt`): the requester RDMA WRITEs with immediate into
//! one of C pre-registered buffers of the responder (the immediate names the buffer and the
//! length), which consumes one posted receive per message; the responder confirms each message
//! in turn by SEND of the buffer's number back (two-sided feedback), which the requester takes
//! from its receive queue to reuse the buffer. Buffers are reused in any order.
//!
//! Hostile input: a feedback naming a buffer that is not in flight is ignored; an immediate
//! outside the pool, an unexpected completion or a bad header is an error, never a panic.

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

/// What the requester needs of the responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    /// The responder's QP.
    pub qp: QpAddr,
    /// Its buffers (buffer `i` at `addr + i x block_size`).
    pub pool: RemoteAddr,
    /// Buffers (C).
    pub n: u32,
    /// Bytes per buffer, header included.
    pub block_size: u64,
}

fn check(blocks: u32, block_size: u64) -> Result<(), ShimError> {
    if !(1..=255).contains(&blocks) || !(HEADER..=1 << 24).contains(&block_size) {
        return Err(TransportError::Geometry {
            kind: Kind::Cpwr,
            blocks,
            block_size,
        }
        .into());
    }
    Ok(())
}

fn init(n: u32, mtu: u32) -> QpInit {
    QpInit {
        max_send_wr: n + 2,
        max_recv_wr: n,
        max_recv_sge: 1,
        max_inline: 16,
        path_mtu: mtu,
    }
}

/// The responder: buffers, a receive per buffer, a feedback SEND per message.
pub struct CpwrReceiver {
    qp: Box<dyn QueuePair>,
    send_cq: Box<dyn CompletionQueue>,
    recv_cq: Box<dyn CompletionQueue>,
    pool: Mr,
    n: u32,
    block_size: u64,
    framing: Framing,
    wcs: Vec<Wc>,
    unreaped: u32,
    work: Work,
}

impl std::fmt::Debug for CpwrReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpwrReceiver {{ n: {} }}", self.n)
    }
}

impl CpwrReceiver {
    /// Allocates C = `cfg.blocks` buffers and posts a receive for each.
    pub fn new(p: &dyn Provider, cfg: &Config) -> Result<Self, ShimError> {
        let block_size = HEADER + cfg.payload;
        check(cfg.blocks, block_size)?;
        let pool = p.alloc(block_size * u64::from(cfg.blocks))?;
        let pool = p.reg_mr(&pool, access::REMOTE_WRITE | access::LOCAL_WRITE)?;
        let send_cq = p.create_cq(cfg.blocks + 4)?;
        let recv_cq = p.create_cq(cfg.blocks + 4)?;
        let mut qp = p.create_qp(
            &init(cfg.blocks, cfg.path_mtu),
            send_cq.cqn(),
            recv_cq.cqn(),
        )?;
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
            pool,
            n: cfg.blocks,
            block_size,
            framing: Framing::new(block_size),
            wcs: Vec::new(),
            unreaped: 0,
            work: Work::default(),
        })
    }

    /// What the requester needs.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            qp: self.qp.addr(),
            pool: self.pool.remote(0),
            n: self.n,
            block_size: self.block_size,
        }
    }

    /// Connects to the requester's QP.
    pub fn accept(&mut self, requester: QpAddr) -> Result<(), ShimError> {
        self.qp.connect(requester)
    }
}

impl BlockReceiver for CpwrReceiver {
    fn kind(&self) -> Kind {
        Kind::Cpwr
    }

    fn try_recv(&mut self, _now_ns: u64) -> Result<Option<Message>, ShimError> {
        if self.unreaped > 0 {
            poll_ok(&mut *self.send_cq, &mut self.wcs)?;
            self.work.poll(self.wcs.len());
            let done = u32::try_from(self.wcs.len()).unwrap_or(u32::MAX);
            self.unreaped = self.unreaped.saturating_sub(done);
        }
        let got = poll_write_imm(&mut *self.recv_cq, &mut self.wcs, self.n, "buffer");
        self.work.poll(self.wcs.len());
        let Some((buf, wc)) = got? else {
            return Ok(None);
        };
        let m = self.framing.read(&self.pool.buf, buf)?;
        self.work.copy(HEADER + m.data.len() as u64);
        // Confirm: the receive back, the buffer's number to the requester.
        self.qp.post_recv(&[RecvWr {
            wr_id: wc.wr_id,
            sges: &[],
        }])?;
        self.work.post(1);
        let fb = buf.to_be_bytes();
        self.qp.post_send(&[SendWr {
            wr_id: u64::from(buf),
            op: SendOp::Send,
            sges: &[],
            inline: Some(&fb),
            signaled: true,
        }])?;
        self.work.post(1);
        self.unreaped += 1;
        Ok(Some(m))
    }

    fn take_work(&mut self) -> Work {
        self.work.take()
    }
}

/// The requester: a free list of the responder's buffers, refilled by feedback.
pub struct CpwrSender {
    qp: Box<dyn QueuePair>,
    send_cq: Box<dyn CompletionQueue>,
    recv_cq: Box<dyn CompletionQueue>,
    send: Mr,
    feedback: Mr,
    remote: Endpoint,
    free: VecDeque<u32>,
    busy: Vec<bool>,
    unreaped: u64,
    framing: Framing,
    wcs: Vec<Wc>,
    work: Work,
}

impl std::fmt::Debug for CpwrSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpwrSender {{ free: {} }}", self.free.len())
    }
}

impl CpwrSender {
    /// Allocates the local buffers and feedback slots, posts a receive per buffer, connects.
    pub fn connect(p: &dyn Provider, cfg: &Config, remote: Endpoint) -> Result<Self, ShimError> {
        check(remote.n, remote.block_size)?;
        let n = remote.n;
        let send = p.alloc(remote.block_size * u64::from(n))?;
        let send = p.reg_mr(&send, access::LOCAL_WRITE)?;
        let feedback = p.alloc(4 * u64::from(n))?;
        let feedback = p.reg_mr(&feedback, access::LOCAL_WRITE)?;
        let send_cq = p.create_cq(n + 4)?;
        let recv_cq = p.create_cq(n + 4)?;
        let mut qp = p.create_qp(&init(n, cfg.path_mtu), send_cq.cqn(), recv_cq.cqn())?;
        for k in 0..n {
            let sge = feedback.sge(4 * u64::from(k), 4);
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
            feedback,
            remote,
            free: (0..n).collect(),
            busy: vec![false; n as usize],
            unreaped: 0,
            framing: Framing::new(remote.block_size),
            wcs: Vec::new(),
            work: Work::default(),
        })
    }

    /// The requester QP's address.
    pub fn qp(&self) -> QpAddr {
        self.qp.addr()
    }

    fn take_feedback(&mut self) -> Result<bool, ShimError> {
        poll_ok(&mut *self.recv_cq, &mut self.wcs)?;
        self.work.poll(self.wcs.len());
        let slots: Vec<u64> = self.wcs.iter().map(|w| w.wr_id).collect();
        for wr_id in &slots {
            let slot = wr_id % u64::from(self.remote.n);
            let mut b = [0u8; 4];
            self.feedback.buf.read(4 * slot, &mut b)?;
            let sge = self.feedback.sge(4 * slot, 4);
            self.qp.post_recv(&[RecvWr {
                wr_id: slot,
                sges: &[sge],
            }])?;
            self.work.post(1);
            // The responder's word: only a buffer in flight comes back.
            let buf = u32::from_be_bytes(b);
            if let Some(busy) = self.busy.get_mut(buf as usize).filter(|b| **b) {
                *busy = false;
                self.free.push_back(buf);
            }
        }
        if self.unreaped > 0 {
            poll_ok(&mut *self.send_cq, &mut self.wcs)?;
            self.work.poll(self.wcs.len());
            self.unreaped = self.unreaped.saturating_sub(self.wcs.len() as u64);
        }
        Ok(!slots.is_empty())
    }
}

impl BlockSender for CpwrSender {
    fn kind(&self) -> Kind {
        Kind::Cpwr
    }

    fn try_send(&mut self, _now_ns: u64, dev: u8, data: &[u8]) -> Result<Option<u16>, ShimError> {
        self.framing.check(data.len())?;
        self.take_feedback()?;
        if self.unreaped >= u64::from(self.remote.n) {
            return Ok(None);
        }
        let Some(buf) = self.free.pop_front() else {
            return Ok(None);
        };
        let (packet, bytes) = self.framing.fill(&self.send.buf, buf, dev, data)?;
        self.work.copy(u64::from(bytes));
        let base = u64::from(buf) * self.remote.block_size;
        let sge = self.send.sge(base, bytes);
        self.qp.post_send(&[SendWr {
            wr_id: u64::from(buf),
            op: SendOp::WriteImm(
                RemoteAddr {
                    addr: self.remote.pool.addr + base,
                    rkey: self.remote.pool.rkey,
                },
                (buf << 24) | (bytes & 0x00ff_ffff),
            ),
            sges: &[sge],
            inline: None,
            signaled: true,
        }])?;
        self.work.post(1);
        if let Some(b) = self.busy.get_mut(buf as usize) {
            *b = true;
        }
        self.unreaped += 1;
        Ok(Some(packet))
    }

    fn poll(&mut self, _now_ns: u64) -> Result<bool, ShimError> {
        self.take_feedback()
    }

    fn in_flight(&self) -> u64 {
        self.busy.iter().filter(|b| **b).count() as u64
    }

    fn unfinished(&self) -> u64 {
        self.unreaped
    }

    fn take_work(&mut self) -> Work {
        self.work.take()
    }
}
