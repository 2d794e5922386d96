//! IBMon benchmark: prints a table of what the monitor costs (not a timed test).
//!
//! `cargo bench -p resex-ibmon --bench monitor`
//!
//! - ns per idle ring check, per CQE consumed, per WQE walked (one VM, RAM file mapped);
//! - a whole host: 1 024 VMs x 4 rings (2 QPs, each an SQ and a CQ) per tick, idle and busy;
//! - the same monitor over a baseline reader that fetches guest memory with `process_vm_readv`
//!   from another process (the way memflow reads QEMU guests), and the ratio.
#![allow(missing_docs, clippy::cast_possible_truncation)]

use resex_guestmem::{FileMemory, GuestAddress, GuestMemory, MemError};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::synth::{SynthConfig, SynthGuest, Wr};
use resex_ibmon::{scan_all, ScanTarget, VmMonitor};
use resex_mlx5::consts::send_op;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Reads another process's memory with process_vm_readv: one syscall per read.
struct PvrMemory {
    pid: libc::pid_t,
    base: usize,
    size: u64,
}

impl GuestMemory for PvrMemory {
    fn size(&self) -> u64 {
        self.size
    }
    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        if addr
            .0
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > self.size)
        {
            return Err(MemError::OutOfRange {
                addr,
                len: buf.len(),
                size: self.size,
            });
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: (self.base + addr.0 as usize) as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` points at `buf`, valid for writes of its length; the kernel checks
        // the remote range itself and fails the call rather than faulting.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        if n != buf.len() as isize {
            return Err(MemError::OutOfRange {
                addr,
                len: buf.len(),
                size: self.size,
            });
        }
        Ok(())
    }
    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        Err(MemError::OutOfRange {
            addr,
            len: data.len(),
            size: 0,
        })
    }
}

struct Vm {
    mem: FileMemory,
    mon: VmMonitor,
    layout: resex_ibmon::Layout,
}

impl ScanTarget for Vm {
    type Memory = FileMemory;
    type Rings = VmMonitor;
    fn parts(&mut self) -> Option<(&mut VmMonitor, &FileMemory)> {
        Some((&mut self.mon, &self.mem))
    }
}

impl Vm {
    /// A monitor that has read nothing yet (outside the timed region).
    fn reset(&mut self) {
        self.mon = VmMonitor::new(self.layout.clone());
    }
}

fn dir() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("resex-bench-{}", std::process::id()))
}

fn vm(
    path: &Path,
    ram: u64,
    cfg: &SynthConfig,
    work: impl FnOnce(&FileMemory, &mut SynthGuest),
) -> Vm {
    let mem = FileMemory::create(path, ram).unwrap();
    let mut g = SynthGuest::new(&mem, cfg).unwrap();
    work(&mem, &mut g);
    g.ring_doorbells(&mem);
    let layout = validate(g.registration(), ram, &Limits::default()).unwrap();
    let mon = VmMonitor::new(layout.clone());
    Vm { mem, mon, layout }
}

fn send(signaled: bool) -> Wr {
    Wr {
        opcode: send_op::SEND,
        sges: vec![512],
        inline: false,
        signaled,
    }
}

/// Median of `rounds` measurements of `f`, in ns.
fn median_ns(rounds: usize, mut f: impl FnMut() -> u64) -> f64 {
    let mut v: Vec<u64> = (0..rounds).map(|_| f()).collect();
    v.sort_unstable();
    v[v.len() / 2] as f64
}

/// Median ns per entry of a full scan of `v` from a fresh monitor (`entries` per scan).
fn per_entry_ns(v: &mut Vm, rounds: usize, entries: u32) -> f64 {
    median_ns(rounds, || {
        v.reset();
        time(|| {
            v.mon.scan(&v.mem, u32::MAX);
        })
    }) / f64::from(entries)
}

fn time<F: FnMut()>(mut f: F) -> u64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as u64
}

/// One tick over a host, as the daemon does it: `scan_all`, which prefetches a few VMs ahead so
/// that the cache and TLB misses of different VMs overlap.
fn tick<T: ScanTarget>(host: &mut [T]) {
    scan_all(host, 16_384, |_, _| {});
}

fn row(name: &str, value: f64, unit: &str, target: &str) {
    println!("{name:<48} {value:>12.1} {unit:<8} {target}");
}

fn main() {
    let d = dir();
    std::fs::create_dir_all(&d).unwrap();
    println!(
        "IBMon benchmark (release build, RAM files mapped from {})",
        d.display()
    );
    println!("{:<48} {:>12} {:<8} target", "what", "value", "unit");

    // Idle ring check: one CQ, nothing new.
    let idle_cfg = SynthConfig {
        qps: 1,
        shared_cq: true,
        ..SynthConfig::default()
    };
    let mut idle = vm(&d.join("idle"), 1 << 20, &idle_cfg, |_, _| {});
    let n = 200_000;
    let ns = median_ns(9, || {
        time(|| {
            for _ in 0..n {
                idle.mon.scan(&idle.mem, 1024);
            }
        })
    }) / n as f64;
    row("idle ring check (1 CQ, nothing new)", ns, "ns", "<= 20 ns");

    // Per CQE: receive completions filling one CQ, so no SQ walk; 65 536 entries stream from
    // memory, 4 096 stay in cache (the cost of the code, not of memory).
    for (cqe_cnt, rounds, name, target) in [
        (65_536u32, 9, "per CQE consumed (receive CQEs)", "<= 15 ns"),
        (4096, 51, "  per CQE, 4 096-entry CQ (cache-resident)", ""),
    ] {
        let cfg = SynthConfig {
            qps: 1,
            shared_cq: false,
            cqe_cnt,
            wqe_cnt: 64,
            ..SynthConfig::default()
        };
        let mut v = vm(&d.join(format!("cqe{cqe_cnt}")), 16 << 20, &cfg, |m, g| {
            while g.receive(m, 0, 1000) {}
        });
        let ns = per_entry_ns(&mut v, rounds, cqe_cnt);
        assert_eq!(v.mon.total().completions, u64::from(cqe_cnt));
        row(name, ns, "ns", target);
    }

    // Per WQE: one-SGE sends filling the SQ, the last one signalled: one CQE walks them all.
    for (wqe_cnt, rounds, name, target) in [
        (
            32_768u32,
            9,
            "per WQE walked (1-SGE sends, selective signalling)",
            "<= 25 ns",
        ),
        (4096, 51, "  per WQE, 4 096-BB SQ (cache-resident)", ""),
    ] {
        let cfg = SynthConfig {
            qps: 1,
            shared_cq: true,
            cqe_cnt: 64,
            wqe_cnt,
            ..SynthConfig::default()
        };
        let mut v = vm(&d.join(format!("wqe{wqe_cnt}")), 16 << 20, &cfg, |m, g| {
            for i in 0..wqe_cnt {
                assert!(g.post(m, 0, &send(i + 1 == wqe_cnt)));
            }
            g.complete(m, 0, usize::MAX, false);
        });
        let ns = per_entry_ns(&mut v, rounds, wqe_cnt);
        assert_eq!(v.mon.counters()[0].wqes, u64::from(wqe_cnt));
        row(name, ns, "ns", target);
    }

    // A whole host: 1 024 VMs, 2 QPs each (SQ + CQ) = 4 rings per VM.
    let host_cfg = SynthConfig {
        qps: 2,
        shared_cq: true,
        cqe_cnt: 256,
        wqe_cnt: 256,
        ..SynthConfig::default()
    };
    let mut idle_host: Vec<Vm> = (0..1024)
        .map(|i| vm(&d.join(format!("h{i}")), 256 << 10, &host_cfg, |_, _| {}))
        .collect();
    let idle_tick = median_ns(21, || time(|| tick(&mut idle_host)));
    row(
        "host tick, 1024 VMs x 4 rings, idle",
        idle_tick / 1000.0,
        "us",
        "<= 150 us",
    );
    // Busy: every QP completed 4 WQEs (1 CQE) since the last tick.
    let mut busy_host: Vec<Vm> = (0..1024)
        .map(|i| {
            vm(&d.join(format!("b{i}")), 256 << 10, &host_cfg, |m, g| {
                for qp in 0..2 {
                    for k in 0..4 {
                        g.post(m, qp, &send(k == 3));
                    }
                    g.complete(m, qp, usize::MAX, false);
                }
            })
        })
        .collect();
    // The daemon's monitors live on between ticks: rewind the cursors of warm monitors.
    let start: Vec<_> = busy_host.iter().map(|v| v.mon.state()).collect();
    let mut reps = 0;
    let busy_tick = median_ns(21, || {
        for (v, st) in busy_host.iter_mut().zip(&start) {
            v.mon.restore(st).unwrap();
        }
        reps += 1;
        time(|| tick(&mut busy_host))
    });
    assert!(busy_host.iter().all(|v| v.mon.total().wqes == 8 * reps));
    row(
        "host tick, 1024 VMs x 4 rings, 2 CQEs + 8 WQEs each",
        busy_tick / 1000.0,
        "us",
        "<= 150 us",
    );
    row(
        "  = share of one core at a 1 ms interval",
        busy_tick / 1e6 * 100.0,
        "%",
        "<= 15 %",
    );
    // The same busy host, each VM's RAM file mapped again behind an `Arc<dyn GuestMemory>`.
    let mut dyn_host: Vec<(Arc<dyn GuestMemory>, VmMonitor)> = (0..1024)
        .map(|i| {
            let mem: Arc<dyn GuestMemory> =
                Arc::new(FileMemory::open(&d.join(format!("b{i}"))).unwrap());
            (mem, VmMonitor::new(busy_host[i].layout.clone()))
        })
        .collect();
    let mut dyn_reps = 0;
    let dyn_tick = median_ns(21, || {
        for ((_, mon), st) in dyn_host.iter_mut().zip(&start) {
            mon.restore(st).unwrap();
        }
        dyn_reps += 1;
        time(|| tick(&mut dyn_host))
    });
    assert!(dyn_host.iter().all(|(_, m)| m.total().wqes == 8 * dyn_reps));
    row(
        "  the same, memory as Arc<dyn GuestMemory>",
        dyn_tick / 1000.0,
        "us",
        "<= 150 us",
    );
    drop(dyn_host);

    // Baseline: the same monitor reading the same RAM files through process_vm_readv from a
    // forked child that shares the mappings.
    // SAFETY: single-threaded here; the child only sleeps until it is killed.
    let child = unsafe { libc::fork() };
    if child == 0 {
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    }
    let pvr = |v: &Vm| PvrMemory {
        pid: child,
        base: v.mem.base_address(),
        size: v.mem.size(),
    };
    let mem = pvr(&idle);
    let n = 20_000;
    let pvr_idle = median_ns(9, || {
        time(|| {
            for _ in 0..n {
                idle.mon.scan(&mem, 1024);
            }
        })
    }) / n as f64;
    let idle_check = median_ns(9, || {
        time(|| {
            for _ in 0..n {
                idle.mon.scan(&idle.mem, 1024);
            }
        })
    }) / n as f64;
    row(
        "baseline idle ring check (process_vm_readv)",
        pvr_idle,
        "ns",
        "",
    );
    row(
        "  ratio process_vm_readv / mapped",
        pvr_idle / idle_check,
        "x",
        "",
    );
    let pvr_mems: Vec<PvrMemory> = busy_host.iter().map(pvr).collect();
    let pvr_busy = median_ns(11, || {
        for (v, st) in busy_host.iter_mut().zip(&start) {
            v.mon.restore(st).unwrap();
        }
        reps += 1;
        time(|| {
            for (v, m) in busy_host.iter_mut().zip(&pvr_mems) {
                v.mon.scan(m, 16_384);
            }
        })
    });
    assert!(busy_host.iter().all(|v| v.mon.total().wqes == 8 * reps));
    row(
        "baseline host tick, busy (process_vm_readv)",
        pvr_busy / 1000.0,
        "us",
        "",
    );
    row(
        "  ratio process_vm_readv / mapped",
        pvr_busy / busy_tick,
        "x",
        "",
    );
    // SAFETY: child is our own child process.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    drop(idle_host);
    drop(busy_host);
    let _ = std::fs::remove_dir_all(&d);
}
