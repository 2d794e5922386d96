//! A backend that hangs never stops the loop: with every backend call held (as a libvirt that
//! stopped answering would), resexd keeps ticking, keeps counting what its guests post, and
//! serves its API; when the backend answers again, what it held comes through.
#![allow(missing_docs, clippy::cast_possible_truncation)]

use resex_backend::memory::{MemDomain, MemoryBackend};
use resex_daemon::config::Config;
use resex_guestmem::VecMemory;
use resex_ibmon::synth::{SynthConfig, SynthGuest};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{in_dir, post_writes, start, until};

#[test]
fn a_hung_backend_never_stops_the_loop_or_the_counting() {
    let mem = Arc::new(VecMemory::new(1 << 20));
    let cfg = SynthConfig {
        qps: 1,
        shared_cq: true,
        wqe_cnt: 256,
        cqe_cnt: 256,
        ..SynthConfig::default()
    };
    let mut synth = SynthGuest::new(&*mem, &cfg).unwrap();
    let doc = synth.registration().clone();
    let hv = Arc::new(MemoryBackend::new(
        vec![MemDomain::new("g", mem.clone(), Some(doc))],
        Duration::ZERO,
    ));
    let gate = hv.gate();
    gate.set_closed(true);
    let dir = tempfile::tempdir().unwrap();
    let cfg = in_dir(
        Config {
            snapshot_ms: 20,
            ..Config::default()
        },
        dir.path(),
    );
    let d = start(cfg, hv.clone());
    // Held from the start: no domain is known, and the loop ticks all the same.
    until("ticks while the backend hangs", &d, |s| s.host.ticks >= 300);
    assert!(d.snapshot().vms.is_empty());
    // The backend answers: the domain appears and registers.
    gate.set_closed(false);
    until("the domain registered", &d, |s| {
        s.vms.first().is_some_and(|v| v.state == "registered")
    });
    // Held again, while the guest keeps posting: counting goes on.
    gate.set_closed(true);
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let (stop, mem) = (stop.clone(), mem.clone());
        std::thread::spawn(move || {
            let mut posted = 0u64;
            while !stop.load(Ordering::Acquire) {
                post_writes(&mut synth, &*mem, 4, 4096);
                posted += 4;
                std::thread::sleep(Duration::from_millis(1));
            }
            posted
        })
    };
    let ticks = d.snapshot().host.ticks;
    until("counting while the backend hangs", &d, |s| {
        s.host.ticks > ticks + 300 && s.vms[0].wqes_total >= 400
    });
    stop.store(true, Ordering::Release);
    let posted = feeder.join().unwrap();
    until("every WQE counted", &d, |s| s.vms[0].wqes_total == posted);
    gate.set_closed(false);
    let run = d.stop();
    assert!(run.ticks > 600, "{run:?}");
}
