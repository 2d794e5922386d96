//! The software HCA of `resex kvm hca` and `resex xen hca`: a VM's memory on port 0, a
//! host-side peer's RAM file on port 1, one HCA thread; and what it executed for the VM, as
//! both print it at exit (and write with `--stats`): per QP, and the totals resexd's counts are
//! checked against (`mtus` = transmitted packets + RDMA READ response packets).

use resex_softhca::QpStats;

/// A running two-port software HCA.
#[cfg(any(feature = "libvirt", feature = "xen"))]
pub struct VmHca {
    /// The VM's port.
    pub guest: resex_softhca::GuestPort,
    /// The host-side peer's port.
    pub peer: resex_softhca::GuestPort,
    _thread: resex_softhca::HcaThread,
}

#[cfg(any(feature = "libvirt", feature = "xen"))]
impl VmHca {
    /// Starts it over the VM's memory `ram`, creating the peer's RAM file `peer_ram` of
    /// `peer_mib` MiB (at least 8).
    pub fn start(
        ram: std::sync::Arc<dyn resex_guestmem::GuestMemory>,
        peer_ram: &std::path::Path,
        peer_mib: u64,
    ) -> anyhow::Result<Self> {
        use resex_softhca::{Clock, LinkConfig, MonotonicClock, PortId, SoftHca};
        use std::sync::Arc;
        let hca = SoftHca::new(LinkConfig::resex_testbed(), 2);
        let guest = hca.add_guest(ram, PortId(0));
        let _ = std::fs::remove_file(peer_ram);
        let peer_mem: Arc<dyn resex_guestmem::GuestMemory> = Arc::new(
            resex_guestmem::FileMemory::create(peer_ram, peer_mib.max(8) << 20)?,
        );
        let peer = hca.add_guest(peer_mem, PortId(1));
        let thread = hca.spawn(
            Arc::new(MonotonicClock::new()) as Arc<dyn Clock>,
            std::time::Duration::from_micros(20),
        );
        Ok(Self {
            guest,
            peer,
            _thread: thread,
        })
    }
}

/// The summary document: what each live QP executed, what the guest's destroyed QPs had
/// executed (`retired`: what a guest sent stays counted after it tears the QP down, as in
/// resexd's counts), and the totals over both.
#[cfg_attr(not(any(feature = "libvirt", feature = "xen")), allow(dead_code))]
pub fn summary(domain: &str, qps: &[(u32, QpStats)], retired: (QpStats, u64)) -> serde_json::Value {
    let (gone, gone_qps) = retired;
    let mut total = gone;
    for (_, s) in qps {
        total += *s;
    }
    serde_json::json!({
        "domain": domain,
        "qps": qps.iter().map(|(n, s)| serde_json::json!({
            "qpn": n, "wqes": s.wqes, "tx_bytes": s.tx_bytes, "tx_packets": s.tx_packets,
            "rx_read_packets": s.rx_read_packets,
        })).collect::<Vec<_>>(),
        "retired": {
            "qps": gone_qps, "wqes": gone.wqes, "tx_bytes": gone.tx_bytes,
            "tx_packets": gone.tx_packets, "rx_read_packets": gone.rx_read_packets,
        },
        "wqes": total.wqes,
        "tx_bytes": total.tx_bytes,
        "mtus": total.tx_packets + total.rx_read_packets,
    })
}

/// Prints the summary of what `guest`'s QPs executed and writes it to `path`.
#[cfg_attr(not(any(feature = "libvirt", feature = "xen")), allow(dead_code))]
pub fn report(
    domain: &str,
    guest: &resex_softhca::GuestPort,
    path: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let s = summary(domain, &guest.qp_stats(), guest.retired_stats());
    println!("{s}");
    if let Some(p) = path {
        std::fs::write(p, format!("{s}\n"))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_over_qps() {
        let a = QpStats {
            wqes: 3,
            tx_bytes: 100,
            tx_packets: 2,
            rx_read_packets: 1,
            ..QpStats::default()
        };
        let s = summary("d", &[(7, a), (9, a)], (QpStats::default(), 0));
        assert_eq!(s["wqes"], 6);
        assert_eq!(s["tx_bytes"], 200);
        assert_eq!(s["mtus"], 6);
        assert_eq!(s["qps"][1]["qpn"], 9);
        // A destroyed QP's work stays in the totals.
        let s = summary("d", &[(9, a)], (a, 1));
        assert_eq!(
            (s["wqes"].clone(), s["tx_bytes"].clone()),
            (6.into(), 200.into())
        );
        assert_eq!(s["mtus"], 6);
        assert_eq!(s["retired"]["qps"], 1);
        assert_eq!(s["retired"]["tx_bytes"], 100);
    }
}
