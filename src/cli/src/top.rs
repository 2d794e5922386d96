//! `resex top` (the dashboard, or `--batch` output for scripts) and `resex status`.

use anyhow::{bail, Context, Result};
use clap::Args;
use resex_api::ApiClient;
use resex_top::batch::{self, Format};
use resex_top::term::{self, TopOptions};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// The daemon's socket unless told otherwise: the one its default configuration uses.
fn default_socket() -> PathBuf {
    resex_daemon::config::Config::default().api_socket()
}

/// Options of `resex top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// The daemon's API socket (default: the daemon's default, RUN_DIR/resexd.sock).
    #[arg(long, value_name = "SOCKET")]
    pub api: Option<PathBuf>,
    /// Milliseconds between snapshots.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub interval: u64,
    /// Minutes of history the detail pane's charts show.
    #[arg(long, default_value_t = 5.0)]
    pub history_min: f64,
    /// No screen: stream snapshots to stdout (as `xentop -b`); with --json or --csv.
    #[arg(long)]
    pub batch: bool,
    /// With --batch: one JSON snapshot per line.
    #[arg(long, requires = "batch", conflicts_with = "csv")]
    pub json: bool,
    /// With --batch: one CSV row per VM per snapshot, header first.
    #[arg(long, requires = "batch")]
    pub csv: bool,
    /// With --batch: stop after N snapshots (0: until interrupted).
    #[arg(long, default_value_t = 0, requires = "batch")]
    pub count: u64,
    /// The fleet instead of one host: one row per live host from etcd, Enter drills into a
    /// host's VMs (needs a build with `--features fleet`).
    #[arg(long, conflicts_with_all = ["api", "batch"])]
    pub fleet: bool,
    /// With --fleet: etcd's client URLs (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379",
        requires = "fleet"
    )]
    pub endpoints: Vec<String>,
    /// With --fleet: the fleet's key prefix.
    #[arg(long, default_value = resex_fleet::keys::DEFAULT_PREFIX, requires = "fleet")]
    pub prefix: String,
    /// With --fleet, TLS: the CA of etcd's certificate (PEM; endpoints are then https://).
    #[arg(long, value_name = "PEM", requires = "fleet")]
    pub ca_file: Option<PathBuf>,
    /// With --fleet, TLS: a client certificate (PEM), with --key-file.
    #[arg(long, value_name = "PEM", requires = "key_file")]
    pub cert_file: Option<PathBuf>,
    /// With --fleet, TLS: the client certificate's key (PEM).
    #[arg(long, value_name = "PEM", requires = "cert_file")]
    pub key_file: Option<PathBuf>,
}

/// `resex top --fleet`.
#[cfg(feature = "fleet")]
fn top_fleet(a: &TopArgs) -> Result<()> {
    use resex_fleet::etcd::Fleet;
    use resex_top::fleet::FleetFrame;
    let cfg = resex_fleet::FleetConfig {
        prefix: a.prefix.clone(),
        ca_file: a.ca_file.clone(),
        cert_file: a.cert_file.clone(),
        key_file: a.key_file.clone(),
        ..resex_fleet::FleetConfig::new(a.endpoints.clone())
    };
    // Fail at once, in one line, when etcd is not there at all.
    let mut conn = Some(Fleet::connect(&cfg)?);
    let fetch = move || -> Result<FleetFrame, resex_fleet::FleetError> {
        let f = match &mut conn {
            Some(f) => f,
            None => conn.insert(Fleet::connect(&cfg)?),
        };
        let r = (|| {
            let status = f.status()?;
            let summaries = f.summaries()?;
            let (allocations, round) = f.allocations()?;
            Ok::<_, resex_fleet::FleetError>(FleetFrame {
                status,
                summaries,
                allocations,
                round,
            })
        })();
        r.inspect_err(|_| conn = None)
    };
    resex_top::fleet::run(
        a.endpoints.join(","),
        Duration::from_millis(a.interval.max(500)),
        fetch,
    )?;
    Ok(())
}

#[cfg(not(feature = "fleet"))]
fn top_fleet(_: &TopArgs) -> Result<()> {
    bail!("{}", resex_fleet::connect_error())
}

/// Options of `resex status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The daemon's API socket (default: the daemon's default, RUN_DIR/resexd.sock).
    #[arg(long, value_name = "SOCKET")]
    pub api: Option<PathBuf>,
    /// Print the snapshot as JSON (the API's format).
    #[arg(long)]
    pub json: bool,
}

pub fn status(a: StatusArgs) -> Result<()> {
    let path = a.api.unwrap_or_else(default_socket);
    let s = ApiClient::connect(&path)?.status()?;
    let mut out = std::io::stdout().lock();
    batch::write(
        &mut out,
        &s,
        if a.json { Format::Json } else { Format::Text },
    )?;
    Ok(())
}

pub fn run(a: TopArgs) -> Result<()> {
    if a.fleet {
        return top_fleet(&a);
    }
    let socket = a.api.clone().unwrap_or_else(default_socket);
    let interval = Duration::from_millis(a.interval);
    if !a.batch {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let points = ((a.history_min.max(0.1) * 60_000.0) / a.interval as f64).ceil() as usize;
        term::run(&TopOptions {
            socket,
            interval,
            points,
            until: None,
        })?;
        return Ok(());
    }
    let format = if a.json {
        Format::Json
    } else if a.csv {
        Format::Csv
    } else {
        Format::Text
    };
    let mut c = ApiClient::connect(&socket)?;
    c.subscribe(interval)?;
    let mut out = std::io::stdout().lock();
    if format == Format::Csv {
        writeln!(out, "{}", batch::csv_header())?;
    }
    let mut n = 0u64;
    loop {
        let s = c
            .next_snapshot()
            .context("reading the daemon's snapshots")?;
        if let Err(e) = batch::write(&mut out, &s, format).and_then(|()| out.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(()); // `| head` is done with us
            }
            bail!("writing: {e}");
        }
        n += 1;
        if a.count > 0 && n >= a.count {
            return Ok(());
        }
    }
}

/// Options of `resex cap`.
#[derive(Debug, Args)]
pub struct CapArgs {
    /// The VM (its name, as `resex status` shows it).
    pub vm: String,
    /// The cap in percent of one physical CPU, or `none` to unpin (the policy decides again;
    /// the original setting comes back when it holds no cap).
    pub pct: String,
    /// The daemon's API socket (default: the daemon's default, RUN_DIR/resexd.sock).
    #[arg(long, value_name = "SOCKET")]
    pub api: Option<PathBuf>,
}

/// `resex cap VM PCT|none`: the admin's own cap, kept whatever the policy decides.
pub fn cap(a: CapArgs) -> Result<()> {
    let pct = match a.pct.as_str() {
        "none" | "off" => None,
        p => Some(
            p.trim_end_matches('%')
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(|| {
                    anyhow::anyhow!("`{p}` is not a cap: a percent of one CPU (e.g. 30) or `none`")
                })?,
        ),
    };
    let path = a.api.unwrap_or_else(default_socket);
    let msg = ApiClient::connect(&path)?.pin(&a.vm, pct)?;
    println!("{}: {msg}", a.vm);
    Ok(())
}

/// Options of `resex rate`.
#[derive(Debug, Args)]
pub struct RateArgs {
    /// The VM (its name, as `resex status` shows it).
    pub vm: String,
    /// `none` unpins (the policy decides again; the original setting comes back when it holds
    /// no limit).
    pub none: Option<String>,
    /// Guaranteed share of the port (e.g. 500Mbit, 2Gbit; tc units, decimal).
    #[arg(long, value_parser = parse_rate)]
    pub share: Option<u64>,
    /// Ceiling (e.g. 2Gbit).
    #[arg(long, value_parser = parse_rate)]
    pub max: Option<u64>,
    /// The daemon's API socket (default: the daemon's default, RUN_DIR/resexd.sock).
    #[arg(long, value_name = "SOCKET")]
    pub api: Option<PathBuf>,
}

fn parse_rate(s: &str) -> Result<u64, resex_common::BitsError> {
    resex_common::parse_bits(s)
}

/// `resex rate VM --share R --max R | none`: the admin's own transmit limit in the VM's port
/// scheduler (the rate lever), kept whatever the policy decides.
pub fn rate(a: RateArgs) -> Result<()> {
    let tx = match (a.none.as_deref(), a.share, a.max) {
        (Some("none" | "off"), None, None) => None,
        (Some(w), _, _) => bail!("`{w}`: use --share and --max, or `none` alone"),
        (None, None, None) => bail!("give --share, --max or both, or `none` to unpin"),
        (None, share_bps, max_bps) => Some(resex_common::TxLimit {
            share_bps,
            max_bps,
            weight: None,
        }),
    };
    let path = a.api.unwrap_or_else(default_socket);
    let msg = ApiClient::connect(&path)?.rate(&a.vm, tx)?;
    println!("{}: {msg}", a.vm);
    Ok(())
}
