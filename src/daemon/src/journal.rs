//! The journal: one CSV row per VM per interval in the trace format `resex price replay` reads
//! (so a day on a host can be replayed under another policy), plus the pricing outcome and cap
//! changes: `balance, rate, cap` (in force), `cap_set, cap_reason` and the transmit limit
//! `tx_share_bps, tx_max_bps, tx_reason` (when they changed), and the VM's id beside its name
//! (`vm_id`: the id the API and the core use).

use std::io::{BufWriter, Write};
use std::path::Path;

/// Columns, in order.
pub const COLUMNS: &str = "interval,vm,vm_id,vcpus,cpu_pct,mtus,bytes,lat_count,lat_mean_ns,lat_stddev_ns,lat_p50_ns,lat_p99_ns,lat_p999_ns,link_util,weight,balance,rate,cap,cap_set,cap_reason,tx_share_bps,tx_max_bps,tx_reason";

/// A journal file.
pub struct Journal {
    w: BufWriter<std::fs::File>,
    rows: u64,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Journal({} rows)", self.rows)
    }
}

/// One row.
#[derive(Debug, Clone, Default)]
pub struct Row<'a> {
    /// Interval.
    pub interval: u64,
    /// VM name.
    pub vm: &'a str,
    /// Its id (stable for the daemon's run).
    pub id: resex_common::VmId,
    /// vCPUs.
    pub vcpus: u32,
    /// CPU percent.
    pub cpu_pct: f64,
    /// MTUs.
    pub mtus: u64,
    /// Bytes.
    pub bytes: u64,
    /// The report, if one came.
    pub report: Option<resex_pricing::LatencyReport>,
    /// Link utilisation.
    pub link_util: Option<f64>,
    /// Weight.
    pub weight: f64,
    /// Balance, rate, cap in force (with a policy).
    pub priced: Option<(f64, f64, f64)>,
    /// A cap set this interval, and why.
    pub cap_set: Option<(f64, String)>,
    /// A transmit limit set this interval, and why.
    pub tx_set: Option<(resex_common::TxLimit, String)>,
}

fn csv_text(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

impl Journal {
    /// Creates (truncates) the file and writes the header.
    pub fn create(path: &Path) -> std::io::Result<Journal> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let mut w = BufWriter::with_capacity(1 << 16, std::fs::File::create(path)?);
        writeln!(w, "{COLUMNS}")?;
        Ok(Journal { w, rows: 0 })
    }

    /// Appends a row.
    pub fn write(&mut self, r: &Row<'_>) -> std::io::Result<()> {
        let (lc, lm, ls, l50, l99, l999) = match r.report {
            Some(x) => (
                x.count.to_string(),
                format!("{:.0}", x.mean_ns),
                format!("{:.0}", x.stddev_ns),
                format!("{:.0}", x.p50_ns),
                format!("{:.0}", x.p99_ns),
                format!("{:.0}", x.p999_ns),
            ),
            None => Default::default(),
        };
        let (bal, rate, cap) = match r.priced {
            Some((b, ra, c)) => (format!("{b:.3}"), format!("{ra:.4}"), format!("{c:.3}")),
            None => Default::default(),
        };
        let (cs, why) = match &r.cap_set {
            Some((c, w)) => (format!("{c:.3}"), csv_text(w)),
            None => Default::default(),
        };
        let opt = |v: Option<u64>| v.map(|b| b.to_string()).unwrap_or_default();
        let (ts, tm, twhy) = match &r.tx_set {
            Some((t, w)) => (opt(t.share_bps), opt(t.max_bps), csv_text(w)),
            None => Default::default(),
        };
        writeln!(
            self.w,
            "{},{},{},{},{:.3},{},{},{lc},{lm},{ls},{l50},{l99},{l999},{},{},{bal},{rate},{cap},{cs},{why},{ts},{tm},{twhy}",
            r.interval,
            csv_text(r.vm),
            r.id.0,
            r.vcpus,
            r.cpu_pct,
            r.mtus,
            r.bytes,
            r.link_util.map(|u| format!("{u:.4}")).unwrap_or_default(),
            r.weight,
        )?;
        self.rows += 1;
        Ok(())
    }

    /// Flushes to the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}
