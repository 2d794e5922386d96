//! The host core's step for a whole host: 1 024 VMs, 2 QPs each (an SQ and a shared CQ: 4
//! rings per VM), each VM's RAM a file mapped as resexd maps guest RAM, the memory behind
//! `Arc<dyn GuestMemory>` as backends hand it over. Before each measured step every QP gets 4
//! new WQEs and one CQE (untimed); the step then scans, drains mailboxes, measures the link and,
//! with a policy, prices. Beside each step, alternating, the monitor's own tick over the same
//! guests (`resex_ibmon::scan_all` over bare `VmMonitor`s, what `cargo bench -p resex-ibmon
//! --bench monitor` times): the difference is what the core costs over the scan, measured in
//! one run on the same memory. The last two columns split the rounds by which went first: a
//! step that goes first reads the guests' new lines cold, as resexd's only scan does. Prints a
//! table; not a timed test.
//!
//! `cargo bench -p resex-core --bench step`

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

/// Medians of `rounds` monitor ticks and of as many steps over the same guests (alternating
/// which goes first), us; and the medians of step minus tick over the rounds where the step
/// went first (it read the guests' new lines cold) and where it went second.
fn measure(h: &mut Host, rounds: usize, busy: bool) -> (f64, f64, f64, f64) {
    let (mut ticks, mut steps) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for r in 0..rounds {
        if busy {
            work(h);
        }
        h.k += 1;
        for first in [r % 2 == 0, r % 2 == 1] {
            if first {
                let t = Instant::now();
                let mut wqes = 0;
                scan_all(&mut h.mons, BUDGET, |(_, m), _| wqes += m.total().wqes);
                ticks.push(t.elapsed().as_nanos() as f64 / 1000.0);
                std::hint::black_box(wqes);
            } else {
                let t = Instant::now();
                let out = h.core.step(h.k * 1_000_000).unwrap();
                let us = t.elapsed().as_nanos() as f64 / 1000.0;
                if busy {
                    assert!(
                        out.rows.iter().all(|r| r.delta.wqes == 8),
                        "every VM counted"
                    );
                }
                steps.push(us);
            }
        }
    }
    let over = |first: usize| {
        let d = (first..rounds)
            .step_by(2)
            .map(|r| steps[r] - ticks[r])
            .collect();
        median(d)
    };
    let (cold, warm) = (over(1), over(0));
    (median(ticks), median(steps), cold, warm)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    println!("host core step, {VMS} VMs x 4 rings, RAM files behind Arc<dyn GuestMemory>");
    println!(
        "{:<40} {:>9} {:>9} {:>9} {:>10} {:>10} target (over)",
        "case (medians of 101)", "tick us", "step us", "over us", "step 1st", "step 2nd"
    );
    for policy in [None, Some("ioshares"), Some("governor")] {
        let mut h = host(policy);
        // Warm: every VM's first scan (attach) and the engine's first epoch.
        measure(&mut h, 20, true);
        let name = policy.unwrap_or("no policy");
        for busy in [false, true] {
            let (tick, step, cold, warm) = measure(&mut h, 101, busy);
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
            println!(
                "{case:<40} {tick:>9.1} {step:>9.1} {:>9.1} {cold:>10.1} {warm:>10.1} {target}",
                step - tick
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir());
}
