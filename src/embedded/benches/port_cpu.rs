//! What softhca's port thread costs in CPU, timer polling (the design before doorbells) beside
//! doorbells, in one run: an idle port (two guests with connected QPs, no traffic) and the
//! demo's base load (BenchEx: one client, 64 KiB replies at 1000 orders/s, in one process).
//! Each figure is CPU seconds of the port thread per wall second (1.00: a whole CPU), from
//! `/proc/self/task/TID/schedstat`; the modes alternate, so that the machine's noise falls on
//! both. `cargo bench -p resex-embedded --bench port_cpu [-- --quick]`.

use benchex::client::ClientConfig;
use benchex::server::ServerConfig;
use resex_guestmem::{GuestMemory, VecMemory};
use resex_shim::transport::status_byte::{Config, StatusByteReceiver, StatusByteSender};
use resex_shim::SoftProvider;
use resex_softhca::{Clock, LinkConfig, MonotonicClock, PollOptions, PortCost, PortId, SoftHca};
use std::sync::Arc;
use std::time::Duration;

fn options(doorbells: bool) -> PollOptions {
    PollOptions {
        idle_sleep: Duration::from_micros(20),
        doorbells,
        ..PollOptions::default()
    }
}

/// Two guests with a connected status-byte pair and nothing to send, for `secs`.
fn idle(doorbells: bool, secs: f64) -> PortCost {
    let hca = SoftHca::new(LinkConfig::resex_testbed(), 2);
    let t = hca.spawn_with(
        Arc::new(MonotonicClock::new()) as Arc<dyn Clock>,
        options(doorbells),
    );
    let ram = 16usize << 20;
    let mk = |port| {
        let mem: Arc<dyn GuestMemory> = Arc::new(VecMemory::new(ram));
        let gp = hca.add_guest(mem.clone(), PortId(port));
        SoftProvider::new(mem, 1 << 20, ram as u64, Arc::new(gp)).expect("a provider")
    };
    let (a, b) = (mk(0), mk(1));
    let cfg = Config::default();
    let mut rx = StatusByteReceiver::new(&b, &cfg).expect("a receiver");
    let tx = StatusByteSender::connect(&a, &cfg, rx.endpoint()).expect("a sender");
    rx.accept(tx.qp()).expect("accepting");
    let start = t.sample();
    std::thread::sleep(Duration::from_secs_f64(secs));
    t.sample().since(&start)
}

/// The demo's base load for `secs`; the port's cost and the client's median round trip, us.
fn demo_base(doorbells: bool, secs: f64) -> (PortCost, f64) {
    let ccfg = ClientConfig {
        duration: Some(Duration::from_secs_f64(secs)),
        ..ClientConfig::default()
    };
    let (r, cost) = resex_embedded::benchex_local::run_with(
        "testbed",
        ServerConfig::default(),
        ccfg,
        1,
        options(doorbells),
    )
    .expect("benchex local");
    let p50 = r.clients.first().map_or(0.0, |c| c.rtt.p50_ns as f64 / 1e3);
    (cost, p50)
}

fn share(c: &PortCost) -> f64 {
    c.cpu_share().unwrap_or(f64::NAN)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (idle_s, load_s, reps) = if quick { (1.0, 2.0, 1) } else { (3.0, 5.0, 2) };
    println!("softhca's port thread, CPU seconds per wall second (1.00 = a whole CPU); {reps} rounds, modes alternating");
    println!(
        "  timer:     {}",
        resex_softhca::describe_polling(&options(false))
    );
    println!(
        "  doorbells: {}",
        resex_softhca::describe_polling(&options(true))
    );
    println!(
        "{:<34} {:>10} {:>9} {:>8}   {:>10} {:>9} {:>8}   {:>7}",
        "load", "timer CPU", "wakes/s", "p50 us", "bells CPU", "wakes/s", "p50 us", "ratio"
    );
    for round in 0..reps {
        let ti = idle(false, idle_s);
        let di = idle(true, idle_s);
        println!(
            "{:<34} {:>10.4} {:>9.0} {:>8}   {:>10.4} {:>9.0} {:>8}   {:>6.0}x",
            format!("idle port, round {}", round + 1),
            share(&ti),
            ti.polls_per_s(),
            "-",
            share(&di),
            di.polls_per_s(),
            "-",
            share(&ti) / share(&di)
        );
        let (tl, tp) = demo_base(false, load_s);
        let (dl, dp) = demo_base(true, load_s);
        println!(
            "{:<34} {:>10.4} {:>9.0} {:>8.1}   {:>10.4} {:>9.0} {:>8.1}   {:>6.1}x",
            format!("demo base (64 KiB, 1000/s), round {}", round + 1),
            share(&tl),
            tl.polls_per_s(),
            tp,
            share(&dl),
            dl.polls_per_s(),
            dp,
            share(&tl) / share(&dl)
        );
    }
}
