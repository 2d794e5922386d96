//! `resex price`: policy files and open-loop replay of usage traces.

use anyhow::{Context, Result};
use clap::Subcommand;
use resex_pricing::replay::{replay, ReplayRow, COLUMNS};
use resex_pricing::trace::Trace;
use resex_pricing::PolicyConfig;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// `resex price ...`
#[derive(Subcommand, Debug)]
pub enum PriceCommand {
    /// Run a recorded usage trace through a policy, open loop, and print per interval and VM:
    /// interval,vm,allotment,balance,charge_cpu,charge_io,rate,cap,intf_pct,interferer,reason.
    Replay {
        /// Policy file (e.g. policies/ioshares.toml).
        #[arg(long)]
        policy: PathBuf,
        /// Trace CSV: interval,vm,vcpus,cpu_pct,mtus,lat_count,lat_mean_ns,lat_stddev_ns,
        /// lat_p99_ns (latency fields empty when no report came; extra columns allowed).
        /// Optional: bytes (without it, each row's bytes are its mtus full packets of the
        /// policy's ledger.path_mtu), lat_p50_ns, lat_p999_ns, link_util, weight.
        #[arg(long)]
        trace: PathBuf,
        /// JSON lines instead of CSV.
        #[arg(long)]
        json: bool,
        /// Print only the rows where a cap changed.
        #[arg(long)]
        changes_only: bool,
    },
    /// Check a policy file and print it with every default filled in.
    Check {
        /// Policy file.
        policy: PathBuf,
    },
}

/// Loads and validates a policy file.
pub fn load_policy(path: &Path) -> Result<PolicyConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read policy file {}", path.display()))?;
    PolicyConfig::from_toml(&text).with_context(|| format!("policy file {}", path.display()))
}

/// Runs a `resex price` command.
pub fn run(cmd: PriceCommand) -> Result<()> {
    match cmd {
        PriceCommand::Replay {
            policy,
            trace,
            json,
            changes_only,
        } => {
            let cfg = load_policy(&policy)?;
            let file = std::fs::File::open(&trace)
                .with_context(|| format!("cannot open trace {}", trace.display()))?;
            let trace_data = Trace::read(std::io::BufReader::new(file))
                .with_context(|| format!("trace {}", trace.display()))?;
            let out = BufWriter::new(std::io::stdout().lock());
            let mut sink = if json {
                Sink::Json(out)
            } else {
                let mut w = csv::Writer::from_writer(out);
                w.write_record(COLUMNS).map_err(csv_io)?;
                Sink::Csv(Box::new(w))
            };
            let mut failed: Option<std::io::Error> = None;
            replay(&cfg, &trace_data, |row| {
                if failed.is_none() && !(changes_only && row.reason.is_none()) {
                    failed = sink.write(row).err();
                }
            })
            .with_context(|| format!("trace {}", trace.display()))?;
            let res = match failed {
                Some(e) => Err(e),
                None => sink.flush(),
            };
            match res {
                // A closed pipe (`| head`) is a normal end, not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => Ok(r?),
            }
        }
        PriceCommand::Check { policy } => {
            let cfg = load_policy(&policy)?;
            let text = toml::to_string_pretty(&cfg)?;
            println!("# {}: valid ({} intervals per epoch, cap decisions every {} intervals, {} MTUs per epoch)",
                policy.display(), cfg.intervals_per_epoch(), cfg.intervals_per_actuation(), cfg.link_mtus_per_epoch());
            print!("{text}");
            Ok(())
        }
    }
}

enum Sink<W: Write> {
    Csv(Box<csv::Writer<W>>),
    Json(W),
}

fn csv_io(e: csv::Error) -> std::io::Error {
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => std::io::Error::other(format!("{other:?}")),
    }
}

impl<W: Write> Sink<W> {
    fn write(&mut self, row: &ReplayRow<'_>) -> std::io::Result<()> {
        match self {
            Sink::Csv(w) => w.write_record(row.csv_fields()).map_err(csv_io),
            Sink::Json(w) => {
                serde_json::to_writer(&mut *w, row).map_err(std::io::Error::other)?;
                w.write_all(b"\n")
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Csv(w) => w.flush(),
            Sink::Json(w) => w.flush(),
        }
    }
}
