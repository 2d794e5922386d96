//! Printing counts: the exact JSON shape of `resex ibmon scan --json`, and a table.

use resex_ibmon::Counters;
use serde::Serialize;

/// One QP's counts, with its QPN first.
#[derive(Serialize, Clone, Copy)]
pub struct QpCounts {
    /// QP number (`null`: soft-RoCE completions of QPs the registration did not name).
    pub qpn: Option<u32>,
    /// `"rxe"` for soft-RoCE queues; absent for mlx5.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<&'static str>,
    /// The counts.
    #[serde(flatten)]
    pub counts: Counters,
}

impl QpCounts {
    /// An mlx5 QP.
    pub fn mlx5(qpn: u32, counts: Counters) -> QpCounts {
        QpCounts {
            qpn: Some(qpn),
            format: None,
            counts,
        }
    }

    /// A soft-RoCE QP (or the completions of none).
    pub fn rxe(qpn: Option<u32>, counts: Counters) -> QpCounts {
        QpCounts {
            qpn,
            format: Some("rxe"),
            counts,
        }
    }

    /// The counts since `then` (the same QP earlier).
    pub fn since(self, then: &QpCounts) -> QpCounts {
        QpCounts {
            counts: self.counts - then.counts,
            ..self
        }
    }

    /// How the table names it: `0x11`, `0x11 rxe`, `- rxe`.
    fn label(&self) -> String {
        let qpn = self.qpn.map_or("-".to_string(), |q| format!("{q:#x}"));
        match self.format {
            Some(f) => format!("{qpn} {f}"),
            None => qpn,
        }
    }
}

/// `{"qps":[...],"total":{...}}`.
#[derive(Serialize)]
pub struct Report {
    /// Per QP, by QPN.
    pub qps: Vec<QpCounts>,
    /// Sum over the QPs.
    pub total: Counters,
}

impl Report {
    /// A report from per-QP counts.
    pub fn new(qps: Vec<QpCounts>) -> Report {
        let mut total = Counters::default();
        for q in &qps {
            total += q.counts;
        }
        Report { qps, total }
    }

    /// Compact JSON.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// An aligned text table.
    pub fn table(&self) -> String {
        let head = [
            "QPN",
            "WQEs",
            "CQEs",
            "TX bytes",
            "TX pkts",
            "READ bytes",
            "READ pkts",
            "RECV bytes",
            "MTUs",
            "errors",
            "overruns",
            "anomalies",
        ];
        let row = |name: String, c: &Counters| {
            vec![
                name,
                c.wqes.to_string(),
                c.completions.to_string(),
                c.tx_bytes.to_string(),
                c.tx_packets.to_string(),
                c.rx_read_bytes.to_string(),
                c.rx_read_packets.to_string(),
                c.recv_bytes.to_string(),
                c.mtus.to_string(),
                c.errors.to_string(),
                c.overruns.to_string(),
                c.anomalies.to_string(),
            ]
        };
        let mut rows: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
        for q in &self.qps {
            rows.push(row(q.label(), &q.counts));
        }
        rows.push(row("total".into(), &self.total));
        let widths: Vec<usize> = (0..head.len())
            .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for r in rows {
            let cells: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i == 0 {
                        format!("{c:<w$}", w = widths[i])
                    } else {
                        format!("{c:>w$}", w = widths[i])
                    }
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}
