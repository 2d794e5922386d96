//! Seconds per ADMM iteration and peak memory, from the paper's smallest size to its largest
//! (n = 1e4 hosts, m = 5e3 applications: 5e7 variables; target <= 2 s per iteration on two cores
//! and <= 4 GiB).
//!
//! `cargo bench -p resex-drum --features lab --bench iteration [-- --quick] [-- --rho R] [-- --adaptive]`
//! (rho fixed at R, by default the paper's 1e-3; `--adaptive`: residual balancing from R, by
//! default from `experiment::ADAPTIVE_START`, as `resex lab drum` runs) prints one line per
//! size: the first iteration (cold: every z solved from its bound), the mean of the next five,
//! the CPU seconds of those (all threads: on an idle machine the wall time is about CPU / threads;
//! on a shared one the CPU figure is the steadier), and the peak resident memory of that size alone (the peak is
//! reset through `/proc/self/clear_refs` before each size; `VmHWM` read after). Each iteration
//! is all n hosts (Algorithm 1, rayon over groups of hosts) and the coordinator (Algorithm 2).

use resex_drum::experiment::ADAPTIVE_START;
use resex_drum::fleet::AdmmFleet;
use resex_drum::{Balancing, Model, PaperSetup, Params, Penalty, Stopping};
use std::time::Instant;

fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU seconds of the whole process (all threads): utime + stime of `/proc/self/stat`, in
/// USER_HZ = 100 ticks (fixed by the Linux ABI).
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of the line; 11 and 12 after the ") ".
    (tick(11) + tick(12)) / 100.0
}

fn reset_peak() {
    // "5" resets the peak resident set size (Linux >= 4.0); harmless where unsupported.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let penalty = if args.iter().any(|a| a == "--adaptive") {
        Penalty::Adaptive(Balancing::default())
    } else {
        Penalty::Fixed
    };
    let rho = args
        .iter()
        .position(|a| a == "--rho")
        .and_then(|i| args.get(i + 1))
        .map_or(
            if penalty == Penalty::Fixed {
                1e-3
            } else {
                ADAPTIVE_START
            },
            |r| r.parse().expect("--rho takes a number"),
        );
    let only: Option<(usize, usize)> = args
        .iter()
        .position(|a| a == "--size")
        .and_then(|i| args.get(i + 1))
        .map(|s| {
            let (n, m) = s.split_once(',').expect("--size takes HOSTS,APPS");
            (
                n.parse().expect("--size: hosts"),
                m.parse().expect("--size: apps"),
            )
        });
    let only = only.map(|s| [s]);
    let sizes: &[(usize, usize)] = if let Some(s) = &only {
        s
    } else if quick {
        &[(100, 50), (1000, 500), (100, 5000)]
    } else {
        &[
            (100, 50),
            (1000, 500),
            (10_000, 500),
            (1000, 5000),
            (10_000, 5000),
        ]
    };
    println!(
        "threads {}  rho {rho} ({})",
        rayon::current_num_threads(),
        if penalty == Penalty::Fixed {
            "fixed"
        } else {
            "adaptive from"
        }
    );
    println!(
        "{:>7} {:>6} {:>12} {:>9} {:>13} {:>17} {:>10}",
        "hosts", "apps", "variables", "first s", "s/iteration", "cpu s/iteration", "peak MiB"
    );
    for &(n, m) in sizes {
        reset_peak();
        let setup = PaperSetup {
            rho,
            ..PaperSetup::default()
        };
        let p = Params::from_paper(m, &setup).expect("paper parameters");
        let model = Model::paper(p, 1).expect("model");
        let mut fleet =
            AdmmFleet::with_penalty(model, n, Stopping::default(), penalty).expect("fleet");
        let t = Instant::now();
        fleet.iterate().expect("iteration");
        let first = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let c0 = cpu_seconds();
        let reps = 5;
        for _ in 0..reps {
            std::hint::black_box(fleet.iterate().expect("iteration"));
        }
        let per = t.elapsed().as_secs_f64() / f64::from(reps);
        let cpu = (cpu_seconds() - c0) / f64::from(reps);
        let peak = peak_rss_mib().map_or("-".into(), |v| format!("{v:.0}"));
        println!(
            "{n:>7} {m:>6} {:>12} {first:>9.3} {per:>13.3} {cpu:>17.3} {peak:>10}",
            n * m
        );
        drop(fleet);
    }
}
