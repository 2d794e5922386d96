//! `resex`: the command-line tool of resex.
//!
//! `resex demo` (the main job: embedded host, daemon, the paper's pair in four phases),
//! `resex host` (the embedded host), `resex top` (the dashboard) and `resex status`, `resex ibmon scan|watch|synth` (IBMon as a standalone tool),
//! `resex price replay|check` (pricing policies), and the guest programs the embedded host starts
//! (`resex agent`, `resex benchex`: the same as the `resex-agent` and `benchex` binaries).

mod demo;
mod fleet;
#[cfg(feature = "fleet")]
mod fleet_demo;
mod host;
mod ibmon;
mod kvm;
mod lab;
mod price;
mod top;
mod vm_hca;
mod xen;
mod xen_hca;

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
    /// The main job: an embedded host with the paper's pair, the daemon, four phases.
    Demo(demo::DemoArgs),
    /// Run a scenario's guests on the embedded host (processes + softhca + caps).
    Host(host::HostArgs),
    /// The lab: a whole host in virtual time (deterministic).
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// The fleet through etcd: live hosts, the coordinator, top senders; Prometheus targets
    /// (needs `--features fleet`).
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
    /// The dashboard: every VM's CPU, cap, Resos, RDMA traffic and latency, live (or --batch).
    Top(top::TopArgs),
    /// One snapshot of the daemon's view of every VM.
    Status(top::StatusArgs),
    /// Pin a VM's cap (percent of one CPU; `none` unpins): the admin's cap wins over the policy.
    Cap(top::CapArgs),
    /// Pin a VM's transmit share and ceiling in its port's scheduler (`none` unpins): the
    /// admin's limit wins over the policy.
    Rate(top::RateArgs),
    /// KVM through libvirt: prepare a domain for resex.
    #[command(subcommand)]
    Kvm(kvm::KvmCommand),
    /// Xen: read a domain's memory as resexd's xen backend does (needs `--features xen`).
    #[command(subcommand)]
    Xen(xen::XenCommand),
    /// The guest agent with BenchEx's server (what the embedded host starts; see resex-agent).
    #[command(disable_help_flag = true)]
    Agent {
        /// resex-agent's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// BenchEx (see benchex --help).
    #[command(disable_help_flag = true)]
    Benchex {
        /// benchex's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    let mut filter = Some(filter);
    if let Command::Demo(a) = &cli.command {
        // The real-time demo logs into a file (its end says how many warnings and where).
        if !a.lab {
            if let Err(e) = demo::log_to_file(a, &mut filter) {
                eprintln!("resex demo: logging to stderr: {e}");
            }
        }
    }
    if let Some(filter) = filter {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let result = match cli.command {
        Command::Ibmon(c) => ibmon::run(c),
        Command::Price(c) => price::run(c),
        Command::Demo(a) => demo::run(a),
        Command::Host(a) => host::run(a),
        Command::Lab(c) => lab::run(c),
        Command::Fleet(c) => fleet::run(c),
        Command::Top(a) => top::run(a),
        Command::Status(a) => top::status(a),
        Command::Cap(a) => top::cap(a),
        Command::Rate(a) => top::rate(a),
        Command::Kvm(c) => kvm::run(c),
        Command::Xen(c) => xen::run(c),
        Command::Agent { args } => {
            resex_agent::cli::main_with(std::iter::once("resex-agent".into()).chain(args))
        }
        Command::Benchex { args } => benchex::cli::main_with(
            std::iter::once("benchex".into()).chain(args),
            Some(&resex_embedded::benchex_local::run),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resex: {e:#}");
            ExitCode::FAILURE
        }
    }
}
