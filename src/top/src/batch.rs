//! Output for scripts: `resex top --batch --json|--csv` (a stream, as `xentop -b` and
//! `virt-top --csv`) and `resex status [--json]` (one snapshot).

use crate::columns::{Column, ALL};
use crate::Snapshot;
use std::io::Write;

/// Batch formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON snapshot per line (the API's own format).
    Json,
    /// One CSV row per VM per snapshot, with a header first.
    Csv,
    /// A plain table per snapshot.
    Text,
}

/// The CSV header.
pub fn csv_header() -> String {
    let mut h = vec!["time_s".to_owned()];
    h.extend(ALL.iter().map(|c| c.csv_header().to_owned()));
    h.join(",")
}

/// Writes one snapshot in `format`.
pub fn write(out: &mut dyn Write, s: &Snapshot, format: Format) -> std::io::Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer(&mut *out, s)?;
            writeln!(out)
        }
        Format::Csv => {
            #[allow(clippy::cast_precision_loss)]
            let t = s.uptime_ms as f64 / 1000.0;
            let mut w = csv::WriterBuilder::new()
                .has_headers(false)
                .from_writer(&mut *out);
            for v in &s.vms {
                let mut row = vec![format!("{t:.3}")];
                row.extend(ALL.iter().map(|c| c.csv(v)));
                w.write_record(&row)?;
            }
            w.flush()
        }
        Format::Text => {
            writeln!(out, "{}", host_line(s))?;
            let cols: Vec<Column> = ALL.to_vec();
            let line = |cells: Vec<String>| {
                cells
                    .iter()
                    .zip(&cols)
                    .map(|(c, col)| format!("{:>w$}", c, w = usize::from(col.width())))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            writeln!(
                out,
                "{}",
                line(cols.iter().map(|c| c.header().to_owned()).collect())
            )?;
            for v in &s.vms {
                writeln!(out, "{}", line(cols.iter().map(|c| c.cell(v)).collect()))?;
            }
            for v in &s.vms {
                writeln!(out, "  {}: {}", v.name, crate::grant::line(v))?;
                if let Some(late) = crate::late::line(v) {
                    writeln!(out, "  {}: {late}", v.name)?;
                }
                if let Some(period) = crate::period::line(v) {
                    writeln!(out, "  {}: {period}", v.name)?;
                }
            }
            Ok(())
        }
    }
}

#[allow(clippy::cast_precision_loss)]
fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// The host summary line.
pub fn host_line(s: &Snapshot) -> String {
    let h = &s.host;
    format!(
        "host: backend {}  policy {}  link {:.0}%  {} MTU/s  epoch {:.0}%  tick late p50/p99/max {:.0}/{:.0}/{:.0} us  scan {:.1} us  up {:.0} s  {} VMs",
        h.backend,
        if h.policy.is_empty() { "none" } else { &h.policy },
        h.link_util * 100.0,
        crate::columns::si(h.mtus_per_s),
        h.epoch_progress * 100.0,
        h.tick_late_p50_us,
        h.tick_late_p99_us,
        h.tick_late_max_us,
        h.scan_us,
        secs(s.uptime_ms),
        s.vms.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VmSnap;

    #[test]
    fn csv_rows_match_the_header_and_json_round_trips() {
        let s = Snapshot {
            uptime_ms: 1500,
            vms: vec![VmSnap {
                name: "a,b".into(),
                cap_pct: Some(40.0),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut out = Vec::new();
        write(&mut out, &s, Format::Csv).unwrap();
        let mut r = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(out.as_slice());
        let row = r.records().next().unwrap().unwrap();
        assert_eq!(row.len(), csv_header().split(',').count());
        assert_eq!(&row[0], "1.500");
        assert_eq!(&row[1], "a,b");
        let mut out = Vec::new();
        write(&mut out, &s, Format::Json).unwrap();
        let back: Snapshot = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, s);
        let mut out = Vec::new();
        write(&mut out, &s, Format::Text).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("CAP%") && text.contains("ENTL"), "{text}");
        assert!(text.contains("  a,b: entitlement: unknown"), "{text}");
    }
}
