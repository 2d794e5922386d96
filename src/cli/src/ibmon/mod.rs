//! `resex ibmon`: scan, watch, synth.

mod load;
mod output;
mod scan;
mod synth;
mod watch;

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

/// The ibmon subcommands.
#[derive(Subcommand, Debug)]
pub enum IbmonCommand {
    /// Scan a guest RAM file once and print the work found by this scan, per QP and in total.
    Scan(ScanArgs),
    /// Scan every interval and print rates: IBMon as a standalone tool.
    Watch(WatchArgs),
    /// Write a synthetic guest (RAM file, rings.json, truth.json) with traffic in its rings;
    /// with --live, keep posting work into it.
    Synth(synth::SynthArgs),
}

/// Where the guest is.
#[derive(Args, Debug)]
pub struct Target {
    /// Guest RAM file (file offset = guest-physical address), e.g. a QEMU memory-backend-file.
    #[arg(long)]
    pub ram: PathBuf,
    /// Registration document describing the rings (JSON, see shared/design.md).
    #[arg(long)]
    pub rings: PathBuf,
    /// Most entries (CQEs + WQEs) walked per scan of the VM.
    #[arg(long, default_value_t = resex_ibmon::DEFAULT_SCAN_BUDGET)]
    pub budget: u32,
}

/// `resex ibmon scan`.
#[derive(Args, Debug)]
pub struct ScanArgs {
    #[command(flatten)]
    target: Target,
    /// Load cursors from this file if it exists, and save them after the scan, so that
    /// consecutive scans of a live guest count each work request once.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Print JSON: {"qps":[{"qpn":..,"wqes":..,...}],"total":{...}}.
    #[arg(long)]
    json: bool,
}

/// `resex ibmon watch`.
#[derive(Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    target: Target,
    /// Time between scans.
    #[arg(long, default_value = "1ms", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Time between printed reports.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    report: Duration,
    /// Stop after this many reports (default: run until interrupted).
    #[arg(long)]
    count: Option<u64>,
    /// Print one JSON object per report.
    #[arg(long)]
    json: bool,
    /// Count from the registration's start indices (default: from the guest's present
    /// position, so work completed before the watch began is not counted).
    #[arg(long)]
    from_start: bool,
}

/// Runs an ibmon subcommand.
pub fn run(cmd: IbmonCommand) -> anyhow::Result<()> {
    match cmd {
        IbmonCommand::Scan(a) => scan::run(&a),
        IbmonCommand::Watch(a) => watch::run(&a),
        IbmonCommand::Synth(a) => synth::run(&a),
    }
}
