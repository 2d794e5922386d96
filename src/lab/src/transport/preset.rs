//! Every constant of the transport lab in one place: per testbed, the link (rate, MTU, header
//! bytes, switch and cable latency), the NIC (softhca's `NicModel`) and the guest CPU's cost of
//! each transport operation. None of these were measured on this machine; each is taken or
//! estimated from the source named beside it, and `docs/transport.md` says which figures they
//! drive.
//!
//! Sources (cited by number below):
//! 1. Xiao et al., status-byte paper (`papers/status-byte-rdma-transport.txt` 4.1.1): two
//!    servers, dual Xeon Gold, ConnectX-5 100 Gb/s InfiniBand over fibre.
//! 2. Zhang et al., HiPower (`papers/hipower-batched-confirmation.txt` 4.1): ConnectX-3
//!    40 Gb/s NICs, Xeon E5 CPUs, PFC (RoCE), five servers.
//! 3. Neugebauer et al., "Understanding PCIe performance for end host networking", SIGCOMM
//!    2018: a small DMA read round trip over PCIe Gen3 costs about 400-600 ns end to end (NIC
//!    included); posted writes about half that.
//! 4. Kalia, Kaminsky, Andersen, "Design guidelines for high performance RDMA systems", ATC
//!    2016: doorbells are MMIO writes (hundreds of ns of PCIe latency, ~100 ns of CPU),
//!    WQE fetch by DMA read unless the WQE is pushed with the doorbell, CQE DMA writes; per-op
//!    CPU costs of posting and polling in the 10s-100s of ns.
//! 5. Mellanox/NVIDIA product briefs: ConnectX-3 (40/56 Gb/s, PCIe Gen3 x8), ConnectX-5
//!    (100 Gb/s, PCIe Gen3/4 x16, about 200 M messages/s), ConnectX-6 (200 Gb/s HDR, PCIe Gen4,
//!    about 215 M messages/s); SB7800 EDR switch about 90 ns port to port.
//! 6. IBTA wire formats: IB RC WRITE packet headers LRH 8 + BTH 12 + RETH 16 + ICRC 4 + VCRC 2
//!    = 42 bytes; RoCEv2 adds Ethernet 14 + FCS 4 + IPv4 20 + UDP 8 and 20 bytes of preamble
//!    and inter-frame gap on the wire (BTH 12 + RETH 16 + ICRC 4): 98 bytes.

use resex_shim::transport::Work;
use resex_softhca::{LinkConfig, NicModel};
use serde::Serialize;

/// The guest CPU's cost of each transport operation (ns, and ps per byte).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuModel {
    /// One post call: building the WQE and the doorbell's MMIO write [4].
    pub post_ns: u64,
    /// Each further WQE in a chain [4].
    pub wqe_ns: u64,
    /// One CQ poll (the owner byte of the next CQE) [4].
    pub poll_ns: u64,
    /// Each CQE consumed: a cache miss on a line the NIC wrote [3, 4].
    pub cqe_ns: u64,
    /// Each status or bitmap byte read or written (local, cached).
    pub scan_ns: u64,
    /// Copying payload, ps per byte (about 10 GB/s). Charged only with `charge_copies`: the
    /// status-byte paper excluded filling and processing from its figures (4.2).
    pub copy_ps_per_byte: u64,
}

impl CpuModel {
    /// What `w` costs, ns (at least one poll: a step is never free).
    pub fn cost(&self, w: &Work, charge_copies: bool) -> u64 {
        let wqes_beyond = w.wqes.saturating_sub(w.posts);
        let mut ns = w.posts * self.post_ns
            + wqes_beyond * self.wqe_ns
            + w.polls * self.poll_ns
            + w.cqes * self.cqe_ns
            + w.scanned * self.scan_ns;
        if charge_copies {
            ns += w.copied * self.copy_ps_per_byte / 1000;
        }
        ns.max(self.poll_ns)
    }
}

/// A testbed: link, NIC and CPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Testbed {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it models.
    pub about: &'static str,
    /// Link rate, bits/s.
    pub bits_per_sec: u64,
    /// Path MTU.
    pub mtu: u32,
    /// Header bytes per packet on the wire.
    pub header_bytes: u32,
    /// Switch + cable, ns one way.
    pub base_latency_ns: u64,
    /// The NIC's latencies.
    #[serde(skip)]
    pub nic: NicModel,
    /// The CPU's costs.
    pub cpu: CpuModel,
}

impl Testbed {
    /// softhca's link for this testbed.
    pub fn link(&self) -> LinkConfig {
        LinkConfig {
            bits_per_sec: self.bits_per_sec,
            mtu: self.mtu,
            header_bytes: self.header_bytes,
            base_latency_ns: self.base_latency_ns,
            nic: self.nic,
        }
    }

    /// A preset by name.
    pub fn preset(name: &str) -> Option<Testbed> {
        [STATUS_BYTE, HIPOWER, MODERN]
            .into_iter()
            .find(|t| t.name == name)
    }

    /// Every preset's name.
    pub fn names() -> [&'static str; 3] {
        [STATUS_BYTE.name, HIPOWER.name, MODERN.name]
    }
}

/// The status-byte paper's testbed [1]: ConnectX-5, 100 Gb/s EDR InfiniBand, 4 KiB MTU.
pub const STATUS_BYTE: Testbed = Testbed {
    name: "cx5-100g",
    about: "status-byte paper: ConnectX-5 EDR 100 Gb/s, PCIe Gen3 x16, one switch",
    bits_per_sec: 100_000_000_000, // [1]
    mtu: 4096,                     // IB's largest MTU, what perftest uses on EDR
    header_bytes: 42,              // [6]
    base_latency_ns: 300,          // switch ~90 ns [5] + cables, PHYs and serdes
    nic: NicModel {
        doorbell_ns: 150,      // MMIO posted write [3, 4]
        wqe_fetch_ns: 400,     // DMA read round trip [3]
        payload_fetch_ns: 400, // a second DMA read for gathered data [3]
        wqe_process_ns: 5,     // ~200 M messages/s [5]
        dma_write_ns: 200,     // posted write into host memory [3]
        cqe_write_ns: 200,     // [3, 4]
        read_response_ns: 400, // the responder's DMA read [3]
    },
    cpu: CpuModel {
        post_ns: 100,
        wqe_ns: 30,
        poll_ns: 20,
        cqe_ns: 60,
        scan_ns: 1,
        copy_ps_per_byte: 100,
    },
};

/// HiPower's testbed [2]: ConnectX-3 40 Gb/s RoCE with PFC, 1 KiB RoCE MTU (1500-byte
/// Ethernet frames), PCIe Gen3 x8, older Xeon E5 hosts.
pub const HIPOWER: Testbed = Testbed {
    name: "cx3-40g",
    about: "HiPower paper: ConnectX-3 40 Gb/s RoCE, PCIe Gen3 x8, Ethernet switch with PFC",
    bits_per_sec: 40_000_000_000, // [2]
    mtu: 1024,                    // RoCE's path MTU on 1500-byte frames
    header_bytes: 98,             // [6]
    base_latency_ns: 600,         // a cut-through 40 GbE switch ~300-500 ns + cables
    nic: NicModel {
        doorbell_ns: 200,      // [3, 4]
        wqe_fetch_ns: 500,     // [3]
        payload_fetch_ns: 500, // [3]
        wqe_process_ns: 30,    // ConnectX-3: some 30-35 M messages/s [5]
        dma_write_ns: 250,     // [3]
        cqe_write_ns: 250,     // [3]
        read_response_ns: 500, // [3]
    },
    cpu: CpuModel {
        post_ns: 150,
        wqe_ns: 40,
        poll_ns: 30,
        cqe_ns: 80,
        scan_ns: 1,
        copy_ps_per_byte: 120,
    },
};

/// A current testbed: ConnectX-6/7 class, 200 Gb/s HDR, PCIe Gen4 x16.
pub const MODERN: Testbed = Testbed {
    name: "cx6-200g",
    about: "modern: ConnectX-6 HDR 200 Gb/s, PCIe Gen4 x16, one switch",
    bits_per_sec: 200_000_000_000, // [5]
    mtu: 4096,
    header_bytes: 42,     // [6]
    base_latency_ns: 250, // HDR switch ~130 ns [5] + cables
    nic: NicModel {
        doorbell_ns: 100,      // Gen4 [3]
        wqe_fetch_ns: 300,     // [3]
        payload_fetch_ns: 300, // [3]
        wqe_process_ns: 5,     // ~215 M messages/s [5]
        dma_write_ns: 150,     // [3]
        cqe_write_ns: 150,     // [3]
        read_response_ns: 300, // [3]
    },
    cpu: CpuModel {
        post_ns: 80,
        wqe_ns: 25,
        poll_ns: 15,
        cqe_ns: 50,
        scan_ns: 1,
        copy_ps_per_byte: 60,
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_found_by_name_and_price_work() {
        for n in Testbed::names() {
            assert_eq!(Testbed::preset(n).map(|t| t.name), Some(n));
        }
        assert!(Testbed::preset("nope").is_none());
        let w = Work {
            posts: 1,
            wqes: 2,
            polls: 3,
            cqes: 1,
            copied: 10_000,
            scanned: 4,
        };
        let c = STATUS_BYTE.cpu;
        assert_eq!(c.cost(&w, false), 100 + 30 + 60 + 60 + 4);
        assert_eq!(c.cost(&w, true), 254 + 1000);
        assert_eq!(c.cost(&Work::default(), false), c.poll_ns);
    }
}
