//! The host core's step for a whole host: 1 024 VMs, 2 QPs each (an SQ and a shared CQ: 4
//! rings per VM), each VM's RAM a file mapped as resexd maps guest RAM, the memory behind
//! `Arc<dyn GuestMemory>` as backends hand it over. Before each measured step every QP gets 4
//! new WQEs and one CQE (untimed); the step then scans, drains mailboxes, measures the link and,
//! with a policy, prices. Beside the step, round by round, the monitor's own tick over the
//! same guests (`resex_ibmon::scan_all` over bare `VmMonitor`s, what `cargo bench -p
//! resex-ibmon --bench monitor` times): the difference is what the core costs over the scan,
//! measured in one run on the same memory. In a round the guests write, one scanner is timed
//! and the other then catches up untimed, so the timed one always reads the new lines first, as
//! it would alone (timing both in a round had whichever went second read the lines the first
//! had brought in: two modes a hundred microseconds apart); the timed scanner alternates
//! round by round, and each step is compared with the tick of the round beside it, so what
//! drifts on a shared machine between rounds (tens of microseconds) cancels.
//! Prints a table; not a timed test.
//!
//! `cargo bench -p resex-core --bench step`; `RESEX_STEP_PAIRS=N` sets the pairs of rounds per case (210),
//! `RESEX_STEP_POLICIES=none` runs only the no-policy cases (the targets).

#![allow(missing_docs, clippy::cast_possible_truncation)]

use resex_core::{CoreConfig, HostCore, VmId, VmInfo};
use resex_guestmem::{FileMemory, GuestMemory};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::synth::{SynthConfig, SynthGuest, Wr};
use resex_ibmon::{scan_all, VmMonitor};
use resex_mlx5::consts::send_op;
use resex_pricing::PolicyConfig;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

const VMS: usize = 1024;
const RAM: u64 = 256 << 10;
/// The core's default scan budget per VM, for the bare monitors too.
const BUDGET: u32 = resex_ibmon::DEFAULT_SCAN_BUDGET;

fn dir() -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("resex-core-bench-{}", std::process::id()))
}

struct Host {
    core: HostCore,
    guests: Vec<(Arc<FileMemory>, SynthGuest)>,
    /// The same guests under bare monitors (the monitor's tick).
    mons: Vec<(Arc<dyn GuestMemory>, VmMonitor)>,
    k: u64,
}

fn host(policy: Option<&str>) -> Host {
    let d = dir();
    std::fs::create_dir_all(&d).unwrap();
    let cfg = SynthConfig {
        qps: 2,
        shared_cq: true,
        cqe_cnt: 256,
        wqe_cnt: 256,
        ..SynthConfig::default()
    };
    let mut core = HostCore::new(CoreConfig::default());
    if let Some(p) = policy {
        let path = format!("{}/../../policies/{p}.toml", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        core.set_policy(Some((p.into(), PolicyConfig::from_toml(&text).unwrap())), 0);
    }
    let mut guests = Vec::new();
    let mut mons = Vec::new();
    for i in 0..VMS {
        let path = d.join(format!("g{i}-{}", policy.unwrap_or("none")));
        let mem = Arc::new(FileMemory::create(&path, RAM).unwrap());
        let _ = std::fs::remove_file(&path);
        let g = SynthGuest::new(&*mem, &cfg).unwrap();
        let id = VmId(i as u32 + 1);
        core.add_vm(id, VmInfo::new(format!("vm{i}"), 1, RAM))
            .unwrap();
        let dynmem: Arc<dyn GuestMemory> = mem.clone();
        core.set_memory(id, dynmem).unwrap();
        let layout = validate(g.registration(), RAM, &Limits::default()).unwrap();
        core.register(id, g.registration(), layout.clone()).unwrap();
        let dynmem: Arc<dyn GuestMemory> = mem.clone();
        mons.push((dynmem, VmMonitor::new(layout)));
        guests.push((mem, g));
    }
    Host {
        core,
        guests,
        mons,
        k: 0,
    }
}

fn work(h: &mut Host) {
    for (mem, g) in &mut h.guests {
        for qp in 0..2 {
            for j in 0..4 {
                let wr = Wr {
                    opcode: send_op::RDMA_WRITE,
                    sges: vec![4096],
                    inline: false,
                    signaled: j == 3,
                };
                g.post(&**mem, qp, &wr);
            }
            g.ring_doorbells(&**mem);
            g.complete(&**mem, qp, usize::MAX, false);
            g.poll(&**mem, qp, usize::MAX, None);
        }
    }
}

/// The two scanners.
#[derive(Clone, Copy, PartialEq)]
enum Scanner {
    Tick,
    Step,
}

/// One scan by `which`; microseconds.
fn scan(h: &mut Host, which: Scanner) -> f64 {
    h.k += 1;
    let t = Instant::now();
    match which {
        Scanner::Tick => tick(h),
        Scanner::Step => step(h),
    }
    t.elapsed().as_nanos() as f64 / 1000.0
}

/// The monitor's tick. Not inlined, nor is [`step`], so that a profiler
/// (`valgrind --tool=callgrind`) tells the two apart.
#[inline(never)]
fn tick(h: &mut Host) {
    let mut wqes = 0;
    scan_all(&mut h.mons, BUDGET, |(_, m), _| wqes += m.total().wqes);
    std::hint::black_box(wqes);
}

/// The core's step.
#[inline(never)]
fn step(h: &mut Host) {
    let out = h.core.step(h.k * 1_000_000).unwrap();
    std::hint::black_box(out.rows.len());
}

/// One round: the guests' work (when busy), a timed scan by `first`, then an untimed one by the
/// other scanner (its catch-up). Each scanner scans once a round, so each reads one round of
/// the guests' new lines, and the timed one reads them first, as it would alone.
fn round(h: &mut Host, first: Scanner, busy: bool) -> f64 {
    if busy {
        work(h);
    }
    let took = scan(h, first);
    let other = if first == Scanner::Tick {
        Scanner::Step
    } else {
        Scanner::Tick
    };
    scan(h, other);
    if busy {
        // Outside the timed scan: every VM's work was counted.
        let rows = &h.core.last_output().rows;
        assert!(rows.iter().all(|r| r.delta.wqes == 8), "every VM counted");
    }
    took
}

/// `pairs` pairs of adjacent rounds, one timing the monitor's tick, the other the core's step,
/// alternating which goes first. Returns the medians of every tick and every step (us), and the
/// median over the pairs of the step's time minus the tick's (us), with its quartiles: adjacent
/// rounds see the same machine, so the difference cancels what drifts between pairs.
fn measure(h: &mut Host, pairs: usize, busy: bool) -> (f64, f64, f64, f64, f64) {
    let (mut ticks, mut steps, mut over) = (Vec::new(), Vec::new(), Vec::new());
    for p in 0..pairs {
        let order = if p % 2 == 0 {
            [Scanner::Tick, Scanner::Step]
        } else {
            [Scanner::Step, Scanner::Tick]
        };
        let (mut t, mut s) = (0.0, 0.0);
        for which in order {
            let us = round(h, which, busy);
            match which {
                Scanner::Tick => t = us,
                Scanner::Step => s = us,
            }
        }
        over.push(s - t);
        ticks.push(t);
        steps.push(s);
    }
    let (lo, hi) = quartiles(&over);
    (median(ticks), median(steps), median(over), lo, hi)
}

/// Pairs of rounds per case.
const PAIRS: usize = 210;

/// Pairs per case: `RESEX_STEP_PAIRS`, else [`PAIRS`].
fn pairs() -> usize {
    std::env::var("RESEX_STEP_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(PAIRS)
}

/// The lower and upper quartiles.
fn quartiles(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 4], v[v.len() * 3 / 4])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    println!("host core step, {VMS} VMs x 4 rings, RAM files behind Arc<dyn GuestMemory>");
    println!(
        "{} pairs of rounds (the guests write, one scanner is timed, the other catches up); over = median over pairs of (step - tick)",
        pairs()
    );
    println!(
        "{:<40} {:>9} {:>9} {:>9} {:>15} target (over)",
        "case", "tick us", "step us", "over us", "over IQR us"
    );
    let pairs = pairs();
    // `RESEX_STEP_POLICIES=none`: only the case the targets are for.
    let only_none = std::env::var("RESEX_STEP_POLICIES").is_ok_and(|v| v == "none");
    let policies: &[Option<&str>] = if only_none {
        &[None]
    } else {
        &[None, Some("ioshares"), Some("governor")]
    };
    for &policy in policies {
        let mut h = host(policy);
        // Warm: every VM's first scan (attach) and the engine's first epoch.
        measure(&mut h, 2, true);
        let name = policy.unwrap_or("no policy");
        for busy in [false, true] {
            let (tick, step, over, lo, hi) = measure(&mut h, pairs, busy);
            let case = if busy {
                format!("busy (2 CQEs + 8 WQEs each), {name}")
            } else {
                format!("idle, {name}")
            };
            let target = match (policy, busy) {
                (None, false) => "<= 10 us",
                (None, true) => "<= 25 us",
                _ => "",
            };
            let iqr = format!("{lo:.1}..{hi:.1}");
            println!("{case:<40} {tick:>9.1} {step:>9.1} {over:>9.1} {iqr:>15} {target}");
        }
    }
    let _ = std::fs::remove_dir_all(dir());
}
