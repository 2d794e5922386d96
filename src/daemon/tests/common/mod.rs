//! What the daemon's integration tests share: waiting for a condition, a config in a
//! temporary directory.
#![allow(dead_code)] // each test binary uses its own part

use resex_daemon::config::Config;
use std::path::Path;
use std::time::{Duration, Instant};

/// Waits up to 90 s for `ok`; the assertion names `what`.
pub fn eventually(what: &str, ok: impl Fn() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < Duration::from_secs(90), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits up to 90 s for the daemon's snapshot to satisfy `ok`; the assertion names `what` and
/// shows the last snapshot.
pub fn until(
    what: &str,
    d: &resex_daemon::DaemonHandle,
    ok: impl Fn(&resex_api::Snapshot) -> bool,
) {
    let t = Instant::now();
    loop {
        let s = d.snapshot();
        if ok(&s) {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(90), "{what}: {s:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cfg` with its run and state directories and API socket in `dir`, and no real-time loop.
pub fn in_dir(mut cfg: Config, dir: &Path) -> Config {
    cfg.run_dir = Some(dir.to_owned());
    cfg.api_socket = Some(dir.join("api.sock"));
    cfg.state_dir = Some(dir.join("state"));
    cfg.realtime = false;
    cfg
}

/// The guest posts `n` RDMA WRITEs of `bytes` on QP 0 (the last one signalled), rings its
/// doorbell, and the HCA completes them and the guest polls.
pub fn post_writes(
    synth: &mut resex_ibmon::synth::SynthGuest,
    mem: &dyn resex_guestmem::GuestMemory,
    n: usize,
    bytes: u32,
) {
    for k in 0..n {
        let wr = resex_ibmon::synth::Wr {
            opcode: resex_mlx5::consts::send_op::RDMA_WRITE,
            sges: vec![bytes],
            inline: false,
            signaled: k + 1 == n,
        };
        assert!(synth.post(mem, 0, &wr), "the send queue has room");
    }
    synth.ring_doorbells(mem);
    synth.complete(mem, 0, usize::MAX, false);
    synth.poll(mem, 0, usize::MAX, None);
}

/// Starts resexd over `hv` with `cfg` and no policy.
pub fn start(
    cfg: Config,
    hv: std::sync::Arc<dyn resex_backend::Hypervisor>,
) -> resex_daemon::DaemonHandle {
    resex_daemon::start(
        resex_daemon::Settings {
            cfg,
            policy: None,
            limits: Default::default(),
        },
        hv,
    )
    .expect("resexd starts")
}
