//! The HCA's objects: guests, completion queues, queue pairs and work requests in flight.

use crate::link::PortId;
use crate::mr::GuestId;
use resex_guestmem::{GuestAddress, GuestMemory, PageRing};
use resex_mlx5::writer::CqWriter;
use std::collections::VecDeque;
use std::sync::Arc;

/// A guest attached to the HCA.
#[derive(Clone)]
pub struct Guest {
    /// Its memory.
    pub mem: Arc<dyn GuestMemory>,
    /// The link port its QPs send through.
    pub port: PortId,
    /// It rings a doorbell after writing its doorbell records (else the thread polls them).
    pub rings: bool,
    /// What its destroyed QPs had executed (a QP's stats outlive it here), and how many.
    pub retired: QpStats,
    /// QPs of it destroyed.
    pub retired_qps: u64,
}

impl std::fmt::Debug for Guest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guest")
            .field("ram", &self.mem.size())
            .field("port", &self.port)
            .finish()
    }
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    /// Owner.
    pub guest: GuestId,
    /// Writes entries with the right owner bit.
    pub writer: CqWriter,
    /// The guest's doorbell record (consumer index).
    pub dbrec: GuestAddress,
    /// Times a completion had to wait because the CQ was full.
    pub full_stalls: u64,
}

/// Queue pair states the HCA distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Created, not connected: posted work waits.
    Init,
    /// Connected: work is executed.
    Rts,
    /// An error completed a request: everything else is flushed.
    Error,
}

/// What the HCA executed on one QP (the ground truth the monitor must match).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Send WQEs completed successfully.
    pub wqes: u64,
    /// SEND/WRITE payload bytes sent (counted when the work request completes).
    pub tx_bytes: u64,
    /// SEND/WRITE payload bytes put on the wire, packet by packet (the lab fabric's view of a
    /// transfer in progress).
    pub wire_bytes: u64,
    /// Packets sent: SEND/WRITE data packets and READ request packets.
    pub tx_packets: u64,
    /// Bytes this QP's READs brought back.
    pub rx_read_bytes: u64,
    /// READ response packets.
    pub rx_read_packets: u64,
    /// Bytes received into this QP's receive queue (SEND, WRITE_IMM lengths).
    pub recv_bytes: u64,
    /// CQEs written for this QP (both sides).
    pub cqes: u64,
    /// Error CQEs written for this QP (flushes included).
    pub errors: u64,
    /// Send WQEs completed successfully, SEND/WRITE/READ alike: the count behind the two
    /// sums below.
    pub timed: u64,
    /// Their sojourn in the HCA, summed: from when it saw each (its doorbell) to its
    /// completion, ns. The host's own measure of how long a guest's I/O takes.
    pub sojourn_ns: u64,
    /// The part of that sum the wire alone needs: each WQE's packets at the port's rate, ns.
    pub wire_ns: u64,
}

impl std::ops::AddAssign for QpStats {
    fn add_assign(&mut self, o: Self) {
        self.wqes += o.wqes;
        self.tx_bytes += o.tx_bytes;
        self.wire_bytes += o.wire_bytes;
        self.tx_packets += o.tx_packets;
        self.rx_read_bytes += o.rx_read_bytes;
        self.rx_read_packets += o.rx_read_packets;
        self.recv_bytes += o.recv_bytes;
        self.cqes += o.cqes;
        self.errors += o.errors;
        self.timed += o.timed;
        self.sojourn_ns += o.sojourn_ns;
        self.wire_ns += o.wire_ns;
    }
}

/// A send work request the HCA has fetched.
#[derive(Debug, Clone)]
pub struct Wr {
    /// WQE index (first basic block).
    pub index: u16,
    /// Its size in basic blocks.
    pub bbs: u32,
    /// Send opcode.
    pub opcode: u8,
    /// CQ_UPDATE set.
    pub signaled: bool,
    /// Immediate data.
    pub imm: u32,
    /// Remote address and key (RDMA).
    pub raddr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Local spans (gather for SEND/WRITE, scatter for READ), translated at fetch.
    pub local: Vec<(GuestAddress, u64)>,
    /// Inline payload.
    pub inline: Option<Vec<u8>>,
    /// Payload length.
    pub len: u64,
    /// Request packets in all, and sent so far.
    pub req_pkts: u64,
    /// Request packets sent.
    pub req_sent: u64,
    /// READ response packets in all, and sent so far.
    pub resp_pkts: u64,
    /// Response packets sent.
    pub resp_sent: u64,
    /// When the HCA saw it (ps).
    pub ready_ps: u64,
    /// When its last request packet arrived (ps).
    pub req_arrived_ps: Option<u64>,
    /// When its effect lands (data at the responder; READ data back home) (ps).
    pub done_ps: Option<u64>,
    /// When the requester learns it completed (ps).
    pub ack_ps: Option<u64>,
    /// Its effect has been applied.
    pub executed: bool,
    /// The syndrome it failed with.
    pub error: Option<u8>,
    /// Receiver-not-ready retries so far.
    pub rnr_tries: u32,
}

impl Wr {
    /// A WQE that completes, in order, with `syndrome` and no traffic: one that failed at fetch
    /// or is flushed because its QP is in error.
    pub fn failed(index: u16, bbs: u32, opcode: u8, syndrome: u8, now_ps: u64) -> Self {
        Self {
            index,
            bbs,
            opcode,
            signaled: true,
            imm: 0,
            raddr: 0,
            rkey: 0,
            local: Vec::new(),
            inline: None,
            len: 0,
            req_pkts: 0,
            req_sent: 0,
            resp_pkts: 0,
            resp_sent: 0,
            ready_ps: now_ps,
            req_arrived_ps: Some(now_ps),
            done_ps: Some(now_ps),
            ack_ps: Some(now_ps),
            executed: true,
            error: Some(syndrome),
            rnr_tries: 0,
        }
    }
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    /// Number.
    pub qpn: u32,
    /// Owner.
    pub guest: GuestId,
    /// State.
    pub state: QpState,
    /// Connected peer.
    pub remote: Option<u32>,
    /// Send queue ring.
    pub sq: PageRing,
    /// Its size in basic blocks.
    pub sq_cnt: u32,
    /// Basic blocks fetched so far (wrapping).
    pub sq_ci: u32,
    /// Doorbell record (word 0 RQ head, word 1 SQ producer).
    pub dbrec: GuestAddress,
    /// Receive queue ring.
    pub rq: Option<PageRing>,
    /// Receive WQEs.
    pub rq_cnt: u32,
    /// Bytes per receive WQE.
    pub rq_stride: u32,
    /// Receive WQEs consumed (wrapping).
    pub rq_ci: u32,
    /// Send CQ number.
    pub send_cq: u32,
    /// Receive CQ number.
    pub recv_cq: u32,
    /// Path MTU, bytes.
    pub mtu: u64,
    /// Fetched requests, in order.
    pub wrs: VecDeque<Wr>,
    /// Index in `wrs` before which no request has request packets left to send.
    pub req_next: usize,
    /// Its request flow is queued on the link.
    pub req_active: bool,
    /// Its READ-response flow is queued on the link.
    pub resp_active: bool,
    /// What it executed.
    pub stats: QpStats,
}

impl Qp {
    /// Removes the oldest request (it completed or was flushed), keeping the cursor in step.
    pub fn pop_wr(&mut self) -> Option<Wr> {
        let w = self.wrs.pop_front()?;
        self.req_next = self.req_next.saturating_sub(1);
        Some(w)
    }
}
