//! The `benchex` command line (also reachable as `resex benchex`).

use crate::boot::Listener;
use crate::client::{self, ClientConfig};
use crate::local;
use crate::server::{self, ServerConfig};
use crate::size::parse_size;
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use resex_common::{LatencyRecorder, LatencySummary};
use resex_shim::guest::GuestMachine;
use resex_shim::transport::Polling;
use resex_shim::Provider;
use resex_softhca::LinkConfig;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// The guest machine a role runs on.
#[derive(Debug, Args, Clone)]
pub struct MachineArgs {
    /// Guest RAM file (file offset = guest-physical address).
    #[arg(long)]
    pub ram: PathBuf,
    /// The software HCA's control socket.
    #[arg(long)]
    pub hca: PathBuf,
    /// First byte of RAM the shim may allocate from.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub heap_start: u64,
}

impl MachineArgs {
    /// Opens the machine as a provider.
    pub fn provider(&self) -> Result<Arc<dyn Provider>> {
        let mut m = GuestMachine::new(&self.ram, &self.hca);
        m.heap_start = self.heap_start;
        let (_mem, p) = m.open().context("opening the guest machine")?;
        Ok(Arc::new(p))
    }
}

/// Server parameters.
#[derive(Debug, Args, Clone)]
pub struct ServerOpts {
    /// Reply size (the paper's buffer size).
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    pub buffer: u64,
    /// Options priced per order (compute per request).
    #[arg(long, default_value_t = 20)]
    pub compute: u32,
    /// Status-byte blocks per connection.
    #[arg(long, default_value_t = 3)]
    pub blocks: u32,
    /// Path MTU, bytes.
    #[arg(long, default_value_t = 1024)]
    pub mtu: u32,
    /// How the server waits for its replies to complete: spin (busy-poll, as RDMA servers and
    /// the paper's BenchEx do) or adaptive (sleep after 200 us: many guests on few CPUs).
    #[arg(long, default_value = "spin")]
    pub polling: Polling,
}

impl ServerOpts {
    /// As a server configuration.
    pub fn config(&self) -> ServerConfig {
        ServerConfig {
            buffer: self.buffer,
            compute: self.compute,
            blocks: self.blocks,
            path_mtu: self.mtu,
            polling: self.polling,
            ..ServerConfig::default()
        }
    }
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

/// Client parameters.
#[derive(Debug, Args, Clone)]
pub struct ClientOpts {
    /// Orders per second per client (0: closed loop).
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Outstanding orders per client in closed loop.
    #[arg(long, default_value_t = 2)]
    pub window: u64,
    /// Clients (one connection each).
    #[arg(long, default_value_t = 1)]
    pub clients: u32,
    /// Orders per client (0: until the duration ends).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// Seconds to run (0: until the count is reached, or SIGTERM).
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// How a client waits for a free order block: spin or adaptive (see the server's option).
    #[arg(long, default_value = "spin")]
    pub polling: Polling,
}

impl ClientOpts {
    /// As a client configuration.
    pub fn config(&self) -> ClientConfig {
        ClientConfig {
            rate: self.rate,
            window: self.window,
            count: self.count,
            duration: (self.duration > 0.0).then(|| Duration::from_secs_f64(self.duration)),
            blocks: 3,
            polling: self.polling,
        }
    }
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

/// A flag set by SIGTERM and SIGINT.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("installing a signal handler")?;
    }
    Ok(stop)
}

fn us(ns: f64) -> f64 {
    ns / 1000.0
}

/// One line for a latency summary, in microseconds.
pub fn describe(s: &LatencySummary) -> String {
    format!(
        "n={} mean={:.1}us sd={:.1}us p50={:.1}us p99={:.1}us p99.9={:.1}us max={:.1}us",
        s.count,
        us(s.mean_ns),
        us(s.stddev_ns),
        us(s.p50_ns as f64),
        us(s.p99_ns as f64),
        us(s.p999_ns as f64),
        us(s.max_ns as f64)
    )
}

/// Runs the server role until `stop` (and an optional duration); used by `resex-agent` too.
pub fn serve(
    p: Arc<dyn Provider>,
    opts: &ServerOpts,
    listen: &str,
    recorder: Arc<Mutex<LatencyRecorder>>,
    stop: Arc<AtomicBool>,
    duration: Option<f64>,
) -> Result<server::ServerStats> {
    let listener = Listener::bind(listen).with_context(|| format!("listening on {listen}"))?;
    if let Some(d) = duration {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(d));
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
    }
    Ok(server::run(p, opts.config(), listener, recorder, stop)?)
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
