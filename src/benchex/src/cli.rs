//! The `benchex` command line (`resex benchex`, and the `benchex` binary in `tools/benchex`).

use crate::client;
use crate::local::LocalRunner;
use crate::opts::{describe, serve, stop_on_signals, us, ClientOpts, MachineArgs, ServerOpts};
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use resex_common::LatencyRecorder;
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
    /// Orders per second per client (0: closed loop).
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Outstanding orders per client in closed loop.
    #[arg(long, default_value_t = 2)]
    window: u64,
    /// Clients (one connection each).
    #[arg(long, default_value_t = 1)]
    clients: u32,
    /// Orders per client (0: until the duration ends).
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Seconds to run (0: until the count is reached).
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Link preset: testbed (8 Gb/s, the ResEx testbed) or 100g.
    #[arg(long, default_value = "testbed")]
    link: String,
    /// Print results as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the `benchex` command line from `args` (the first is the program name); `local` runs
/// `benchex local` (a host-side runner; without one the subcommand says it is unavailable).
pub fn main_with<I: IntoIterator<Item = std::ffi::OsString>>(
    args: I,
    local: Option<&LocalRunner>,
) -> Result<()> {
    match Cli::parse_from(args).cmd {
        Cmd::Server(a) => server(&a),
        Cmd::Client(a) => clients(&a),
        Cmd::Local(a) => local_run(&a, local),
    }
}

/// The client configuration a `benchex client` command line gives, checked: `args` are the
/// subcommand's (after `client`, with `--ram`, `--hca` and `--connect`). A host that starts
/// clients can test the arguments it passes with it.
pub fn client_config<I, T>(args: I) -> Result<crate::client::ClientConfig>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let head = ["benchex", "client"].map(std::ffi::OsString::from);
    let all = head.into_iter().chain(args.into_iter().map(Into::into));
    match Cli::try_parse_from(all)?.cmd {
        Cmd::Client(a) => Ok(a.opts.config()?),
        _ => anyhow::bail!("not a `benchex client` command line"),
    }
}

/// `benchex server`: serves until stopped; prints its figures.
fn server(a: &ServerArgs) -> Result<()> {
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
    Ok(())
}

/// `benchex client`: the clients, each on its thread; prints each one's figures.
fn clients(a: &ClientArgs) -> Result<()> {
    let cfg = a.opts.config()?;
    let p = a.machine.provider()?;
    let stop = stop_on_signals()?;
    let mut hs = Vec::new();
    for _ in 0..a.opts.clients.max(1) {
        let (p, addr, stop) = (p.clone(), a.connect.clone(), stop.clone());
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
            println!("{}", client_line(i, &r));
        }
    }
    Ok(())
}

/// A client's figures, for people.
fn client_line(i: usize, r: &crate::client::ClientResult) -> String {
    format!(
        "client {i}: {} sent, {} replies, {:.1} MB/s; round trip {}",
        r.sent,
        r.received,
        r.reply_bytes as f64 / r.seconds.max(1e-9) / 1e6,
        describe(&r.rtt)
    )
}

/// `benchex local`: server and clients in one process, through `local`.
fn local_run(a: &LocalArgs, local: Option<&LocalRunner>) -> Result<()> {
    let Some(run) = local else {
        anyhow::bail!("`benchex local` needs the host side: run it as `resex benchex local`");
    };
    let r = run(
        &a.link,
        a.server.config(),
        ClientOpts {
            rate: a.rate,
            window: a.window,
            clients: a.clients,
            count: a.count,
            duration: a.duration,
            // One process: the clients wait as the server does (--polling).
            polling: a.server.polling,
            think_ms: 0.0,
            burst: 1,
            start_unix_ms: None,
        }
        .config()?,
        a.clients,
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        let n = r.server.requests.max(1) as f64;
        println!(
            "server ({}): {} orders, latency {}",
            r.transport,
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
            println!("{}", client_line(i, c));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MACHINE: [&str; 6] = ["--ram", "r", "--hca", "h", "--connect", "s.sock"];

    fn config(extra: &[&str]) -> Result<crate::client::ClientConfig> {
        client_config(MACHINE.iter().chain(extra))
    }

    #[test]
    fn client_takes_a_periodic_job_and_a_start_time() {
        let plain = config(&[]).unwrap();
        assert_eq!(
            (plain.think, plain.burst, plain.start_unix_ms),
            (Duration::ZERO, 1, None)
        );
        let job = config(&[
            "--rate",
            "0",
            "--think-ms",
            "20",
            "--burst",
            "4",
            "--start-unix-ms",
            "1700000000000",
        ])
        .unwrap();
        assert_eq!(job.think, Duration::from_millis(20));
        assert_eq!((job.burst, job.start_unix_ms), (4, Some(1_700_000_000_000)));
    }

    #[test]
    fn client_refuses_periodic_settings_that_cannot_work_in_one_line() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--rate", "0", "--think-ms", "-1"],
                "--think-ms -1 must be",
            ),
            (
                &["--rate", "0", "--think-ms", "NaN"],
                "--think-ms NaN must be",
            ),
            (
                &["--rate", "0", "--think-ms", "60001"],
                "--think-ms 60001 must be",
            ),
            (
                &["--rate", "0", "--think-ms", "5", "--burst", "0"],
                "--burst 0 must be",
            ),
            (
                &["--rate", "0", "--think-ms", "5", "--burst", "4097"],
                "--burst 4097 must",
            ),
            (&["--think-ms", "5"], "--rate must be 0, not 1000"),
            (
                &["--rate", "0", "--burst", "2"],
                "--burst 2 needs --think-ms > 0",
            ),
        ];
        for (args, want) in cases {
            let e = config(args).unwrap_err();
            assert!(
                matches!(
                    e.downcast_ref::<crate::BenchError>(),
                    Some(crate::BenchError::Periodic(_))
                ),
                "{args:?}: {e:?}"
            );
            let msg = format!("{e:#}");
            assert!(msg.contains(want) && !msg.contains('\n'), "{args:?}: {msg}");
        }
    }
}
