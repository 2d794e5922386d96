//! A synthetic guest: scattered rings in guest memory, a guest provider that posts real mlx5
//! WQEs, and a minimal in-order HCA that writes real CQEs; with the ground truth of what it
//! executed, computed from the work requests themselves (not by parsing rings).
//!
//! Tests, the benchmark and `resex ibmon synth` use it. It is not the software HCA (that one
//! moves bytes over a modelled link); it only produces the queue memory a real one would.

use crate::counters::Counters;
use resex_guestmem::{GuestAddress, GuestMemory, PageRing, PAGE_SIZE};
use resex_mlx5::consts::{cqe_op, send_op, syndrome};
use resex_mlx5::dbrec::{write_cq_ci, write_sq_pi};
use resex_mlx5::{
    packets, CqWriter, Cqe, CqeSize, DataSeg, RaddrSeg, SqWriter, WqeSpec, MAX_WQE_BBS,
};
use resex_proto::{
    CqRegistration, QpRegistration, Registration, SqRegistration, REGISTRATION_VERSION,
};
use std::collections::VecDeque;

/// Shape of a synthetic guest.
#[derive(Clone, Debug)]
pub struct SynthConfig {
    /// Number of QPs (QPNs 0x100, 0x101, ...).
    pub qps: usize,
    /// SQ basic blocks (power of two).
    pub wqe_cnt: u32,
    /// CQ entries (power of two).
    pub cqe_cnt: u32,
    /// CQ entry size.
    pub cqe_size: CqeSize,
    /// Path MTU in bytes.
    pub path_mtu: u32,
    /// One CQ for send and receive per QP (otherwise a separate receive CQ).
    pub shared_cq: bool,
    /// Starting SQ basic-block counter (to exercise the 16-bit wrap).
    pub sq_start: u32,
    /// Starting CQ index (to exercise the 24-bit wrap).
    pub cq_start: u32,
    /// Byte offset of each SQ in its first page (a multiple of 64 below 4096).
    pub sq_offset: u64,
    /// Seed for scattering pages.
    pub seed: u64,
}

impl Default for SynthConfig {
    fn default() -> SynthConfig {
        SynthConfig {
            qps: 1,
            wqe_cnt: 64,
            cqe_cnt: 64,
            cqe_size: CqeSize::B64,
            path_mtu: 1024,
            shared_cq: false,
            sq_start: 0,
            cq_start: 0,
            sq_offset: 0,
            seed: 1,
        }
    }
}

/// One work request, as an application posts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wr {
    /// Send opcode.
    pub opcode: u8,
    /// SGE lengths (zero-length entries are skipped by the provider).
    pub sges: Vec<u32>,
    /// Send the SGEs' bytes inline.
    pub inline: bool,
    /// Ask for a CQE.
    pub signaled: bool,
}

impl Wr {
    /// Bytes of payload.
    pub fn len(&self) -> u64 {
        self.sges.iter().map(|&s| u64::from(s)).sum()
    }

    /// True when there is no payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the monitor must count for this WR once it completed, at `mtu`.
    pub fn truth(&self, mtu: u64) -> Counters {
        let mut c = Counters {
            wqes: 1,
            ..Counters::default()
        };
        let len = self.len();
        match self.opcode {
            send_op::SEND | send_op::SEND_IMM | send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM => {
                c.add_tx(len, packets(len, mtu));
            }
            send_op::RDMA_READ => {
                c.add_tx(0, 1);
                c.add_rx_read(len, packets(len, mtu));
            }
            send_op::ATOMIC_CS | send_op::ATOMIC_FA => {
                c.add_tx(0, 1);
                c.add_rx_read(0, 1);
            }
            _ => {}
        }
        c
    }
}

#[derive(Debug)]
struct Posted {
    index: u16,
    bbs: u32,
    signaled: bool,
    truth: Counters,
}

#[derive(Debug)]
struct SynthCq {
    writer: CqWriter,
    dbrec: GuestAddress,
    /// Guest consumer index.
    ci: u32,
    /// For each produced, unpolled CQE: (qp, Some((wqe index, bbs)) for requester CQEs).
    unpolled: VecDeque<(usize, Option<(u16, u32)>)>,
}

#[derive(Debug)]
struct SynthQp {
    qpn: u32,
    sq: SqWriter,
    posted: VecDeque<Posted>,
    /// Completed unsignalled WQEs awaiting the CQE that reports them.
    pending_truth: Counters,
    send_cq: usize,
    recv_cq: usize,
}

/// A synthetic guest over any guest memory.
#[derive(Debug)]
pub struct SynthGuest {
    reg: Registration,
    qps: Vec<SynthQp>,
    cqs: Vec<SynthCq>,
    truth: Vec<Counters>,
    mtu: u64,
}

/// Deterministic page allocator: hands out pages of RAM in a shuffled order.
struct Pages {
    free: Vec<u64>,
}

impl Pages {
    fn new(ram_size: u64, seed: u64) -> Pages {
        let mut free: Vec<u64> = (1..ram_size / PAGE_SIZE).map(|p| p * PAGE_SIZE).collect();
        let mut x = seed | 1;
        for i in (1..free.len()).rev() {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let j = usize::try_from(x % (i as u64 + 1)).unwrap_or(0);
            free.swap(i, j);
        }
        Pages { free }
    }

    fn take(&mut self, n: u64) -> Option<Vec<u64>> {
        (0..n).map(|_| self.free.pop()).collect()
    }
}

/// The guest RAM is too small for the rings asked for.
#[derive(Debug, thiserror::Error)]
#[error("synthetic guest needs more RAM than {0} bytes")]
pub struct TooSmall(pub u64);

impl SynthGuest {
    /// Lays out rings in `mem` (page 0 holds the doorbell records), initialises them, and
    /// builds the registration document.
    pub fn new<M: GuestMemory + ?Sized>(
        mem: &M,
        cfg: &SynthConfig,
    ) -> Result<SynthGuest, TooSmall> {
        let small = || TooSmall(mem.size());
        let mut pages = Pages::new(mem.size(), cfg.seed);
        let mut next_db = 0u64;
        let mut db = || {
            next_db += 64;
            GuestAddress(next_db - 64)
        };
        let ring = |pages: &mut Pages, offset: u64, len: u64| -> Result<PageRing, TooSmall> {
            let p = pages
                .take((offset + len).div_ceil(PAGE_SIZE))
                .ok_or_else(small)?;
            PageRing::new(&p, offset, len, mem.size()).map_err(|_| small())
        };
        let mut cqs = Vec::new();
        let mut qps = Vec::new();
        let mut regs = Vec::new();
        let new_cq = |pages: &mut Pages,
                      dbrec: GuestAddress|
         -> Result<(SynthCq, CqRegistration), TooSmall> {
            let r = ring(pages, 0, u64::from(cfg.cqe_cnt) * cfg.cqe_size.bytes())?;
            let writer = CqWriter::new(r.clone(), cfg.cqe_cnt, cfg.cqe_size, cfg.cq_start)
                .map_err(|_| small())?;
            writer.init(mem).map_err(|_| small())?;
            write_cq_ci(mem, dbrec, cfg.cq_start).map_err(|_| small())?;
            let reg = CqRegistration {
                pages: r.pages().to_vec(),
                offset: 0,
                cqe_cnt: cfg.cqe_cnt,
                cqe_size: u32::try_from(cfg.cqe_size.bytes()).unwrap_or(64),
                dbrec: dbrec.0,
                start: cfg.cq_start & 0x00ff_ffff,
            };
            Ok((
                SynthCq {
                    writer,
                    dbrec,
                    ci: cfg.cq_start & 0x00ff_ffff,
                    unpolled: VecDeque::new(),
                },
                reg,
            ))
        };
        for i in 0..cfg.qps {
            let qpn = 0x100 + u32::try_from(i).unwrap_or(0);
            let sq_ring = ring(&mut pages, cfg.sq_offset, u64::from(cfg.wqe_cnt) * 64)?;
            let dbrec = db();
            write_sq_pi(mem, dbrec, resex_mlx5::index16(cfg.sq_start)).map_err(|_| small())?;
            let sq = SqWriter::new(sq_ring.clone(), cfg.wqe_cnt, dbrec, cfg.sq_start)
                .map_err(|_| small())?;
            let (scq, scq_reg) = new_cq(&mut pages, db())?;
            cqs.push(scq);
            let send_cq = cqs.len() - 1;
            let (recv_cq, recv_reg) = if cfg.shared_cq {
                (send_cq, None)
            } else {
                let (rcq, reg) = new_cq(&mut pages, db())?;
                cqs.push(rcq);
                (cqs.len() - 1, Some(reg))
            };
            regs.push(QpRegistration {
                qpn,
                sq: SqRegistration {
                    pages: sq_ring.pages().to_vec(),
                    offset: cfg.sq_offset,
                    wqe_cnt: cfg.wqe_cnt,
                    dbrec: dbrec.0,
                    start: cfg.sq_start,
                },
                send_cq: scq_reg,
                recv_cq: recv_reg,
            });
            qps.push(SynthQp {
                qpn,
                sq,
                posted: VecDeque::new(),
                pending_truth: Counters::default(),
                send_cq,
                recv_cq,
            });
        }
        let reg = Registration {
            rings: Vec::new(),
            version: REGISTRATION_VERSION,
            vm: Some("synth".into()),
            path_mtu: cfg.path_mtu,
            qps: regs,
            mailbox: None,
        };
        Ok(SynthGuest {
            reg,
            truth: vec![Counters::default(); qps.len()],
            qps,
            cqs,
            mtu: u64::from(cfg.path_mtu),
        })
    }

    /// The registration document of this guest.
    pub fn registration(&self) -> &Registration {
        &self.reg
    }

    /// Ground truth per QP (QPN order): what the monitor must have counted once it has read
    /// every CQE written so far.
    pub fn truth(&self) -> &[Counters] {
        &self.truth
    }

    /// Number of QPs.
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }

    /// Number of CQs, and the doorbell record of CQ `i` (to match the monitor's CQs).
    pub fn cq_dbrec(&self, i: usize) -> u64 {
        self.cqs[i].dbrec.0
    }

    /// Number of distinct CQs.
    pub fn cq_count(&self) -> usize {
        self.cqs.len()
    }

    /// Unpolled CQEs on CQ `i`.
    pub fn unpolled(&self, i: usize) -> usize {
        self.cqs[i].unpolled.len()
    }

    /// Posts a work request on QP `qp` (SGEs are trimmed so the WQE fits the ring). Returns
    /// false when the SQ has no room.
    pub fn post<M: GuestMemory + ?Sized>(&mut self, mem: &M, qp: usize, wr: &Wr) -> bool {
        let q = &mut self.qps[qp];
        let mut wr = wr.clone();
        let max_bbs = q.sq.free().min(MAX_WQE_BBS);
        let fixed = match wr.opcode {
            send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM | send_op::RDMA_READ => 2,
            send_op::ATOMIC_CS | send_op::ATOMIC_FA => 3,
            _ => 1,
        };
        if wr.opcode == send_op::NOP {
            wr.sges.clear();
        }
        if matches!(
            wr.opcode,
            send_op::RDMA_READ | send_op::ATOMIC_CS | send_op::ATOMIC_FA
        ) {
            wr.inline = false;
        }
        if matches!(wr.opcode, send_op::ATOMIC_CS | send_op::ATOMIC_FA) {
            wr.sges = vec![8];
        }
        // Trim to what fits in max_bbs basic blocks.
        let room_ds = (max_bbs * 4).saturating_sub(fixed);
        if wr.inline {
            let room = (room_ds * 16).saturating_sub(4);
            let mut total = 0u32;
            wr.sges.retain(|&s| {
                let keep = u64::from(total) + u64::from(s) <= u64::from(room);
                if keep {
                    total += s;
                }
                keep
            });
        } else {
            let mut n = 0;
            wr.sges.retain(|&s| {
                let keep = s == 0 || n < room_ds;
                if s != 0 && keep {
                    n += 1;
                }
                keep
            });
        }
        let data: Vec<u8> = if wr.inline {
            vec![0xab; usize::try_from(wr.len()).unwrap_or(0)]
        } else {
            Vec::new()
        };
        let sges: Vec<DataSeg> = wr
            .sges
            .iter()
            .enumerate()
            .map(|(i, &n)| DataSeg {
                byte_count: n,
                lkey: 0x77,
                addr: 0x10_0000 + 0x1000 * i as u64,
            })
            .collect();
        let spec = WqeSpec {
            signaled: wr.signaled,
            imm: 0x1234,
            raddr: Some(RaddrSeg {
                raddr: 0x2000_0000,
                rkey: 0x99,
            }),
            atomic: Some(Default::default()),
            sges: &sges,
            inline: wr.inline.then_some(&data[..]),
            ..WqeSpec::new(wr.opcode, q.qpn)
        };
        // A WQE that fills the SQ must be signalled, or nothing would ever free the ring (real
        // applications signal at least once per ring's worth of WQEs).
        let bbs = spec.build(0).map_or(1, |b| (b.len() as u64).div_ceil(64));
        let spec = WqeSpec {
            signaled: wr.signaled || bbs >= u64::from(q.sq.free()),
            ..spec
        };
        wr.signaled = spec.signaled;
        match q.sq.post(mem, &spec) {
            Ok((index, bbs)) => {
                q.posted.push_back(Posted {
                    index,
                    bbs,
                    signaled: wr.signaled,
                    truth: wr.truth(self.mtu),
                });
                true
            }
            Err(_) => false,
        }
    }

    /// Publishes every QP's producer counter.
    pub fn ring_doorbells<M: GuestMemory + ?Sized>(&self, mem: &M) {
        for q in &self.qps {
            let _ = q.sq.ring_doorbell(mem);
        }
    }

    /// The HCA executes up to `n` posted WQEs of QP `qp` in order, writing a CQE for each
    /// signalled one (stopping when its CQ is full). With `fail`, the first one fails instead
    /// (an error CQE, with no bytes counted for it). Returns how many completed.
    pub fn complete<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        qp: usize,
        n: usize,
        fail: bool,
    ) -> usize {
        let mut done = 0;
        while done < n {
            let q = &mut self.qps[qp];
            let Some(w) = q.posted.front() else { break };
            let cq = &mut self.cqs[q.send_cq];
            let failing = fail && done == 0;
            if (w.signaled || failing) && !cq.writer.has_room(cq.ci) {
                break;
            }
            let Some(w) = q.posted.pop_front() else { break };
            if failing {
                let cqe = Cqe {
                    opcode: cqe_op::REQ_ERR,
                    qpn: q.qpn,
                    wqe_counter: w.index,
                    syndrome: syndrome::REMOTE_ACCESS,
                    ..Cqe::default()
                };
                let _ = cq.writer.push(mem, &cqe);
                cq.unpolled.push_back((qp, Some((w.index, w.bbs))));
                let mut t = std::mem::take(&mut q.pending_truth);
                t.completions += 1;
                t.errors += 1;
                self.truth[qp] += t;
            } else if w.signaled {
                let cqe = Cqe {
                    opcode: cqe_op::REQ,
                    qpn: q.qpn,
                    send_opcode: 0,
                    wqe_counter: w.index,
                    ..Cqe::default()
                };
                let _ = cq.writer.push(mem, &cqe);
                cq.unpolled.push_back((qp, Some((w.index, w.bbs))));
                let mut t = std::mem::take(&mut q.pending_truth);
                t += w.truth;
                t.completions += 1;
                self.truth[qp] += t;
            } else {
                q.pending_truth += w.truth;
            }
            done += 1;
        }
        done
    }

    /// True when QP `qp` has posted WQEs the HCA has not executed, or executed unsignalled
    /// WQEs no CQE reported yet.
    pub fn has_unreported(&self, qp: usize) -> bool {
        !self.qps[qp].posted.is_empty() || self.qps[qp].pending_truth != Counters::default()
    }

    /// The HCA delivers a received SEND of `bytes` to QP `qp`'s receive CQ. False when full.
    pub fn receive<M: GuestMemory + ?Sized>(&mut self, mem: &M, qp: usize, bytes: u32) -> bool {
        let q = &self.qps[qp];
        let cq = &mut self.cqs[q.recv_cq];
        if !cq.writer.has_room(cq.ci) {
            return false;
        }
        let cqe = Cqe {
            opcode: cqe_op::RESP_SEND,
            qpn: q.qpn,
            byte_cnt: bytes,
            ..Cqe::default()
        };
        let _ = cq.writer.push(mem, &cqe);
        cq.unpolled.push_back((qp, None));
        self.truth[qp].completions += 1;
        self.truth[qp].recv_bytes += u64::from(bytes);
        true
    }

    /// The guest polls up to `n` CQEs from CQ `cq`, but never past index `limit` (24-bit;
    /// `None`: no limit), freeing SQ space for requester CQEs and writing the consumer index.
    pub fn poll<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        cq: usize,
        n: usize,
        limit: Option<u32>,
    ) -> usize {
        let mut done = 0;
        while done < n {
            let c = &mut self.cqs[cq];
            if limit.is_some_and(|l| c.ci == l) {
                break;
            }
            let Some((qp, req)) = c.unpolled.pop_front() else {
                break;
            };
            c.ci = (c.ci + 1) & 0x00ff_ffff;
            if let Some((index, bbs)) = req {
                self.qps[qp].sq.complete_through(index, bbs);
            }
            done += 1;
        }
        let c = &self.cqs[cq];
        let _ = write_cq_ci(mem, c.dbrec, c.ci);
        done
    }
}
