//! `resex`: the command-line tool of resex.
//!
//! Today: `resex ibmon scan|watch|synth` (IBMon as a standalone tool) and `resex price
//! replay|check` (pricing policies). The dashboard, the demo and the lab join them in later issues.

mod ibmon;
mod price;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// resex: see and price the RDMA I/O of virtual machines that bypass the hypervisor.
#[derive(Parser, Debug)]
#[command(name = "resex", version, about, long_about = None)]
struct Cli {
    /// Log filter (also RUST_LOG), e.g. `warn`, `resex_ibmon=debug`.
    #[arg(long, global = true, default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// IBMon: count a guest's RDMA work by reading its mlx5 queues out of its RAM file.
    #[command(subcommand)]
    Ibmon(ibmon::IbmonCommand),
    /// Pricing: check policy files; replay a usage trace through a policy.
    #[command(subcommand)]
    Price(price::PriceCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Ibmon(c) => ibmon::run(c),
        Command::Price(c) => price::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resex: {e:#}");
            ExitCode::FAILURE
        }
    }
}
