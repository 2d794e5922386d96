//! The usage trace: CSV with one row per interval and VM, the format the daemon's journal
//! writes and `resex price replay` reads.
//!
//! Required columns (any order): `interval,vm,vcpus,cpu_pct,mtus,lat_count,lat_mean_ns,
//! lat_stddev_ns,lat_p99_ns`. Optional: `bytes`, `lat_p50_ns`, `lat_p999_ns`, `link_util`,
//! `weight`. Other columns are ignored. The latency fields are empty when no report came.
//! Without `bytes`, a replay takes each row to send `mtus` full packets of the policy's path
//! MTU ([`Trace::has_bytes`]).

use crate::types::LatencyReport;
use std::collections::HashMap;
use std::io::Read;
use thiserror::Error;

/// Columns every trace must have.
pub const REQUIRED: [&str; 9] = [
    "interval",
    "vm",
    "vcpus",
    "cpu_pct",
    "mtus",
    "lat_count",
    "lat_mean_ns",
    "lat_stddev_ns",
    "lat_p99_ns",
];

/// A trace that cannot be read. Line numbers count from 1, the header being line 1.
#[derive(Debug, Error, PartialEq)]
pub enum TraceError {
    /// The header lacks a required column.
    #[error("the trace's header has no `{0}` column (required: {req})", req = REQUIRED.join(","))]
    MissingColumn(&'static str),
    /// The CSV itself is broken.
    #[error("line {line}: {message}")]
    Csv {
        /// Line.
        line: u64,
        /// What the CSV reader said.
        message: String,
    },
    /// A value that does not parse or is out of range.
    #[error("line {line}: column `{column}`: `{value}` is not {expected}")]
    Value {
        /// Line.
        line: u64,
        /// Column.
        column: &'static str,
        /// What was there.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// Intervals went backwards.
    #[error(
        "line {line}: interval {got} comes after interval {previous}; a trace is in interval order"
    )]
    OutOfOrder {
        /// Line.
        line: u64,
        /// This row's interval.
        got: u64,
        /// The previous row's.
        previous: u64,
    },
    /// Two rows for one VM in one interval.
    #[error("line {line}: a second row for `{vm}` in interval {interval}")]
    Duplicate {
        /// Line.
        line: u64,
        /// VM.
        vm: String,
        /// Interval.
        interval: u64,
    },
    /// A VM's vCPU count changed.
    #[error("line {line}: `{vm}` has {got} vCPUs here but {before} before; a VM's vCPU count is fixed in a trace")]
    VcpusChanged {
        /// Line.
        line: u64,
        /// VM.
        vm: String,
        /// This row's.
        got: u32,
        /// Earlier rows'.
        before: u32,
    },
    /// Some latency fields given, others not.
    #[error("line {line}: a latency report needs lat_count, lat_mean_ns, lat_stddev_ns and lat_p99_ns all set, or all empty")]
    PartialReport {
        /// Line.
        line: u64,
    },
}

/// One row.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    /// Line in the file (1-based; the header is line 1).
    pub line: u64,
    /// Interval index.
    pub interval: u64,
    /// VM name.
    pub vm: String,
    /// vCPUs.
    pub vcpus: u32,
    /// CPU percent of one physical CPU.
    pub cpu_pct: f64,
    /// MTUs sent.
    pub mtus: u64,
    /// Bytes sent (0 when the column is absent: see [`Trace::has_bytes`]).
    pub bytes: u64,
    /// The report that arrived, if any.
    pub report: Option<LatencyReport>,
    /// Measured link utilisation, when the trace has it.
    pub link_util: Option<f64>,
    /// The VM's weight, when the trace has it.
    pub weight: Option<f64>,
}

/// A parsed trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// Rows in file order (interval order).
    pub rows: Vec<TraceRow>,
    /// The header had a `bytes` column (without one, every row's `bytes` is 0: a replay takes
    /// bytes as `mtus` full packets of the policy's path MTU).
    pub has_bytes: bool,
}

struct Columns {
    idx: HashMap<&'static str, usize>,
}

const OPTIONAL: [&str; 5] = ["bytes", "lat_p50_ns", "lat_p999_ns", "link_util", "weight"];

impl Columns {
    fn get<'r>(&self, rec: &'r csv::StringRecord, col: &'static str) -> Option<&'r str> {
        self.idx
            .get(col)
            .and_then(|&i| rec.get(i))
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }
}

fn parse<T: std::str::FromStr>(
    line: u64,
    column: &'static str,
    text: &str,
    expected: &'static str,
) -> Result<T, TraceError> {
    text.parse().map_err(|_| TraceError::Value {
        line,
        column,
        value: text.to_owned(),
        expected,
    })
}

fn non_negative(line: u64, column: &'static str, text: &str) -> Result<f64, TraceError> {
    let v: f64 = parse(line, column, text, "a finite, non-negative number")?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(TraceError::Value {
            line,
            column,
            value: text.to_owned(),
            expected: "a finite, non-negative number",
        })
    }
}

impl Trace {
    /// Reads a whole trace, checking every row.
    pub fn read(input: impl Read) -> Result<Self, TraceError> {
        let mut rdr = csv::ReaderBuilder::new()
            .flexible(false)
            .trim(csv::Trim::All)
            .from_reader(input);
        let headers = rdr.headers().map_err(|e| TraceError::Csv {
            line: 1,
            message: e.to_string(),
        })?;
        let cols = Columns::of(headers)?;
        let has_bytes = cols.idx.contains_key("bytes");
        let mut rows: Vec<TraceRow> = Vec::new();
        let mut order = Order::default();
        let mut rec = csv::StringRecord::new();
        loop {
            let more = rdr.read_record(&mut rec).map_err(|e| TraceError::Csv {
                line: e.position().map_or(0, |p| p.line()),
                message: e.to_string(),
            })?;
            if !more {
                break;
            }
            let row = cols.row(&rec)?;
            order.check(&row, rows.last())?;
            rows.push(row);
        }
        Ok(Self { rows, has_bytes })
    }
}

impl Columns {
    /// Where each known column is (a required one missing is an error).
    fn of(headers: &csv::StringRecord) -> Result<Self, TraceError> {
        let mut idx = HashMap::new();
        for name in REQUIRED.iter().chain(OPTIONAL.iter()) {
            if let Some(i) = headers.iter().position(|h| h.trim() == *name) {
                idx.insert(*name, i);
            } else if REQUIRED.contains(name) {
                return Err(TraceError::MissingColumn(name));
            }
        }
        Ok(Self { idx })
    }

    /// One record as a row, every value checked.
    fn row(&self, rec: &csv::StringRecord) -> Result<TraceRow, TraceError> {
        let line = rec.position().map_or(0, |p| p.line());
        let req = |c: &'static str| {
            self.get(rec, c).ok_or(TraceError::Value {
                line,
                column: c,
                value: String::new(),
                expected: "set (this column may not be empty)",
            })
        };
        let interval = parse(line, "interval", req("interval")?, "an interval index")?;
        let vm = req("vm")?.to_owned();
        let vcpus: u32 = parse(line, "vcpus", req("vcpus")?, "a vCPU count")?;
        if vcpus == 0 {
            return Err(TraceError::Value {
                line,
                column: "vcpus",
                value: "0".into(),
                expected: "1 or more",
            });
        }
        Ok(TraceRow {
            line,
            interval,
            vm,
            vcpus,
            cpu_pct: non_negative(line, "cpu_pct", req("cpu_pct")?)?,
            mtus: parse(line, "mtus", req("mtus")?, "a non-negative integer")?,
            bytes: match self.get(rec, "bytes") {
                Some(t) => parse(line, "bytes", t, "a non-negative integer")?,
                None => 0,
            },
            report: self.report(rec, line)?,
            link_util: self
                .get(rec, "link_util")
                .map(|t| non_negative(line, "link_util", t))
                .transpose()?,
            weight: self.weight(rec, line)?,
        })
    }

    /// The row's latency report: all four `lat_` columns or none.
    fn report(
        &self,
        rec: &csv::StringRecord,
        line: u64,
    ) -> Result<Option<LatencyReport>, TraceError> {
        let lat = [
            self.get(rec, "lat_count"),
            self.get(rec, "lat_mean_ns"),
            self.get(rec, "lat_stddev_ns"),
            self.get(rec, "lat_p99_ns"),
        ];
        let [Some(c), Some(m), Some(s), Some(p)] = lat else {
            return match lat {
                [None, None, None, None] => Ok(None),
                _ => Err(TraceError::PartialReport { line }),
            };
        };
        let opt = |col: &'static str| -> Result<f64, TraceError> {
            self.get(rec, col)
                .map_or(Ok(0.0), |t| non_negative(line, col, t))
        };
        Ok(Some(LatencyReport {
            count: parse(line, "lat_count", c, "a non-negative integer")?,
            mean_ns: non_negative(line, "lat_mean_ns", m)?,
            stddev_ns: non_negative(line, "lat_stddev_ns", s)?,
            p99_ns: non_negative(line, "lat_p99_ns", p)?,
            p50_ns: opt("lat_p50_ns")?,
            p999_ns: opt("lat_p999_ns")?,
        }))
    }

    /// The row's weight, when the trace has one: above 0.
    fn weight(&self, rec: &csv::StringRecord, line: u64) -> Result<Option<f64>, TraceError> {
        let Some(t) = self.get(rec, "weight") else {
            return Ok(None);
        };
        let w = non_negative(line, "weight", t)?;
        if w == 0.0 {
            return Err(TraceError::Value {
                line,
                column: "weight",
                value: t.to_owned(),
                expected: "above 0",
            });
        }
        Ok(Some(w))
    }
}

/// What the rows so far allow of the next: intervals never go back, a VM at most once per
/// interval, a VM's vCPUs never change.
#[derive(Default)]
struct Order {
    in_interval: HashMap<String, u64>,
    vcpus_seen: HashMap<String, u32>,
}

impl Order {
    fn check(&mut self, row: &TraceRow, prev: Option<&TraceRow>) -> Result<(), TraceError> {
        let (line, interval, vm) = (row.line, row.interval, &row.vm);
        if let Some(prev) = prev.filter(|p| interval < p.interval) {
            return Err(TraceError::OutOfOrder {
                line,
                got: interval,
                previous: prev.interval,
            });
        }
        if self.in_interval.insert(vm.clone(), interval) == Some(interval) {
            return Err(TraceError::Duplicate {
                line,
                vm: vm.clone(),
                interval,
            });
        }
        match self.vcpus_seen.get(vm) {
            Some(&before) if before != row.vcpus => Err(TraceError::VcpusChanged {
                line,
                vm: vm.clone(),
                got: row.vcpus,
                before,
            }),
            Some(_) => Ok(()),
            None => {
                self.vcpus_seen.insert(vm.clone(), row.vcpus);
                Ok(())
            }
        }
    }
}
