//! The VM table's columns, defined once: header, sort key, width, cell text, CSV value.

use crate::VmSnap;
use std::cmp::Ordering;

/// A column of the VM table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// VM name.
    Name,
    /// registered / waiting / rejected.
    State,
    /// CPU use, % of one CPU.
    Cpu,
    /// CPU cap in force (% of one CPU), none when uncapped.
    Cap,
    /// Resos balance.
    Balance,
    /// Resos allotment per epoch.
    Allotment,
    /// Price rate.
    Rate,
    /// MTU-sized packets per second.
    Mtus,
    /// Bytes sent per second.
    Bytes,
    /// Work requests per second.
    Wqes,
    /// Reported latency p50.
    P50,
    /// Reported latency p99.
    P99,
    /// Interference the policy attributes to the VM, %.
    Intf,
    /// Guaranteed transmit share in the port's scheduler (the rate lever), bits/s.
    TxShare,
    /// Transmit ceiling, bits/s.
    TxMax,
    /// What the admin grants it on the link (its entitlement), bits/s.
    Entitled,
    /// Its transmit rate, % of its entitlement (`+`: above it, where a policy may limit it).
    Use,
    /// Monitor overruns plus anomalies plus refused reports.
    Faults,
}

/// Every column, in display order.
pub const ALL: [Column; 18] = [
    Column::Name,
    Column::State,
    Column::Cpu,
    Column::Cap,
    Column::Balance,
    Column::Allotment,
    Column::Rate,
    Column::Mtus,
    Column::Bytes,
    Column::Wqes,
    Column::P50,
    Column::P99,
    Column::Intf,
    Column::TxShare,
    Column::TxMax,
    Column::Entitled,
    Column::Use,
    Column::Faults,
];

/// A number with a k/M/G suffix in 5 characters or so.
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Microseconds as us, ms or s.
pub fn us(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}s", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}ms", v / 1e3)
    } else {
        format!("{v:.0}us")
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

impl Column {
    /// Header text.
    pub fn header(self) -> &'static str {
        match self {
            Column::Name => "VM",
            Column::State => "STATE",
            Column::Cpu => "CPU%",
            Column::Cap => "CAP%",
            Column::Balance => "BALANCE",
            Column::Allotment => "ALLOT",
            Column::Rate => "RATE",
            Column::Mtus => "MTU/s",
            Column::Bytes => "BYTES/s",
            Column::Wqes => "WQE/s",
            Column::P50 => "P50",
            Column::P99 => "P99",
            Column::Intf => "INTF%",
            Column::TxShare => "TXSHR",
            Column::TxMax => "TXMAX",
            Column::Entitled => "ENTL",
            Column::Use => "USE%",
            Column::Faults => "FAULTS",
        }
    }

    /// The key that sorts by this column.
    pub fn key(self) -> char {
        match self {
            Column::Name => 'n',
            Column::State => 's',
            Column::Cpu => 'c',
            Column::Cap => 'a',
            Column::Balance => 'b',
            Column::Allotment => 'o',
            Column::Rate => 'r',
            Column::Mtus => 'm',
            Column::Bytes => 'y',
            Column::Wqes => 'w',
            Column::P50 => '5',
            Column::P99 => '9',
            Column::Intf => 'i',
            Column::TxShare => 'h',
            Column::TxMax => 'x',
            Column::Entitled => 'g',
            Column::Use => 'u',
            Column::Faults => 'e',
        }
    }

    /// Display width, characters: the widest cell, or the header with its sort key.
    pub fn width(self) -> u16 {
        let cells: u16 = match self {
            Column::Name => 16,
            Column::State => 10,
            Column::Cap => 9,
            Column::Balance | Column::Bytes => 7,
            _ => 6,
        };
        let header = u16::try_from(self.header().len() + 3).unwrap_or(u16::MAX);
        cells.max(header)
    }

    /// How important the column is when the terminal is narrow (lower goes first... last).
    pub fn priority(self) -> u8 {
        match self {
            Column::Name | Column::Cpu | Column::Cap | Column::Mtus | Column::P99 => 0,
            Column::Bytes | Column::P50 | Column::Balance | Column::Intf => 1,
            Column::State | Column::Faults | Column::Rate | Column::TxMax | Column::Use => 2,
            Column::Wqes | Column::Allotment | Column::TxShare | Column::Entitled => 3,
        }
    }

    /// The cell's text.
    pub fn cell(self, v: &VmSnap) -> String {
        match self {
            Column::Name => v.name.clone(),
            Column::State => v.state.clone(),
            Column::Cpu => format!("{:.0}", v.cpu_pct),
            Column::Cap => opt(v.cap_pct, |c| format!("{c:.0} {}", who(v))),
            Column::Balance => opt(v.balance, si),
            Column::Allotment => opt(v.allotment, si),
            Column::Rate => opt(v.rate, |r| format!("{r:.2}")),
            Column::Mtus => si(v.mtus_per_s),
            Column::Bytes => si(v.bytes_per_s),
            Column::Wqes => si(v.wqes_per_s),
            Column::P50 => opt(v.lat_p50_us, us),
            Column::P99 => opt(v.lat_p99_us, us),
            Column::Intf => opt(v.intf_pct, |i| format!("{i:.0}")),
            Column::TxShare => opt(bits(v.tx_share_bps), si),
            Column::TxMax => opt(bits(v.tx_max_bps), si),
            Column::Entitled => entitled(v).map_or_else(|| "-".into(), si),
            Column::Use => opt(use_pct(v), |u| {
                format!("{u:.0}{}", if v.excess == Some(true) { "+" } else { "" })
            }),
            Column::Faults => faults(v).to_string(),
        }
    }

    /// The value for CSV output: plain numbers, empty when unknown.
    pub fn csv(self, v: &VmSnap) -> String {
        let o = |x: Option<f64>| x.map_or(String::new(), |x| x.to_string());
        match self {
            Column::Name => v.name.clone(),
            Column::State => v.state.clone(),
            Column::Cpu => v.cpu_pct.to_string(),
            Column::Cap => o(v.cap_pct),
            Column::Balance => o(v.balance),
            Column::Allotment => o(v.allotment),
            Column::Rate => o(v.rate),
            Column::Mtus => v.mtus_per_s.to_string(),
            Column::Bytes => v.bytes_per_s.to_string(),
            Column::Wqes => v.wqes_per_s.to_string(),
            Column::P50 => o(v.lat_p50_us),
            Column::P99 => o(v.lat_p99_us),
            Column::Intf => o(v.intf_pct),
            Column::TxShare => o(bits(v.tx_share_bps)),
            Column::TxMax => o(bits(v.tx_max_bps)),
            Column::Entitled => o(entitled(v)),
            Column::Use => o(use_pct(v)),
            Column::Faults => faults(v).to_string(),
        }
    }

    /// The CSV header (snake case, with units).
    pub fn csv_header(self) -> &'static str {
        match self {
            Column::Name => "vm",
            Column::State => "state",
            Column::Cpu => "cpu_pct",
            Column::Cap => "cap_pct",
            Column::Balance => "balance",
            Column::Allotment => "allotment",
            Column::Rate => "rate",
            Column::Mtus => "mtus_per_s",
            Column::Bytes => "bytes_per_s",
            Column::Wqes => "wqes_per_s",
            Column::P50 => "lat_p50_us",
            Column::P99 => "lat_p99_us",
            Column::Intf => "intf_pct",
            Column::TxShare => "tx_share_bps",
            Column::TxMax => "tx_max_bps",
            Column::Entitled => "entitled_bps",
            Column::Use => "tx_use_pct_of_entitled",
            Column::Faults => "faults",
        }
    }

    /// Orders two VMs by this column (unknown values last, names break ties).
    pub fn compare(self, a: &VmSnap, b: &VmSnap) -> Ordering {
        let num = |f: fn(&VmSnap) -> Option<f64>| -> Ordering {
            match (f(a), f(b)) {
                (Some(x), Some(y)) => x.total_cmp(&y),
                (Some(_), None) => Ordering::Greater,
                (None, Some(_)) => Ordering::Less,
                (None, None) => Ordering::Equal,
            }
        };
        let o = match self {
            Column::Name => a.name.cmp(&b.name),
            Column::State => a.state.cmp(&b.state),
            Column::Cpu => num(|v| Some(v.cpu_pct)),
            Column::Cap => num(|v| v.cap_pct),
            Column::Balance => num(|v| v.balance),
            Column::Allotment => num(|v| v.allotment),
            Column::Rate => num(|v| v.rate),
            Column::Mtus => num(|v| Some(v.mtus_per_s)),
            Column::Bytes => num(|v| Some(v.bytes_per_s)),
            Column::Wqes => num(|v| Some(v.wqes_per_s)),
            Column::P50 => num(|v| v.lat_p50_us),
            Column::P99 => num(|v| v.lat_p99_us),
            Column::Intf => num(|v| v.intf_pct),
            Column::TxShare => num(|v| bits(v.tx_share_bps)),
            Column::TxMax => num(|v| bits(v.tx_max_bps)),
            Column::Entitled => num(entitled),
            Column::Use => num(use_pct),
            Column::Faults => faults(a).cmp(&faults(b)),
        };
        o.then_with(|| a.name.cmp(&b.name))
    }

    /// The column sorted by `key`.
    pub fn by_key(key: char) -> Option<Column> {
        ALL.into_iter().find(|c| c.key() == key)
    }
}

/// Who set a cap, in a word: the policy (its decision's reason, shortened).
fn who(v: &VmSnap) -> String {
    v.cap_reason
        .as_deref()
        .and_then(|r| r.split_whitespace().next())
        .map_or_else(|| "set".into(), |w| w.chars().take(5).collect())
}

/// A rate as a float (for the table and sorting).
#[allow(clippy::cast_precision_loss)]
fn bits(v: Option<u64>) -> Option<f64> {
    v.map(|b| b as f64)
}

/// Its entitlement, when the host knows one.
pub fn entitled(v: &VmSnap) -> Option<f64> {
    (v.entitled_bps > 0.0).then_some(v.entitled_bps)
}

/// Its transmit rate as a percentage of its entitlement.
pub fn use_pct(v: &VmSnap) -> Option<f64> {
    Some(100.0 * v.tx_rate_bps? / entitled(v)?)
}

/// Monitor overruns, anomalies and refused reports.
pub fn faults(v: &VmSnap) -> u64 {
    v.overruns + v.anomalies + v.bad_reports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_sorts() {
        assert_eq!(si(1_234_567.0), "1.2M");
        assert_eq!(si(15_000.0), "15k");
        assert_eq!(us(1234.0), "1234us");
        assert_eq!(us(25_000.0), "25.0ms");
        let a = VmSnap {
            name: "a".into(),
            lat_p99_us: Some(10.0),
            ..Default::default()
        };
        let b = VmSnap {
            name: "b".into(),
            lat_p99_us: None,
            ..Default::default()
        };
        assert_eq!(Column::P99.compare(&a, &b), Ordering::Greater);
        assert_eq!(Column::P99.cell(&b), "-");
        assert_eq!(Column::Entitled.cell(&b), "-", "no policy, no entitlement");
        let e = VmSnap {
            entitled_bps: 2e9,
            tx_rate_bps: Some(3e9),
            excess: Some(true),
            ..Default::default()
        };
        assert_eq!(Column::Entitled.cell(&e), "2.0G");
        assert_eq!(Column::Use.cell(&e), "150+");
        assert_eq!(Column::Use.csv(&e), "150");
        for c in ALL {
            assert_eq!(Column::by_key(c.key()), Some(c), "keys are unique");
        }
    }
}
