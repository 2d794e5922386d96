//! The guest side of BenchEx's command line: the machine a role runs on, the server's and the
//! clients' options, and running the server (`benchex server`, and `resex-agent` in a guest).
//! The command line itself (with its in-process `local` mode on a software HCA, a host-side
//! tool) lives in `tools/benchex`.

use crate::boot::Listener;
use crate::client::{check_periodic, ClientConfig};
use crate::server::{self, ServerConfig};
use crate::size::parse_size;
use crate::BenchError;
use anyhow::{Context, Result};
use clap::Args;
use resex_common::{LatencyRecorder, LatencySummary};
use resex_shim::guest::GuestMachine;
use resex_shim::transport::{Kind, Polling};
use resex_shim::Provider;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// the paper's BenchEx do), adaptive (sleep after 200 us: many guests on few CPUs) or batch
    /// (sleep after 20 us, up to 1 ms: bulk jobs whose transfers take milliseconds).
    #[arg(long, default_value = "spin")]
    pub polling: Polling,
    /// The transport of its connections: status_byte (the paper's), sliding_window (with
    /// ACKs, read by the sender itself), cpwr (WRITE with immediate, feedback per message) or
    /// hipower (bitmaps, batched reuse). Clients follow the server's choice.
    #[arg(long, default_value = "status_byte")]
    pub transport: Kind,
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
            transport: self.transport,
            ..ServerConfig::default()
        }
    }
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
    /// How a client waits for a free order block: spin, adaptive or batch (see the server's
    /// option).
    #[arg(long, default_value = "spin")]
    pub polling: Polling,
    /// Pause after each iteration, ms: a periodic job (closed loop only).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub think_ms: f64,
    /// Orders per iteration of a periodic job (at most --window outstanding).
    #[arg(long, default_value_t = 1)]
    pub burst: u64,
    /// Wait after connecting until this Unix time, ms, before the first order: the workers of
    /// a job that start together (a time past: at once; at most 10 minutes).
    #[arg(long)]
    pub start_unix_ms: Option<u64>,
}

impl ClientOpts {
    /// As a client configuration; refuses a periodic job that cannot work
    /// ([`check_periodic`]).
    pub fn config(&self) -> Result<ClientConfig, BenchError> {
        check_periodic(self.think_ms, self.burst, self.rate)?;
        Ok(ClientConfig {
            rate: self.rate,
            window: self.window,
            count: self.count,
            duration: (self.duration > 0.0).then(|| Duration::from_secs_f64(self.duration)),
            blocks: 3,
            polling: self.polling,
            // Checked: a number in [0, 60000].
            think: Duration::from_secs_f64(self.think_ms / 1e3),
            burst: self.burst,
            start_unix_ms: self.start_unix_ms,
        })
    }
}

/// A flag set by SIGTERM and SIGINT.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("installing a signal handler")?;
    }
    Ok(stop)
}

/// Nanoseconds as microseconds.
pub fn us(ns: f64) -> f64 {
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
