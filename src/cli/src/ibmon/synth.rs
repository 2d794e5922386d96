//! `resex ibmon synth`: a synthetic guest in a RAM file, for trying IBMon without a VM.

use super::output::{QpCounts, Report};
use anyhow::Context;
use clap::Args;
use resex_guestmem::FileMemory;
use resex_ibmon::synth::{SynthConfig, SynthGuest, Wr};
use resex_mlx5::consts::send_op;
use resex_mlx5::CqeSize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `resex ibmon synth`.
#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Directory to write guest.ram, rings.json and truth.json into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Guest RAM size in KiB.
    #[arg(long, default_value_t = 256)]
    ram_kib: u64,
    /// Queue pairs.
    #[arg(long, default_value_t = 2)]
    qps: usize,
    /// Work requests per QP (static mode: at most what fits the rings unpolled).
    #[arg(long, default_value_t = 40)]
    wrs: usize,
    /// Random seed (same seed, same bytes).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep posting, completing and polling work for this long (for `resex ibmon watch`).
    #[arg(long, value_parser = humantime::parse_duration)]
    live: Option<Duration>,
    /// Live mode: work requests per second per QP.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
}

fn random_wr(r: &mut fastrand::Rng, signaled: bool) -> Wr {
    let opcode = [
        send_op::SEND,
        send_op::RDMA_WRITE,
        send_op::RDMA_WRITE,
        send_op::RDMA_READ,
        send_op::SEND_IMM,
    ][r.usize(0..5)];
    let inline = opcode != send_op::RDMA_READ && r.u8(0..4) == 0;
    let n = r.usize(1..4);
    let sges = (0..n)
        .map(|_| {
            if inline {
                r.u32(1..64)
            } else {
                r.u32(1..=65_536)
            }
        })
        .collect();
    Wr {
        opcode,
        sges,
        inline,
        signaled,
    }
}

pub fn run(a: &SynthArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let ram = a.out.join("guest.ram");
    let mem = FileMemory::create(&ram, a.ram_kib * 1024)?;
    let live = a.live.is_some();
    let cfg = SynthConfig {
        qps: a.qps,
        wqe_cnt: if live { 4096 } else { 256 },
        cqe_cnt: if live { 4096 } else { 256 },
        cqe_size: CqeSize::B64,
        path_mtu: 1024,
        shared_cq: false,
        seed: a.seed,
        ..SynthConfig::default()
    };
    let mut guest =
        SynthGuest::new(&mem, &cfg).map_err(|e| anyhow::anyhow!("{e}; raise --ram-kib"))?;
    let rings = a.out.join("rings.json");
    std::fs::write(&rings, serde_json::to_string_pretty(guest.registration())?)
        .with_context(|| format!("cannot write {}", rings.display()))?;
    let mut r = fastrand::Rng::with_seed(a.seed);
    match a.live {
        None => {
            for qp in 0..guest.qp_count() {
                for i in 0..a.wrs {
                    // Selective signalling: every fourth, and the last.
                    let wr = random_wr(&mut r, i % 4 == 3 || i + 1 == a.wrs);
                    if !guest.post(&mem, qp, &wr) {
                        break;
                    }
                }
                guest.complete(&mem, qp, usize::MAX, false);
                guest.receive(&mem, qp, r.u32(1..100_000));
            }
            guest.ring_doorbells(&mem);
        }
        Some(d) => live_loop(&mem, &mut guest, &mut r, d, a.rate),
    }
    let truth = truth_report(&guest);
    let truth_path = a.out.join("truth.json");
    std::fs::write(&truth_path, truth.json() + "\n")
        .with_context(|| format!("cannot write {}", truth_path.display()))?;
    print_summary(&ram, &rings, &truth_path, &truth);
    Ok(())
}

fn truth_report(guest: &SynthGuest) -> Report {
    let qps = guest
        .registration()
        .qps
        .iter()
        .zip(guest.truth())
        .map(|(q, t)| QpCounts::mlx5(q.qpn, *t))
        .collect();
    Report::new(qps)
}

/// Posts `rate` work requests per second per QP in 1 ms steps; the guest polls everything at
/// once, like a busy application.
fn live_loop(
    mem: &FileMemory,
    guest: &mut SynthGuest,
    r: &mut fastrand::Rng,
    d: Duration,
    rate: u64,
) {
    let start = Instant::now();
    let step = Duration::from_millis(1);
    // Work due, in thousandths of a request (integer arithmetic: no float casts).
    let mut due_milli = 0u64;
    let mut next = start;
    eprintln!("live: posting {rate} work requests/s per QP for {d:?}");
    while start.elapsed() < d {
        due_milli += rate;
        let n = due_milli / 1000;
        due_milli %= 1000;
        for qp in 0..guest.qp_count() {
            for i in 0..n {
                let wr = random_wr(r, i % 4 == 3);
                guest.post(mem, qp, &wr);
            }
            guest.complete(mem, qp, usize::MAX, false);
        }
        guest.ring_doorbells(mem);
        for cq in 0..guest.cq_count() {
            guest.poll(mem, cq, usize::MAX, None);
        }
        next += step;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
    }
}

fn print_summary(ram: &Path, rings: &Path, truth: &Path, report: &Report) {
    eprintln!(
        "wrote {} ({} bytes of guest RAM)",
        ram.display(),
        std::fs::metadata(ram).map(|m| m.len()).unwrap_or(0)
    );
    eprintln!("wrote {} (the registration document)", rings.display());
    eprintln!(
        "wrote {} (what the guest's HCA completed: a scan must report exactly this)",
        truth.display()
    );
    eprint!("{}", report.table());
}
