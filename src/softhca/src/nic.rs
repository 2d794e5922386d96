//! The NIC's own latencies, beside the wire's (`link`): the doorbell's MMIO write, the DMA read
//! of the WQE and of its payload, the NIC's per-WQE processing, the DMA write that lands data
//! in the responder's memory, the CQE's DMA write, and the responder's DMA read that answers an
//! RDMA READ. All zero by default: the embedded host's softhca then behaves as before (the wire
//! only). The lab's transport experiments set them from a testbed preset
//! (`resex-lab`'s `transport::preset`), where each constant has its source.

/// Per-operation NIC latencies, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NicModel {
    /// Doorbell: the MMIO write reaching the NIC.
    pub doorbell_ns: u64,
    /// DMA read of a WQE (one PCIe round trip).
    pub wqe_fetch_ns: u64,
    /// DMA read of a WQE's gathered payload (not for inline data or READs).
    pub payload_fetch_ns: u64,
    /// The NIC's processing of each WQE (the message rate's inverse): WQEs of one doorbell are
    /// processed one after another.
    pub wqe_process_ns: u64,
    /// DMA write landing an arriving message's data in the responder's memory.
    pub dma_write_ns: u64,
    /// DMA write of a requester's CQE after the ACK (or the READ response) arrived.
    pub cqe_write_ns: u64,
    /// The responder's DMA read of the memory an RDMA READ asks for.
    pub read_response_ns: u64,
}

impl NicModel {
    /// ns to ps.
    fn ps(ns: u64) -> u64 {
        ns.saturating_mul(1000)
    }

    /// When the `k`-th WQE (from 0) fetched by one doorbell at `now_ps` is ready for the wire.
    pub fn ready_ps(&self, now_ps: u64, k: u64, gathered_payload: bool) -> u64 {
        let mut t = now_ps
            .saturating_add(Self::ps(self.doorbell_ns))
            .saturating_add(Self::ps(self.wqe_fetch_ns))
            .saturating_add(Self::ps(self.wqe_process_ns).saturating_mul(k.saturating_add(1)));
        if gathered_payload {
            t = t.saturating_add(Self::ps(self.payload_fetch_ns));
        }
        t
    }

    /// The data-landing delay, ps.
    pub fn dma_write_ps(&self) -> u64 {
        Self::ps(self.dma_write_ns)
    }

    /// The CQE's delay, ps.
    pub fn cqe_write_ps(&self) -> u64 {
        Self::ps(self.cqe_write_ns)
    }

    /// The READ responder's delay, ps.
    pub fn read_response_ps(&self) -> u64 {
        Self::ps(self.read_response_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_is_processed_one_wqe_after_another() {
        let n = NicModel {
            doorbell_ns: 100,
            wqe_fetch_ns: 400,
            payload_fetch_ns: 300,
            wqe_process_ns: 10,
            ..NicModel::default()
        };
        assert_eq!(n.ready_ps(0, 0, false), 510_000);
        assert_eq!(n.ready_ps(0, 1, true), 820_000);
        assert_eq!(NicModel::default().ready_ps(7, 3, true), 7);
    }
}
