//! The `benchex` command line (also reachable as `resex benchex`).

use crate::local;
use anyhow::{Context, Result};
use benchex::client;
use benchex::opts::{describe, serve, stop_on_signals, us, ClientOpts, MachineArgs, ServerOpts};
use clap::{Args, Parser, Subcommand};
use resex_common::LatencyRecorder;
use resex_softhca::LinkConfig;
use std::sync::{Arc, Mutex};

/// BenchEx: an RDMA trading-exchange latency benchmark (the ResEx paper's, section IV).
#[derive(Debug, Parser)]
#[command(name = "benchex", version, about)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the exchange server in a guest (RAM file + softhca socket).
    Server(ServerArgs),
    /// Run trading clients in a guest against a server.
    Client(ClientArgs),
    /// Server and clients in one process on an in-process software HCA; prints figures.
    Local(LocalArgs),
}

#[derive(Debug, Args)]
struct ServerArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Bootstrap address clients connect to (a Unix socket path, or tcp:HOST:PORT).
    #[arg(long)]
    listen: String,
    #[command(flatten)]
    opts: ServerOpts,
    /// Stop after this many seconds (default: until SIGTERM or SIGINT).
    #[arg(long)]
    duration: Option<f64>,
    /// Print the final counters as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ClientArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// The server's bootstrap address.
    #[arg(long)]
    connect: String,
    #[command(flatten)]
    opts: ClientOpts,
    /// Print results as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct LocalArgs {
    #[command(flatten)]
    server: ServerOpts,
    #[command(flatten)]
    client: ClientOpts,
    /// Link preset: testbed (8 Gb/s, the ResEx testbed) or 100g.
    #[arg(long, default_value = "testbed")]
    link: String,
    /// Print results as JSON.
    #[arg(long)]
    json: bool,
}

/// Parses a link preset name.
pub fn link_preset(name: &str) -> Result<LinkConfig> {
    LinkConfig::preset(name)
        .ok_or_else(|| anyhow::anyhow!("unknown link preset `{name}` (use testbed or 100g)"))
}

/// Runs the `benchex` command line from `args` (the first is the program name).
pub fn main_with<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> Result<()> {
    let cli = Cli::parse_from(args);
    match cli.cmd {
        Cmd::Server(a) => {
            let p = a.machine.provider()?;
            let stop = stop_on_signals()?;
            let rec = Arc::new(Mutex::new(LatencyRecorder::new()));
            let st = serve(p, &a.opts, &a.listen, rec.clone(), stop, a.duration)?;
            let lat = rec
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take_interval();
            if a.json {
                println!("{}", serde_json::to_string(&st)?);
            } else {
                println!(
                    "server: {} orders from {} clients; latency {}",
                    st.requests,
                    st.clients,
                    describe(&lat)
                );
            }
        }
        Cmd::Client(a) => {
            let p = a.machine.provider()?;
            let stop = stop_on_signals()?;
            let mut hs = Vec::new();
            for _ in 0..a.opts.clients.max(1) {
                let (p, cfg, addr, stop) =
                    (p.clone(), a.opts.config(), a.connect.clone(), stop.clone());
                hs.push(std::thread::spawn(move || client::run(p, cfg, &addr, stop)));
            }
            for (i, h) in hs.into_iter().enumerate() {
                let r = h
                    .join()
                    .map_err(|_| anyhow::anyhow!("client {i} panicked"))?
                    .with_context(|| format!("client {i}"))?;
                if a.json {
                    println!("{}", serde_json::to_string(&r)?);
                } else {
                    println!(
                        "client {i}: {} sent, {} replies, {:.1} MB/s; round trip {}",
                        r.sent,
                        r.received,
                        r.reply_bytes as f64 / r.seconds.max(1e-9) / 1e6,
                        describe(&r.rtt)
                    );
                }
            }
        }
        Cmd::Local(a) => {
            let link = link_preset(&a.link)?;
            let r = local::run(link, a.server.config(), a.client.config(), a.client.clients)?;
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                let n = r.server.requests.max(1) as f64;
                println!(
                    "server: {} orders, latency {}",
                    r.server.requests,
                    describe(&r.server_latency)
                );
                println!(
                    "server time per order: queue {:.1}us, compute {:.1}us, I/O wait {:.1}us, polling {:.1}us",
                    us(r.server.queue_ns as f64 / n),
                    us(r.server.compute_ns as f64 / n),
                    us(r.server.wait_ns as f64 / n),
                    us(r.server.poll_ns as f64 / n)
                );
                for (i, c) in r.clients.iter().enumerate() {
                    println!(
                        "client {i}: {} sent, {} replies, {:.1} MB/s; round trip {}",
                        c.sent,
                        c.received,
                        c.reply_bytes as f64 / c.seconds.max(1e-9) / 1e6,
                        describe(&c.rtt)
                    );
                }
            }
        }
    }
    Ok(())
}
