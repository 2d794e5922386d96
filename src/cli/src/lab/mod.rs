//! `resex lab ...`: the lab's subcommands, one module each; this file only names them and
//! dispatches (no module here uses it back).

use anyhow::Result;
use clap::Subcommand;

mod compare;
mod drum;
mod drum_plot;
mod emit;
mod fabric;
mod fabric_fleet;
mod mlcompat;
mod mlcompat_paper;
mod mlcompat_place;
mod mlcompat_plot;
mod owed;
mod paper;
mod plot;
mod run;
mod tradeoff;
mod transport;
mod transport_plot;

pub use compare::CompareArgs;
pub use paper::PaperArgs;
pub use run::RunArgs;

/// `resex lab ...`
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Run a scenario in virtual time and print per-VM latency, throughput, CPU and caps.
    Run(RunArgs),
    /// Run the ResEx paper's experiments (Figs. 1, 3-9) and print one row per point.
    Paper(PaperArgs),
    /// Compare policies on the same scenarios: victim latency, work kept, convergence,
    /// oscillation.
    Compare(CompareArgs),
    /// What every guest is owed on small random hosts (2-6 guests, random sizes and loads,
    /// the agent on, off or lying): each host's slowest guest within its entitlement against
    /// no policy and least served guest that demands it, and how many hosts miss the goals.
    Owed(owed::OwedArgs),
    /// The DRUM paper's simulations: ADMM vs dual decomposition against the certified optimum.
    Drum(drum::DrumArgs),
    /// The shim's transports in virtual time on a NIC model: status-byte vs sliding window
    /// (Figs. 10, 12-15, 18) and HiPower vs CPWR (one-to-one, broadcast, gather).
    Transport(transport::TransportArgs),
    /// Congestion compatibility of periodic (ML training) jobs: without a subcommand the
    /// paper's experiment on the fabric (fair, unfair, adaptive, priority); `detect` finds
    /// each VM's period, duty cycle and demand from the monitor's exact counts alone; `place`
    /// proposes which jobs share which link.
    Mlcompat(mlcompat::MlcompatArgs),
    /// Run a fabric scenario (several hosts, links, DCQCN, periodic jobs) in virtual time.
    Fabric(fabric::FabricArgs),
}

/// Runs one lab subcommand.
pub fn run(c: LabCommand) -> Result<()> {
    match c {
        LabCommand::Run(a) => run::run_one(&a),
        LabCommand::Paper(a) => paper::paper(&a),
        LabCommand::Compare(a) => compare::compare(&a),
        LabCommand::Owed(a) => owed::run(&a),
        LabCommand::Drum(a) => drum::drum(&a),
        LabCommand::Transport(a) => transport::transport(&a),
        LabCommand::Mlcompat(a) => mlcompat::run(&a),
        LabCommand::Fabric(a) => fabric::run(&a),
    }
}
