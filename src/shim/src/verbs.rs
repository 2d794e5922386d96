//! The `verbs` provider (feature `rdma`): real RDMA devices through libibverbs (rdma-sys).
//!
//! Buffers are ordinary page-aligned process memory registered with `ibv_reg_mr`; the address a
//! work request uses is the buffer's virtual address. On a machine without a device,
//! [`VerbsProvider::open`] fails with one clear line (here `ibv_get_device_list` fails with
//! ENOSYS: no RDMA subsystem).

use crate::buffer::Buffer;
use crate::provider::{
    CompletionQueue, Mr, Provider, QpAddr, QpInit, QueuePair, RecvWr, SendOp, SendWr, Wc, WcOpcode,
    WcStatus,
};
use crate::{RequestError, ShimError};
use rdma_sys::*;
use resex_guestmem::{GuestMemory, VecMemory};
use std::collections::HashMap;
use std::ptr;
use std::sync::{Arc, Mutex};

/// The mlx5 syndrome closest to a verbs completion status (the shim reports mlx5 syndromes).
pub fn syndrome_of(status: u32) -> u8 {
    match status {
        ibv_wc_status::IBV_WC_LOC_LEN_ERR => 0x01,
        ibv_wc_status::IBV_WC_LOC_QP_OP_ERR => 0x02,
        ibv_wc_status::IBV_WC_LOC_PROT_ERR => 0x04,
        ibv_wc_status::IBV_WC_WR_FLUSH_ERR => 0x05,
        ibv_wc_status::IBV_WC_LOC_ACCESS_ERR => 0x11,
        ibv_wc_status::IBV_WC_REM_INV_REQ_ERR => 0x12,
        ibv_wc_status::IBV_WC_REM_ACCESS_ERR => 0x13,
        ibv_wc_status::IBV_WC_REM_OP_ERR => 0x14,
        ibv_wc_status::IBV_WC_RETRY_EXC_ERR => 0x15,
        ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR => 0x16,
        _ => 0xff,
    }
}

/// `ibv_mtu` for a path MTU in bytes.
pub fn mtu_of(bytes: u32) -> Option<u32> {
    Some(match bytes {
        256 => ibv_mtu::IBV_MTU_256,
        512 => ibv_mtu::IBV_MTU_512,
        1024 => ibv_mtu::IBV_MTU_1024,
        2048 => ibv_mtu::IBV_MTU_2048,
        4096 => ibv_mtu::IBV_MTU_4096,
        _ => return None,
    })
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A libibverbs call that failed, with the OS error it left.
fn verbs_failed(call: &'static str) -> ShimError {
    ShimError::Verbs {
        call,
        errno: errno().raw_os_error(),
    }
}

/// A raw verbs object pointer that may move between threads (verbs objects are thread safe).
struct Raw<T>(*mut T);
// SAFETY: libibverbs objects may be used from any thread; the shim serialises per object.
unsafe impl<T> Send for Raw<T> {}
// SAFETY: as above; shared references only read the pointer value.
unsafe impl<T> Sync for Raw<T> {}

/// An open device: context, protection domain, port 1.
pub struct VerbsProvider {
    ctx: Raw<ibv_context>,
    pd: Raw<ibv_pd>,
    lid: u16,
    gid: [u8; 16],
    mrs: Mutex<HashMap<u32, Raw<ibv_mr>>>,
    cqs: Mutex<HashMap<u32, Raw<ibv_cq>>>,
    next_cq: Mutex<u32>,
}

impl std::fmt::Debug for VerbsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerbsProvider {{ lid: {} }}", self.lid)
    }
}

impl VerbsProvider {
    /// Opens the first RDMA device (or the one named `name`), port 1.
    pub fn open(name: Option<&str>) -> Result<Self, ShimError> {
        let mut n = 0;
        // SAFETY: n is a valid out-pointer; the list is freed below.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(ShimError::Unavailable(format!(
                "no RDMA device: ibv_get_device_list failed ({})",
                errno()
            )));
        }
        let mut chosen = ptr::null_mut();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds n valid device pointers.
            let dev = unsafe { *list.add(i) };
            // SAFETY: dev is a valid device; the name is a NUL-terminated string it owns.
            let dev_name = unsafe { std::ffi::CStr::from_ptr(ibv_get_device_name(dev)) };
            if name.is_none_or(|want| dev_name.to_string_lossy() == want) {
                chosen = dev;
                break;
            }
        }
        let ctx = if chosen.is_null() {
            ptr::null_mut()
        } else {
            // SAFETY: chosen comes from the live list.
            unsafe { ibv_open_device(chosen) }
        };
        // SAFETY: the list came from ibv_get_device_list; opened contexts outlive it.
        unsafe { ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(ShimError::Unavailable(match name {
                Some(want) => format!("no RDMA device named {want}"),
                None if n == 0 => "no RDMA device found".into(),
                None => format!("cannot open the RDMA device ({})", errno()),
            }));
        }
        // SAFETY: ctx is an open context.
        let pd = unsafe { ibv_alloc_pd(ctx) };
        if pd.is_null() {
            return Err(ShimError::Unavailable(format!(
                "ibv_alloc_pd failed ({})",
                errno()
            )));
        }
        // SAFETY: all-zero is a valid ibv_port_attr for the device to fill.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open, attr is a valid out-pointer.
        if unsafe { ___ibv_query_port(ctx, 1, &mut attr) } != 0 {
            return Err(ShimError::Unavailable(format!(
                "ibv_query_port failed ({})",
                errno()
            )));
        }
        // SAFETY: all-zero is a valid gid.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open, gid is a valid out-pointer; a failure leaves it zero (no GRH).
        unsafe { ibv_query_gid(ctx, 1, 0, &mut gid) };
        Ok(Self {
            ctx: Raw(ctx),
            pd: Raw(pd),
            lid: attr.lid,
            // SAFETY: both union views are 16 plain bytes.
            gid: unsafe { gid.raw },
            mrs: Mutex::new(HashMap::new()),
            cqs: Mutex::new(HashMap::new()),
            next_cq: Mutex::new(0),
        })
    }
}

impl Provider for VerbsProvider {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn alloc(&self, len: u64) -> Result<Buffer, ShimError> {
        let mem = Arc::new(VecMemory::new(
            usize::try_from(len.max(1)).unwrap_or(usize::MAX),
        ));
        let addr = mem.host_address();
        Buffer::new(mem as Arc<dyn GuestMemory>, 0, addr, len)
    }

    fn reg_mr(&self, buf: &Buffer, access: u32) -> Result<Mr, ShimError> {
        // SAFETY: the buffer's memory lives as long as the Buffer (held by the returned Mr) and
        // spans len bytes from addr.
        let mr = unsafe {
            ibv_reg_mr(
                self.pd.0,
                buf.addr() as *mut std::ffi::c_void,
                usize::try_from(buf.len()).unwrap_or(usize::MAX),
                i32::try_from(access).unwrap_or(0),
            )
        };
        if mr.is_null() {
            return Err(verbs_failed("ibv_reg_mr"));
        }
        // SAFETY: mr is a valid registered region.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        self.mrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(lkey, Raw(mr));
        Ok(Mr {
            buf: buf.clone(),
            lkey,
            rkey,
        })
    }

    fn dereg_mr(&self, mr: &Mr) -> Result<(), ShimError> {
        let raw = self
            .mrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&mr.lkey);
        match raw {
            // SAFETY: the pointer came from ibv_reg_mr and is deregistered once.
            Some(r) => match unsafe { ibv_dereg_mr(r.0) } {
                0 => Ok(()),
                _ => Err(verbs_failed("ibv_dereg_mr")),
            },
            None => Err(RequestError::NoRegion { lkey: mr.lkey }.into()),
        }
    }

    fn create_cq(&self, entries: u32) -> Result<Box<dyn CompletionQueue>, ShimError> {
        // SAFETY: ctx is open; no channel, no context pointer.
        let cq = unsafe {
            ibv_create_cq(
                self.ctx.0,
                i32::try_from(entries).unwrap_or(i32::MAX),
                ptr::null_mut(),
                ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(verbs_failed("ibv_create_cq"));
        }
        let mut next = self.next_cq.lock().unwrap_or_else(|p| p.into_inner());
        *next += 1;
        let cqn = *next;
        self.cqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cqn, Raw(cq));
        Ok(Box::new(VerbsCq {
            cqn,
            cq: Raw(cq),
            wcs: Vec::new(),
        }))
    }

    fn create_qp(
        &self,
        init: &QpInit,
        send_cq: u32,
        recv_cq: u32,
    ) -> Result<Box<dyn QueuePair>, ShimError> {
        let cqs = self.cqs.lock().unwrap_or_else(|p| p.into_inner());
        let (Some(scq), Some(rcq)) = (cqs.get(&send_cq), cqs.get(&recv_cq)) else {
            return Err(RequestError::NoCompletionQueue { send_cq, recv_cq }.into());
        };
        // SAFETY: all-zero is a valid ibv_qp_init_attr to fill in.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = scq.0;
        attr.recv_cq = rcq.0;
        attr.cap.max_send_wr = init.max_send_wr;
        attr.cap.max_recv_wr = init.max_recv_wr.max(1);
        attr.cap.max_send_sge = 4;
        attr.cap.max_recv_sge = init.max_recv_sge.max(1);
        attr.cap.max_inline_data = init.max_inline;
        attr.qp_type = ibv_qp_type::IBV_QPT_RC;
        // SAFETY: pd is valid, attr is fully initialised.
        let qp = unsafe { ibv_create_qp(self.pd.0, &mut attr) };
        if qp.is_null() {
            return Err(verbs_failed("ibv_create_qp"));
        }
        // SAFETY: all-zero is a valid ibv_qp_attr to fill in.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ)
            .0;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ibv_qp_attr_mask::IBV_QP_PORT
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        // SAFETY: qp is valid; a and mask describe the INIT transition.
        if unsafe { ibv_modify_qp(qp, &mut a, i32::try_from(mask.0).unwrap_or(0)) } != 0 {
            return Err(verbs_failed("ibv_modify_qp(INIT)"));
        }
        let mtu = mtu_of(init.path_mtu).ok_or(RequestError::PathMtu(init.path_mtu))?;
        Ok(Box::new(VerbsQp {
            qp: Raw(qp),
            mtu,
            lid: self.lid,
            gid: self.gid,
        }))
    }
}

struct VerbsCq {
    cqn: u32,
    cq: Raw<ibv_cq>,
    wcs: Vec<ibv_wc>,
}

impl CompletionQueue for VerbsCq {
    fn cqn(&self) -> u32 {
        self.cqn
    }

    fn poll(&mut self, out: &mut Vec<Wc>, max: usize) -> Result<usize, ShimError> {
        let max = max.min(64);
        self.wcs.clear();
        // SAFETY: all-zero ibv_wc values are valid placeholders for the device to overwrite.
        self.wcs.resize_with(max, || unsafe { std::mem::zeroed() });
        // SAFETY: cq is valid and wcs has room for max entries.
        let n = unsafe {
            ibv_poll_cq(
                self.cq.0,
                i32::try_from(max).unwrap_or(0),
                self.wcs.as_mut_ptr(),
            )
        };
        if n < 0 {
            return Err(ShimError::Verbs {
                call: "ibv_poll_cq",
                errno: None,
            });
        }
        for wc in &self.wcs[..usize::try_from(n).unwrap_or(0)] {
            let with_imm = wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            out.push(Wc {
                wr_id: wc.wr_id,
                status: if wc.status == ibv_wc_status::IBV_WC_SUCCESS {
                    WcStatus::Success
                } else {
                    WcStatus::Error(syndrome_of(wc.status))
                },
                opcode: match wc.opcode {
                    ibv_wc_opcode::IBV_WC_SEND => WcOpcode::Send,
                    ibv_wc_opcode::IBV_WC_RDMA_WRITE => WcOpcode::Write,
                    ibv_wc_opcode::IBV_WC_RDMA_READ => WcOpcode::Read,
                    ibv_wc_opcode::IBV_WC_RECV => WcOpcode::Recv,
                    ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvWriteImm,
                    _ => WcOpcode::Other,
                },
                byte_len: wc.byte_len,
                // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate (network order).
                imm: with_imm
                    .then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data })),
                qpn: wc.qp_num,
            });
        }
        Ok(usize::try_from(n).unwrap_or(0))
    }
}

struct VerbsQp {
    qp: Raw<ibv_qp>,
    mtu: u32,
    lid: u16,
    gid: [u8; 16],
}

impl QueuePair for VerbsQp {
    fn qpn(&self) -> u32 {
        // SAFETY: qp is valid for the life of self.
        unsafe { (*self.qp.0).qp_num }
    }

    fn addr(&self) -> QpAddr {
        QpAddr {
            qpn: self.qpn(),
            lid: self.lid,
            gid: self.gid,
        }
    }

    fn connect(&mut self, remote: QpAddr) -> Result<(), ShimError> {
        // SAFETY: all-zero is a valid ibv_qp_attr to fill in.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = self.mtu;
        a.dest_qp_num = remote.qpn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.port_num = 1;
        if remote.gid != [0; 16] {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.hop_limit = 1;
        }
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_AV
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        // SAFETY: qp is valid; a and mask describe the RTR transition.
        if unsafe { ibv_modify_qp(self.qp.0, &mut a, i32::try_from(mask.0).unwrap_or(0)) } != 0 {
            return Err(verbs_failed("ibv_modify_qp(RTR)"));
        }
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 1;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        // SAFETY: as above, for RTS.
        if unsafe { ibv_modify_qp(self.qp.0, &mut a, i32::try_from(mask.0).unwrap_or(0)) } != 0 {
            return Err(verbs_failed("ibv_modify_qp(RTS)"));
        }
        Ok(())
    }

    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ShimError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<Vec<ibv_sge>> = Vec::with_capacity(wrs.len());
        // SAFETY: all-zero is a valid ibv_send_wr to fill in.
        let mut out: Vec<ibv_send_wr> = wrs.iter().map(|_| unsafe { std::mem::zeroed() }).collect();
        for (w, o) in wrs.iter().zip(out.iter_mut()) {
            let list: Vec<ibv_sge> = match w.inline {
                Some(d) => vec![ibv_sge {
                    addr: d.as_ptr() as u64,
                    length: u32::try_from(d.len()).unwrap_or(0),
                    lkey: 0,
                }],
                None => w
                    .sges
                    .iter()
                    .map(|s| ibv_sge {
                        addr: s.addr,
                        length: s.len,
                        lkey: s.lkey,
                    })
                    .collect(),
            };
            o.wr_id = w.wr_id;
            let (op, remote, imm) = match w.op {
                SendOp::Write(r) => (ibv_wr_opcode::IBV_WR_RDMA_WRITE, Some(r), None),
                SendOp::WriteImm(r, i) => {
                    (ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM, Some(r), Some(i))
                }
                SendOp::Send => (ibv_wr_opcode::IBV_WR_SEND, None, None),
                SendOp::SendImm(i) => (ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, None, Some(i)),
                SendOp::Read(r) => (ibv_wr_opcode::IBV_WR_RDMA_READ, Some(r), None),
            };
            o.opcode = op;
            if let Some(r) = remote {
                o.wr.rdma = rdma_t {
                    remote_addr: r.addr,
                    rkey: r.rkey,
                };
            }
            if let Some(i) = imm {
                o.imm_data_invalidated_rkey_union.imm_data = i.to_be();
            }
            let mut flags = 0;
            if w.signaled {
                flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
            }
            if w.inline.is_some() {
                flags |= ibv_send_flags::IBV_SEND_INLINE.0;
            }
            o.send_flags = flags;
            o.num_sge = i32::try_from(list.len()).unwrap_or(0);
            sges.push(list);
        }
        for (o, list) in out.iter_mut().zip(sges.iter_mut()) {
            o.sg_list = list.as_mut_ptr();
        }
        for i in 0..out.len() - 1 {
            let next: *mut ibv_send_wr = &mut out[i + 1];
            out[i].next = next;
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: the chain and its SGE lists live until the call returns; inline data is copied
        // by the provider during the call.
        let rc = unsafe { ibv_post_send(self.qp.0, out.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            let posted = if bad.is_null() {
                0
            } else {
                (bad as usize - out.as_ptr() as usize) / std::mem::size_of::<ibv_send_wr>()
            };
            return Err(ShimError::QueueFull { posted });
        }
        Ok(())
    }

    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), ShimError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<Vec<ibv_sge>> = wrs
            .iter()
            .map(|w| {
                w.sges
                    .iter()
                    .map(|s| ibv_sge {
                        addr: s.addr,
                        length: s.len,
                        lkey: s.lkey,
                    })
                    .collect()
            })
            .collect();
        let mut out: Vec<ibv_recv_wr> = wrs
            .iter()
            .zip(sges.iter_mut())
            .map(|(w, l)| ibv_recv_wr {
                wr_id: w.wr_id,
                next: ptr::null_mut(),
                sg_list: l.as_mut_ptr(),
                num_sge: i32::try_from(l.len()).unwrap_or(0),
            })
            .collect();
        for i in 0..out.len() - 1 {
            let next: *mut ibv_recv_wr = &mut out[i + 1];
            out[i].next = next;
        }
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: the chain and its SGE lists live until the call returns.
        let rc = unsafe { ibv_post_recv(self.qp.0, out.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(ShimError::QueueFull { posted: 0 });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_mlx5_syndromes() {
        assert_eq!(syndrome_of(ibv_wc_status::IBV_WC_REM_ACCESS_ERR), 0x13);
        assert_eq!(syndrome_of(ibv_wc_status::IBV_WC_WR_FLUSH_ERR), 0x05);
        assert_eq!(syndrome_of(ibv_wc_status::IBV_WC_LOC_LEN_ERR), 0x01);
        assert_eq!(mtu_of(1024), Some(ibv_mtu::IBV_MTU_1024));
        assert_eq!(mtu_of(1000), None);
    }

    #[test]
    fn access_flags_are_the_verbs_values() {
        use resex_proto::hca::access;
        assert_eq!(
            access::LOCAL_WRITE,
            ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
        );
        assert_eq!(
            access::REMOTE_WRITE,
            ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
        );
        assert_eq!(
            access::REMOTE_READ,
            ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
        );
    }

    /// With no device (this machine, CI), opening fails with one line that says so; with one,
    /// a loopback write works.
    #[test]
    fn open_without_a_device_says_so_in_one_line() {
        match VerbsProvider::open(None) {
            Err(ShimError::Unavailable(msg)) => {
                assert!(msg.contains("RDMA device"), "{msg}");
                assert!(!msg.contains('\n'));
            }
            Err(e) => panic!("unexpected error: {e}"),
            Ok(p) => {
                let b = p.alloc(4096).unwrap();
                let mr = p.reg_mr(&b, 7).unwrap();
                assert_ne!(mr.lkey, 0);
            }
        }
    }
}
