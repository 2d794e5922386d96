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
    /// The cap in percent of one physical CPU, or `none` to unpin (the original setting comes
    /// back and the policy decides again).
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
