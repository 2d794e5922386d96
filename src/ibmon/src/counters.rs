//! What the monitor counts, per QP.

use serde::{Deserialize, Serialize};
use std::ops::{AddAssign, Sub};

/// Per-QP counts. `mtus = tx_packets + rx_read_packets` (what the VM puts on its port: the
/// charge basis).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Send WQEs completed.
    pub wqes: u64,
    /// CQEs consumed on the send and receive CQs.
    pub completions: u64,
    /// Payload bytes of completed SEND/SEND_IMM/RDMA_WRITE/RDMA_WRITE_IMM.
    pub tx_bytes: u64,
    /// Packets this VM sent: data packets of the above plus one request per READ and atomic.
    pub tx_packets: u64,
    /// Length of completed RDMA READs.
    pub rx_read_bytes: u64,
    /// Response packets of completed READs (and the one response of each atomic).
    pub rx_read_packets: u64,
    /// `byte_cnt` of responder CQEs (RESP_SEND*, RESP_WR_IMM).
    pub recv_bytes: u64,
    /// `tx_packets + rx_read_packets`.
    pub mtus: u64,
    /// Error CQEs.
    pub errors: u64,
    /// Times the monitor was lapped by the HCA and resynchronised (counts were lost, never
    /// invented).
    pub overruns: u64,
    /// Index mismatches, impossible `ds`, compressed CQEs, unknown opcodes, unknown QPNs.
    pub anomalies: u64,
}

impl Counters {
    /// Adds a message that this VM transmits (`tx_packets`, `mtus`).
    pub(crate) fn add_tx(&mut self, bytes: u64, packets: u64) {
        self.tx_bytes += bytes;
        self.tx_packets += packets;
        self.mtus += packets;
    }

    /// Adds response traffic to this VM's READs and atomics.
    pub(crate) fn add_rx_read(&mut self, bytes: u64, packets: u64) {
        self.rx_read_bytes += bytes;
        self.rx_read_packets += packets;
        self.mtus += packets;
    }

    /// Nothing counted.
    #[inline]
    pub fn is_zero(&self) -> bool {
        (self.wqes | self.completions | self.tx_bytes | self.tx_packets | self.rx_read_bytes)
            | (self.rx_read_packets | self.recv_bytes | self.mtus | self.errors)
            | (self.overruns | self.anomalies)
            == 0
    }
}

impl AddAssign for Counters {
    fn add_assign(&mut self, o: Counters) {
        self.wqes += o.wqes;
        self.completions += o.completions;
        self.tx_bytes += o.tx_bytes;
        self.tx_packets += o.tx_packets;
        self.rx_read_bytes += o.rx_read_bytes;
        self.rx_read_packets += o.rx_read_packets;
        self.recv_bytes += o.recv_bytes;
        self.mtus += o.mtus;
        self.errors += o.errors;
        self.overruns += o.overruns;
        self.anomalies += o.anomalies;
    }
}

impl Sub for Counters {
    type Output = Counters;
    /// The counts between two snapshots (saturating: counters only grow).
    fn sub(self, o: Counters) -> Counters {
        Counters {
            wqes: self.wqes.saturating_sub(o.wqes),
            completions: self.completions.saturating_sub(o.completions),
            tx_bytes: self.tx_bytes.saturating_sub(o.tx_bytes),
            tx_packets: self.tx_packets.saturating_sub(o.tx_packets),
            rx_read_bytes: self.rx_read_bytes.saturating_sub(o.rx_read_bytes),
            rx_read_packets: self.rx_read_packets.saturating_sub(o.rx_read_packets),
            recv_bytes: self.recv_bytes.saturating_sub(o.recv_bytes),
            mtus: self.mtus.saturating_sub(o.mtus),
            errors: self.errors.saturating_sub(o.errors),
            overruns: self.overruns.saturating_sub(o.overruns),
            anomalies: self.anomalies.saturating_sub(o.anomalies),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtus_track_both_directions() {
        let mut c = Counters::default();
        c.add_tx(3000, 3);
        c.add_rx_read(10, 1);
        assert_eq!(c.mtus, 4);
        let mut d = c;
        d += c;
        assert_eq!(d.tx_bytes, 6000);
        assert_eq!(d - c, c);
        assert_eq!((c - d).mtus, 0);
        assert!((c - c).is_zero() && Counters::default().is_zero());
        let one_error = Counters {
            errors: 1,
            ..Counters::default()
        };
        assert!(!one_error.is_zero() && !c.is_zero());
    }

    #[test]
    fn serialises_with_the_documented_keys_in_order() {
        let j = serde_json::to_string(&Counters::default()).unwrap();
        assert_eq!(
            j,
            r#"{"wqes":0,"completions":0,"tx_bytes":0,"tx_packets":0,"rx_read_bytes":0,"rx_read_packets":0,"recv_bytes":0,"mtus":0,"errors":0,"overruns":0,"anomalies":0}"#
        );
    }
}
