//! The control path as one guest sees it: [`GuestPort`] implements `HcaControl`.

use crate::hca::HcaState;
use crate::mr::GuestId;
use crate::objects::{Cq, Qp, QpState, QpStats};
use resex_guestmem::{GuestAddress, PageRing};
use resex_mlx5::cqe::CqeSize;
use resex_mlx5::writer::CqWriter;
use resex_mlx5::{mtu_bytes_to_enum, SEND_WQE_BB};
use resex_proto::doorbell::Doorbell;
use resex_proto::hca::{
    ControlError, CreateCq, CreateQp, Geometry, HcaControl, MrKeys, Place, QpAddr, QueueKind,
    RegMr, RingDesc,
};
use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most CQs or QPs one HCA holds.
pub const MAX_OBJECTS: usize = 1 << 16;

/// One guest's handle on the HCA's control path.
#[derive(Debug, Clone)]
pub struct GuestPort {
    pub(crate) hca: Arc<Mutex<HcaState>>,
    pub(crate) guest: GuestId,
}

fn lock(m: &Mutex<HcaState>) -> MutexGuard<'_, HcaState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn ring(desc: &RingDesc, len: u64, ram: u64, place: Place) -> Result<PageRing, ControlError> {
    PageRing::new(&desc.pages, desc.offset, len, ram).map_err(|e| memory(place, e))
}

/// A ring or record guest memory refused, with guest memory's reason.
fn memory(place: Place, e: impl std::fmt::Display) -> ControlError {
    ControlError::Memory {
        place,
        reason: e.to_string(),
    }
}

fn dbrec_ok(addr: u64, ram: u64, queue: QueueKind) -> Result<GuestAddress, ControlError> {
    if !addr.is_multiple_of(8) || addr.checked_add(8).is_none_or(|e| e > ram) {
        return Err(ControlError::DoorbellRecord { queue, addr, ram });
    }
    Ok(GuestAddress(addr))
}

impl GuestPort {
    /// The guest's id on the HCA.
    pub fn guest(&self) -> GuestId {
        self.guest
    }

    /// What the HCA executed on each of this guest's QPs, by QPN (ground truth for tests that
    /// compare a monitor's counts).
    pub fn qp_stats(&self) -> Vec<(u32, crate::objects::QpStats)> {
        let st = lock(&self.hca);
        st.qps
            .iter()
            .filter(|(_, q)| q.guest == self.guest)
            .map(|(n, q)| (*n, q.stats))
            .collect()
    }

    /// What the HCA executed on this guest's destroyed QPs, summed, and how many there were.
    pub fn retired_stats(&self) -> (QpStats, u64) {
        let st = lock(&self.hca);
        st.guests
            .get(&self.guest)
            .map_or((QpStats::default(), 0), |g| (g.retired, g.retired_qps))
    }

    /// What the HCA executed on one of this guest's QPs.
    pub fn stats(&self, qpn: u32) -> Option<QpStats> {
        let st = lock(&self.hca);
        st.qps
            .get(&qpn)
            .filter(|q| q.guest == self.guest)
            .map(|q| q.stats)
    }

    /// Makes `stream` this guest's doorbell (the guest writes rings on its other end): from now
    /// on the polling thread waits for its rings rather than polling its doorbell records.
    /// Refused when no thread waits on doorbells (the lab's virtual clock, a timer-polled HCA).
    pub fn attach_doorbell(&self, stream: UnixStream) -> Result<(), ControlError> {
        let mut st = lock(&self.hca);
        if !st.waits {
            return Err(ControlError::Unavailable(
                "this HCA's thread polls the doorbell records: no doorbell needed".into(),
            ));
        }
        stream
            .set_nonblocking(true)
            .map_err(|e| ControlError::NoResources(format!("a doorbell: {e}")))?;
        let g = st.guests.get_mut(&self.guest).ok_or_else(|| {
            ControlError::Unavailable("this guest was removed from the HCA".into())
        })?;
        g.rings = true;
        st.new_bells.push((self.guest, stream));
        Ok(())
    }

    fn ram(&self, st: &HcaState) -> Result<u64, ControlError> {
        st.guests
            .get(&self.guest)
            .map(|g| g.mem.size())
            .ok_or_else(|| ControlError::Unavailable("this guest was removed from the HCA".into()))
    }
}

impl HcaControl for GuestPort {
    fn create_cq(&self, req: &CreateCq) -> Result<u32, ControlError> {
        let mut st = lock(&self.hca);
        let ram = self.ram(&st)?;
        if st.cqs.len() >= MAX_OBJECTS {
            return Err(ControlError::NoResources("completion queues".into()));
        }
        let size = CqeSize::from_bytes(req.cqe_size)
            .ok_or(ControlError::Geometry(Geometry::CqeSize(req.cqe_size)))?;
        if !req.cqe_cnt.is_power_of_two() || req.cqe_cnt > 1 << 22 || req.cqe_cnt < 2 {
            return Err(ControlError::Geometry(Geometry::CqeCount(req.cqe_cnt)));
        }
        let pages = ring(
            &req.ring,
            u64::from(req.cqe_cnt) * size.bytes(),
            ram,
            Place::CqBuffer,
        )?;
        let dbrec = dbrec_ok(req.dbrec, ram, QueueKind::Cq)?;
        let writer =
            CqWriter::new(pages, req.cqe_cnt, size, 0).map_err(|e| memory(Place::CqBuffer, e))?;
        let mem = st.guests[&self.guest].mem.clone();
        writer.init(&*mem).map_err(|e| memory(Place::CqBuffer, e))?;
        mem.write_be32(dbrec, 0)
            .map_err(|e| memory(Place::CqDoorbell, e))?;
        st.next_cqn += 1;
        let cqn = st.next_cqn;
        st.cqs.insert(
            cqn,
            Cq {
                guest: self.guest,
                writer,
                dbrec,
                full_stalls: 0,
            },
        );
        Ok(cqn)
    }

    fn create_qp(&self, req: &CreateQp) -> Result<u32, ControlError> {
        let mut st = lock(&self.hca);
        let ram = self.ram(&st)?;
        if st.qps.len() >= MAX_OBJECTS {
            return Err(ControlError::NoResources("queue pairs".into()));
        }
        if !req.sq_wqe_cnt.is_power_of_two() || req.sq_wqe_cnt > 1 << 15 {
            return Err(ControlError::Geometry(Geometry::SqWqeCount(req.sq_wqe_cnt)));
        }
        let sq = ring(
            &req.sq,
            u64::from(req.sq_wqe_cnt) * SEND_WQE_BB,
            ram,
            Place::SqBuffer,
        )?;
        let rq = if req.rq_wqe_cnt == 0 {
            None
        } else {
            if !req.rq_wqe_cnt.is_power_of_two()
                || req.rq_wqe_cnt > 1 << 15
                || !req.rq_stride.is_power_of_two()
                || !(16..=1024).contains(&req.rq_stride)
            {
                return Err(ControlError::Geometry(Geometry::RecvQueue {
                    wqes: req.rq_wqe_cnt,
                    stride: req.rq_stride,
                }));
            }
            Some(ring(
                &req.rq,
                u64::from(req.rq_wqe_cnt) * u64::from(req.rq_stride),
                ram,
                Place::RqBuffer,
            )?)
        };
        let dbrec = dbrec_ok(req.dbrec, ram, QueueKind::Qp)?;
        for cqn in [req.send_cq, req.recv_cq] {
            if st.cqs.get(&cqn).is_none_or(|c| c.guest != self.guest) {
                return Err(ControlError::NotFound(format!("completion queue {cqn}")));
            }
        }
        if mtu_bytes_to_enum(req.path_mtu).is_none() {
            return Err(ControlError::Geometry(Geometry::PathMtu(req.path_mtu)));
        }
        let mem = st.guests[&self.guest].mem.clone();
        mem.write(dbrec, &[0u8; 8])
            .map_err(|e| memory(Place::QpDoorbell, e))?;
        let qpn = loop {
            st.next_qpn = (st.next_qpn + 1) & 0x00ff_ffff;
            if st.next_qpn >= 0x100 && !st.qps.contains_key(&st.next_qpn) {
                break st.next_qpn;
            }
        };
        st.qps.insert(
            qpn,
            Qp {
                qpn,
                guest: self.guest,
                state: QpState::Init,
                remote: None,
                sq,
                sq_cnt: req.sq_wqe_cnt,
                sq_ci: 0,
                dbrec,
                rq,
                rq_cnt: req.rq_wqe_cnt,
                rq_stride: req.rq_stride,
                rq_ci: 0,
                send_cq: req.send_cq,
                recv_cq: req.recv_cq,
                mtu: u64::from(req.path_mtu),
                wrs: VecDeque::new(),
                req_next: 0,
                req_active: false,
                resp_active: false,
                stats: QpStats::default(),
            },
        );
        Ok(qpn)
    }

    fn connect_qp(&self, qpn: u32, remote: QpAddr) -> Result<(), ControlError> {
        let mut st = lock(&self.hca);
        if !st.qps.contains_key(&remote.qpn) {
            return Err(ControlError::NotFound(format!(
                "remote queue pair {:#x}",
                remote.qpn
            )));
        }
        let q = st
            .qps
            .get_mut(&qpn)
            .filter(|q| q.guest == self.guest)
            .ok_or_else(|| ControlError::NotFound(format!("queue pair {qpn:#x}")))?;
        if q.state != QpState::Init {
            return Err(ControlError::AlreadyConnected { qpn });
        }
        q.remote = Some(remote.qpn);
        q.state = QpState::Rts;
        Ok(())
    }

    fn destroy_qp(&self, qpn: u32) -> Result<(), ControlError> {
        let mut st = lock(&self.hca);
        if st.qps.get(&qpn).is_none_or(|q| q.guest != self.guest) {
            return Err(ControlError::NotFound(format!("queue pair {qpn:#x}")));
        }
        if let Some(q) = st.qps.remove(&qpn) {
            if let Some(g) = st.guests.get_mut(&self.guest) {
                g.retired += q.stats;
                g.retired_qps += 1;
            }
        }
        st.link.forget(qpn);
        Ok(())
    }

    fn reg_mr(&self, req: &RegMr) -> Result<MrKeys, ControlError> {
        let mut st = lock(&self.hca);
        let ram = self.ram(&st)?;
        let guest = self.guest;
        st.mrs.register(guest, req, ram)
    }

    fn dereg_mr(&self, lkey: u32) -> Result<(), ControlError> {
        let mut st = lock(&self.hca);
        let guest = self.guest;
        st.mrs.deregister(guest, lkey)
    }

    /// A doorbell over a socket pair whose other end goes to the polling thread.
    fn doorbell(&self) -> Result<Doorbell, ControlError> {
        let (guest_end, device_end) = UnixStream::pair()
            .map_err(|e| ControlError::NoResources(format!("a doorbell socket: {e}")))?;
        self.attach_doorbell(device_end)?;
        Doorbell::new(guest_end).map_err(|e| ControlError::NoResources(format!("a doorbell: {e}")))
    }
}
