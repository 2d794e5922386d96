//! The `softhca` provider: rings and buffers live in the guest's own RAM, work requests are
//! written as real mlx5 WQEs and announced through the doorbell record, completions are real
//! mlx5 CQEs polled by owner bit, exactly as rdma-core's mlx5 provider does on hardware. The
//! control path (create CQ/QP, register memory) goes through `HcaControl`.

use crate::buffer::Buffer;
use crate::provider::{
    CompletionQueue, Mr, Provider, QpAddr, QpInit, QueuePair, RecvWr, SendOp, SendWr, Wc, WcOpcode,
    WcStatus,
};
use crate::{Placement, ProtocolError, RequestError, ShimError};
use resex_guestmem::{GuestAddress, GuestMemory, PageRing};
use resex_mlx5::consts::{cqe_op, send_op};
use resex_mlx5::cqe::{is_valid_for, Cqe};
use resex_mlx5::dbrec::{write_cq_ci, write_rq_pi};
use resex_mlx5::wqe::{DataSeg, RaddrSeg, WqeSpec};
use resex_mlx5::writer::{SqWriter, WriteError};
use resex_mlx5::{index16, SEND_WQE_BB};
use resex_proto::doorbell::Doorbell;
use resex_proto::hca::{CreateCq, CreateQp, HcaControl, RegMr, RingDesc};
use resex_proto::{CqRegistration, QpRegistration, SqRegistration};
use std::collections::HashMap;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

mod cq;
mod qp;

use cq::SoftCq;
use qp::SoftQp;

const PAGE: u64 = 4096;
/// Ends a receive WQE's scatter list (rdma-core's `MLX5_INVALID_LKEY`).
const INVALID_LKEY: u32 = 0x100;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The send side of a QP as both the QP (posting) and its CQ (completing) need it.
struct SqShared {
    sq: SqWriter,
    sq_cnt: u32,
    /// Per SQ slot: wr_id, basic blocks, send opcode.
    wrids: Vec<(u64, u32, u8)>,
    rq: Option<PageRing>,
    rq_cnt: u32,
    rq_stride: u32,
    rq_head: u32,
    rq_tail: u32,
    rq_wrids: Vec<u64>,
    dbrec: GuestAddress,
    max_inline: u32,
}

type Registry = Arc<Mutex<HashMap<u32, Arc<Mutex<SqShared>>>>>;

/// Guest memory handed out page by page (identity mapping: the address a work request uses is
/// the guest-physical address, as in the embedded host's guest processes).
#[derive(Debug)]
struct Heap {
    next: u64,
    end: u64,
}

/// Translates an address of the provider's memory to the guest-physical address the device and
/// the host use (`None`: not translatable).
pub type PhysFn = Arc<dyn Fn(u64) -> Option<u64> + Send + Sync>;

/// The softhca provider over a guest's RAM.
pub struct SoftProvider {
    mem: Arc<dyn GuestMemory>,
    ctl: Arc<dyn HcaControl>,
    /// `None`: the memory's addresses are guest-physical (a RAM file).
    phys: Option<PhysFn>,
    heap: Mutex<Heap>,
    qps: Registry,
    /// What the agent registers with the host: every CQ and QP's rings.
    rings: Mutex<Rings>,
    /// The device's doorbell, asked for at the first QP (`None` inside: the device polls).
    bell: std::sync::OnceLock<Option<Arc<Doorbell>>>,
}

#[derive(Debug, Default)]
struct Rings {
    cqs: HashMap<u32, CqRegistration>,
    qps: HashMap<u32, QpRegistration>,
}

impl std::fmt::Debug for SoftProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftProvider")
            .field("heap", &self.heap)
            .finish()
    }
}

/// A QP's ring sizes: (send WQE basic blocks, receive WQEs, receive stride), powers of two,
/// with room for the largest inline WQE per request (inline WQEs take several basic blocks).
fn qp_shape(init: &QpInit) -> (u32, u32, u32) {
    let per_wr = (16 + 16 + 4 + u64::from(init.max_inline))
        .div_ceil(SEND_WQE_BB)
        .max(1);
    let sq_cnt = u32::try_from(u64::from(init.max_send_wr.max(1)) * per_wr)
        .unwrap_or(u32::MAX)
        .next_power_of_two();
    if init.max_recv_wr == 0 {
        (sq_cnt, 0, 16)
    } else {
        (
            sq_cnt,
            init.max_recv_wr.next_power_of_two(),
            (16 * init.max_recv_sge.max(1)).next_power_of_two(),
        )
    }
}

impl SoftProvider {
    /// Records a new QP for the registration document (when its send CQ is known).
    fn record(&self, qpn: u32, sq: SqRegistration, send_cq: u32, recv_cq: u32) {
        let mut rings = lock(&self.rings);
        let send = rings.cqs.get(&send_cq).cloned();
        let recv = rings.cqs.get(&recv_cq).cloned();
        if let Some(send) = send {
            rings.qps.insert(
                qpn,
                QpRegistration {
                    qpn,
                    sq,
                    send_cq: send,
                    recv_cq: recv.filter(|_| recv_cq != send_cq),
                },
            );
        }
    }

    /// A provider that allocates from `[start, start + len)` of `mem` (page aligned) and reaches
    /// the device through `ctl`.
    pub fn new(
        mem: Arc<dyn GuestMemory>,
        start: u64,
        len: u64,
        ctl: Arc<dyn HcaControl>,
    ) -> Result<Self, ShimError> {
        let start = start.div_ceil(PAGE) * PAGE;
        let end = start.saturating_add(len).min(mem.size()) / PAGE * PAGE;
        if end <= start {
            return Err(Placement::Heap {
                start,
                len,
                size: mem.size(),
            }
            .into());
        }
        Ok(Self {
            mem,
            ctl,
            heap: Mutex::new(Heap { next: start, end }),
            qps: Arc::new(Mutex::new(HashMap::new())),
            rings: Mutex::new(Rings::default()),
            phys: None,
            bell: std::sync::OnceLock::new(),
        })
    }

    /// The same over memory whose addresses are not guest-physical (a guest process's own
    /// locked memory inside a VM, `resex_guestmem::PinnedMemory`): every page and doorbell
    /// address handed to the device or registered with the host goes through `phys`.
    pub fn with_phys(
        mem: Arc<dyn GuestMemory>,
        start: u64,
        len: u64,
        ctl: Arc<dyn HcaControl>,
        phys: PhysFn,
    ) -> Result<Self, ShimError> {
        let mut p = Self::new(mem, start, len, ctl)?;
        p.phys = Some(phys);
        Ok(p)
    }

    /// The device's doorbell, asked for once; a device without one polls our doorbell records.
    fn bell(&self) -> Option<Arc<Doorbell>> {
        self.bell
            .get_or_init(|| match self.ctl.doorbell() {
                Ok(b) => Some(Arc::new(b)),
                Err(e) => {
                    tracing::debug!("softhca provider without a doorbell: {e}");
                    None
                }
            })
            .clone()
    }

    /// The registration of a QP's rings (send queue, send and receive CQs), as the agent
    /// sends it to the host's monitor.
    pub fn registration(&self, qpn: u32) -> Option<QpRegistration> {
        lock(&self.rings).qps.get(&qpn).cloned()
    }

    /// Every QP's registration, by QPN.
    pub fn registrations(&self) -> Vec<QpRegistration> {
        let mut v: Vec<QpRegistration> = lock(&self.rings).qps.values().cloned().collect();
        v.sort_by_key(|q| q.qpn);
        v
    }

    /// The guest memory this provider works in.
    pub fn memory(&self) -> &Arc<dyn GuestMemory> {
        &self.mem
    }

    /// Bytes left in the heap.
    pub fn heap_free(&self) -> u64 {
        let h = lock(&self.heap);
        h.end - h.next
    }

    fn pages(buf: &Buffer) -> Vec<u64> {
        let first = buf.base() / PAGE * PAGE;
        let end = (buf.base() + buf.len().max(1)).div_ceil(PAGE) * PAGE;
        (first..end).step_by(4096).collect()
    }

    /// The pages of `buf` as the device and the host see them (guest-physical).
    fn dev_pages(&self, buf: &Buffer) -> Result<Vec<u64>, ShimError> {
        Self::pages(buf)
            .into_iter()
            .map(|p| self.dev_addr(p))
            .collect()
    }

    /// An address of this provider's memory as the device and the host see it.
    fn dev_addr(&self, a: u64) -> Result<u64, ShimError> {
        match &self.phys {
            None => Ok(a),
            Some(f) => f(a).ok_or(Placement::NoGuestPhysical { addr: a }.into()),
        }
    }

    fn dev_ring(&self, buf: &Buffer) -> Result<RingDesc, ShimError> {
        Ok(RingDesc {
            pages: self.dev_pages(buf)?,
            offset: buf.base() % PAGE,
        })
    }
}

impl Provider for SoftProvider {
    fn name(&self) -> &'static str {
        "softhca"
    }

    fn alloc(&self, len: u64) -> Result<Buffer, ShimError> {
        let mut h = lock(&self.heap);
        let size = len.max(1).div_ceil(PAGE) * PAGE;
        if h.end - h.next < size {
            return Err(ShimError::OutOfMemory {
                wanted: len,
                free: h.end - h.next,
            });
        }
        let at = h.next;
        h.next += size;
        drop(h);
        // Fresh memory is zero, as the device and the protocols expect.
        let zeros = vec![0u8; usize::try_from(size.min(1 << 20)).unwrap_or(4096)];
        let mut off = 0;
        while off < size {
            let n = (size - off).min(zeros.len() as u64);
            self.mem.write(
                GuestAddress(at + off),
                &zeros[..usize::try_from(n).unwrap_or(0)],
            )?;
            off += n;
        }
        Buffer::new(self.mem.clone(), at, at, len)
    }

    fn reg_mr(&self, buf: &Buffer, access: u32) -> Result<Mr, ShimError> {
        let keys = self.ctl.reg_mr(&RegMr {
            iova: buf.addr(),
            length: buf.len(),
            pages: self.dev_pages(buf)?,
            access,
        })?;
        Ok(Mr {
            buf: buf.clone(),
            lkey: keys.lkey,
            rkey: keys.rkey,
        })
    }

    fn dereg_mr(&self, mr: &Mr) -> Result<(), ShimError> {
        Ok(self.ctl.dereg_mr(mr.lkey)?)
    }

    fn create_cq(&self, entries: u32) -> Result<Box<dyn CompletionQueue>, ShimError> {
        let cnt = entries.saturating_add(1).next_power_of_two().max(2);
        let buf = self.alloc(u64::from(cnt) * 64)?;
        let dbrec = self.alloc(8)?;
        let cqn = self.ctl.create_cq(&CreateCq {
            ring: self.dev_ring(&buf)?,
            cqe_cnt: cnt,
            cqe_size: 64,
            dbrec: self.dev_addr(dbrec.base())?,
        })?;
        let ring = PageRing::new(&Self::pages(&buf), 0, u64::from(cnt) * 64, self.mem.size())?;
        lock(&self.rings).cqs.insert(
            cqn,
            CqRegistration {
                pages: self.dev_pages(&buf)?,
                offset: 0,
                cqe_cnt: cnt,
                cqe_size: 64,
                dbrec: self.dev_addr(dbrec.base())?,
                start: 0,
            },
        );
        Ok(Box::new(SoftCq {
            cqn,
            mem: self.mem.clone(),
            ring,
            log: cnt.trailing_zeros(),
            ci: 0,
            dbrec: GuestAddress(dbrec.base()),
            qps: self.qps.clone(),
        }))
    }

    fn create_qp(
        &self,
        init: &QpInit,
        send_cq: u32,
        recv_cq: u32,
    ) -> Result<Box<dyn QueuePair>, ShimError> {
        // The doorbell first, so that the device never sees this QP unrung.
        let bell = self.bell();
        let (sq_cnt, rq_cnt, rq_stride) = qp_shape(init);
        let sq_buf = self.alloc(u64::from(sq_cnt) * SEND_WQE_BB)?;
        let rq_buf = if rq_cnt > 0 {
            Some(self.alloc(u64::from(rq_cnt) * u64::from(rq_stride))?)
        } else {
            None
        };
        let dbrec = self.alloc(8)?;
        let qpn = self.ctl.create_qp(&CreateQp {
            sq: self.dev_ring(&sq_buf)?,
            sq_wqe_cnt: sq_cnt,
            rq: match &rq_buf {
                Some(b) => self.dev_ring(b)?,
                None => RingDesc {
                    pages: vec![],
                    offset: 0,
                },
            },
            rq_wqe_cnt: rq_cnt,
            rq_stride,
            dbrec: self.dev_addr(dbrec.base())?,
            send_cq,
            recv_cq,
            path_mtu: init.path_mtu,
        })?;
        let size = self.mem.size();
        let sq_ring = PageRing::new(
            &Self::pages(&sq_buf),
            0,
            u64::from(sq_cnt) * SEND_WQE_BB,
            size,
        )?;
        let sq = SqWriter::new(sq_ring, sq_cnt, GuestAddress(dbrec.base()), 0)
            .map_err(ShimError::Writer)?;
        let rq = match &rq_buf {
            Some(b) => Some(PageRing::new(
                &Self::pages(b),
                0,
                u64::from(rq_cnt) * u64::from(rq_stride),
                size,
            )?),
            None => None,
        };
        let shared = Arc::new(Mutex::new(SqShared {
            sq,
            sq_cnt,
            wrids: vec![(0, 1, 0); sq_cnt as usize],
            rq,
            rq_cnt,
            rq_stride,
            rq_head: 0,
            rq_tail: 0,
            rq_wrids: vec![0; rq_cnt as usize],
            dbrec: GuestAddress(dbrec.base()),
            max_inline: init.max_inline,
        }));
        lock(&self.qps).insert(qpn, shared.clone());
        let sq_reg = SqRegistration {
            pages: self.dev_pages(&sq_buf)?,
            offset: 0,
            wqe_cnt: sq_cnt,
            dbrec: self.dev_addr(dbrec.base())?,
            start: 0,
        };
        self.record(qpn, sq_reg, send_cq, recv_cq);
        Ok(Box::new(SoftQp {
            qpn,
            mem: self.mem.clone(),
            ctl: self.ctl.clone(),
            bell,
            shared,
            registry: self.qps.clone(),
            segs: Vec::new(),
        }))
    }
}
