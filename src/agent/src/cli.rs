//! `resex-agent`: the guest agent running its guest's workload (BenchEx's server) in-process, as
//! each guest of the embedded host does. Also reachable as `resex agent`.

use crate::mailbox::{Mailbox, DEFAULT_BLOCKS, DEFAULT_BLOCK_SIZE};
use crate::session::{DocFn, UnixChannel};
use crate::Agent;
use anyhow::{Context, Result};
use benchex::cli::{serve, stop_on_signals, ServerOpts};
use clap::Parser;
use resex_proto::{Registration, REGISTRATION_VERSION};
use resex_shim::guest::GuestMachine;
use resex_shim::{LatencyRecorder, Provider};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Guest-physical address of the mailbox (below the shim's heap at 1 MiB).
pub const MAILBOX_GPA: u64 = 0x10000;

/// The resex guest agent, serving BenchEx orders and reporting their latency to the host.
#[derive(Debug, Parser)]
#[command(name = "resex-agent", version, about)]
pub struct Cli {
    /// Guest RAM file (file offset = guest-physical address).
    #[arg(long)]
    ram: PathBuf,
    /// The software HCA's control socket.
    #[arg(long)]
    hca: PathBuf,
    /// The agent's control channel (a Unix socket the agent listens on; the host connects).
    #[arg(long)]
    channel: PathBuf,
    /// The VM name put in the registration (informational).
    #[arg(long)]
    name: Option<String>,
    /// Milliseconds covered by each latency report.
    #[arg(long, default_value_t = 10)]
    report_ms: u64,
    /// Mailbox blocks.
    #[arg(long, default_value_t = DEFAULT_BLOCKS)]
    mailbox_blocks: u32,
    /// Register the rings but write no latency reports (a guest with no SLA).
    #[arg(long)]
    no_reports: bool,
    /// BenchEx bootstrap address clients connect to.
    #[arg(long)]
    listen: String,
    #[command(flatten)]
    server: ServerOpts,
    /// Stop after this many seconds (default: until SIGTERM or SIGINT).
    #[arg(long)]
    duration: Option<f64>,
}

/// Runs the agent command line from `args` (the first is the program name).
pub fn main_with<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> Result<()> {
    let cli = Cli::parse_from(args);
    let machine = GuestMachine::new(&cli.ram, &cli.hca);
    let (mem, provider) = machine.open().context("opening the guest machine")?;
    let provider = Arc::new(provider);
    let mailbox = Mailbox::new(mem, MAILBOX_GPA, cli.mailbox_blocks, DEFAULT_BLOCK_SIZE)
        .context("placing the mailbox")?;
    let mbreg = mailbox.registration();
    let doc: DocFn = {
        let (p, name, mtu) = (provider.clone(), cli.name.clone(), cli.server.mtu);
        Arc::new(move || Registration {
            version: REGISTRATION_VERSION,
            vm: name.clone(),
            path_mtu: mtu,
            qps: p.registrations(),
            mailbox: Some(mbreg.clone()),
        })
    };
    let chan = UnixChannel::bind(&cli.channel)
        .with_context(|| format!("binding the channel {}", cli.channel.display()))?;
    let recorder = Arc::new(Mutex::new(LatencyRecorder::new()));
    let interval = (!cli.no_reports).then(|| Duration::from_millis(cli.report_ms.max(1)));
    let agent = Agent::start(Box::new(chan), doc, mailbox, recorder.clone(), interval)?;
    let stop = stop_on_signals()?;
    let p: Arc<dyn Provider> = provider;
    let st = serve(p, &cli.server, &cli.listen, recorder, stop, cli.duration)?;
    tracing::info!(
        "served {} orders from {} clients; {} reports written, {} dropped",
        st.requests,
        st.clients,
        agent.reports.load(std::sync::atomic::Ordering::Acquire),
        agent.dropped.load(std::sync::atomic::Ordering::Acquire)
    );
    let _ = std::fs::remove_file(&cli.channel);
    Ok(())
}
