//! Status-byte transport vs sliding window, side by side over softhca with the 100 Gb/s preset
//! (the status-byte paper's ConnectX-5 link), 3 blocks on each side as in the paper, sizes
//! 64 B to 8 MiB. Prints, per size and mechanism:
//! - sync: synchronisation control latency (Fig. 10): status-byte = one RDMA READ of the
//!   receiver's status bytes; window = an ACK (RDMA SEND) from the receiver until the sender's
//!   head moves;
//! - lat: transmission latency of one block, send call to receiver holding the data (Fig. 12);
//! - MB/s: throughput of consecutive transmissions to a receiver thread (Figs. 13-14);
//! - CPU/msg: sender and receiver thread CPU time per message during the throughput run
//!   (Fig. 15). The HCA's own thread is the "NIC" and is not counted.
//!
//! `cargo bench -p resex-shim --bench transport` (add `-- --quick` for fewer sizes and rounds).

#![allow(clippy::cast_possible_truncation)]

use resex_guestmem::{GuestMemory, VecMemory};
use resex_shim::transport::realtime::{self, RealClock};
use resex_shim::transport::status_byte::{Config, StatusByteReceiver, StatusByteSender};
use resex_shim::transport::window::{WindowReceiver, WindowSender};
use resex_shim::transport::{BlockSender, Polling};
use resex_shim::SoftProvider;
use resex_softhca::{Clock, LinkConfig, MonotonicClock, PortId, SoftHca};
use std::sync::{Arc, Mutex};

/// The HCA thread's longest sleep between polls.
const IDLE_SLEEP: Duration = Duration::from_micros(20);
use std::time::{Duration, Instant};

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; CLOCK_THREAD_CPUTIME_ID exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct World {
    _hca: SoftHca,
    a: SoftProvider,
    b: SoftProvider,
    _t: resex_softhca::HcaThread,
}

fn world(size: u64) -> World {
    let hca = SoftHca::new(LinkConfig::hundred_gig(), 2);
    let ram = (8 * (size + 8) + (16 << 20)) as usize;
    let mk = |port| {
        let mem: Arc<dyn GuestMemory> = Arc::new(VecMemory::new(ram));
        let gp = hca.add_guest(mem.clone(), PortId(port));
        SoftProvider::new(mem, 1 << 20, ram as u64, Arc::new(gp)).unwrap()
    };
    let a = mk(0);
    let b = mk(1);
    let t = hca.spawn(
        Arc::new(MonotonicClock::new()) as Arc<dyn Clock>,
        IDLE_SLEEP,
    );
    World {
        _hca: hca,
        a,
        b,
        _t: t,
    }
}

#[derive(Default, Clone, Copy)]
struct Row {
    sync_us: f64,
    lat_us: f64,
    mbps: f64,
    tx_cpu_us: f64,
    rx_cpu_us: f64,
}

fn cfg(size: u64) -> Config {
    Config {
        blocks: 3,
        payload: size,
        path_mtu: 4096,
        timeout: Duration::from_secs(60),
        ring_entries: 0,
        polling: Default::default(),
    }
}

fn rounds(size: u64, quick: bool) -> (u32, u32) {
    let lat = if size >= 1 << 20 { 10 } else { 100 };
    let tput = ((256u64 << 20) / size).clamp(20, 1000) as u32;
    if quick {
        (lat / 5 + 2, tput / 10 + 5)
    } else {
        (lat, tput)
    }
}

fn status_byte(size: u64, quick: bool) -> Row {
    let w = world(size);
    let c = cfg(size);
    let data = vec![0x5au8; size as usize];
    let (lat_n, tput_n) = rounds(size, quick);
    let mut rx = StatusByteReceiver::new(&w.b, &c).unwrap();
    let tx = Arc::new(StatusByteSender::connect(&w.a, &c, rx.endpoint()).unwrap());
    rx.accept(tx.qp()).unwrap();
    let mut row = Row::default();
    // Sync latency.
    let n = 200;
    let mut total = Duration::ZERO;
    for _ in 0..n {
        total += tx.sync().unwrap();
    }
    row.sync_us = total.as_secs_f64() * 1e6 / f64::from(n);
    // Transmission latency.
    let mut total = Duration::ZERO;
    for _ in 0..lat_n {
        let t0 = Instant::now();
        tx.send(0, &data).unwrap();
        rx.recv(Duration::from_secs(60)).unwrap();
        total += t0.elapsed();
    }
    tx.flush().unwrap();
    row.lat_us = total.as_secs_f64() * 1e6 / f64::from(lat_n);
    // Throughput and CPU.
    let receiver = std::thread::spawn(move || {
        let c0 = thread_cpu_ns();
        for _ in 0..tput_n {
            rx.recv(Duration::from_secs(60)).unwrap();
        }
        (thread_cpu_ns() - c0, rx)
    });
    let t0 = Instant::now();
    let c0 = thread_cpu_ns();
    for _ in 0..tput_n {
        tx.send(0, &data).unwrap();
    }
    let tx_cpu = thread_cpu_ns() - c0;
    let (rx_cpu, _rx) = receiver.join().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    row.mbps = (size * u64::from(tput_n)) as f64 / secs / 1e6;
    row.tx_cpu_us = tx_cpu as f64 / 1e3 / f64::from(tput_n);
    row.rx_cpu_us = rx_cpu as f64 / 1e3 / f64::from(tput_n);
    row
}

fn window(size: u64, quick: bool) -> Row {
    let w = world(size);
    let c = cfg(size);
    let data = vec![0x5au8; size as usize];
    let (lat_n, tput_n) = rounds(size, quick);
    let mut rx = WindowReceiver::new(&w.b, &c).unwrap();
    let tx = WindowSender::connect(&w.a, &c, rx.endpoint(), true).unwrap();
    rx.accept(tx.qp()).unwrap();
    // The paper's ACK thread: ACKs move the head on a thread of their own.
    let tx = Arc::new(Mutex::new(Box::new(tx)));
    let clock = RealClock::new();
    let acks = realtime::spawn_poller(tx.clone(), clock).unwrap();
    let timeout = Duration::from_secs(60);
    let mut row = Row::default();
    // Sync latency: an ACK from the receiver until the sender's head moves; and transmission
    // latency, in the same rounds.
    let n = lat_n.max(50);
    let (mut sync, mut lat) = (Duration::ZERO, Duration::ZERO);
    let small = &data[..64.min(data.len())];
    for k in 0..n {
        let payload = if k < lat_n { &data[..] } else { small };
        let t0 = Instant::now();
        realtime::send_shared(&tx, &clock, 0, payload, timeout, Polling::Spin).unwrap();
        realtime::recv(&mut rx, &clock, timeout, Polling::Spin).unwrap();
        let t1 = Instant::now();
        if k < lat_n {
            lat += t1 - t0;
        }
        while tx.lock().unwrap().in_flight() > 0 {
            std::hint::spin_loop();
        }
        sync += t1.elapsed();
    }
    row.sync_us = sync.as_secs_f64() * 1e6 / f64::from(n);
    row.lat_us = lat.as_secs_f64() * 1e6 / f64::from(lat_n);
    let receiver = std::thread::spawn(move || {
        let clock = RealClock::new();
        let c0 = thread_cpu_ns();
        for _ in 0..tput_n {
            realtime::recv(&mut rx, &clock, timeout, Polling::Spin).unwrap();
        }
        let cpu = thread_cpu_ns() - c0;
        (cpu, rx)
    });
    let t0 = Instant::now();
    let c0 = thread_cpu_ns();
    for _ in 0..tput_n {
        realtime::send_shared(&tx, &clock, 0, &data, timeout, Polling::Spin).unwrap();
    }
    let (rx_cpu, rx) = receiver.join().unwrap();
    realtime::flush_shared(&tx, &clock, timeout, Polling::Spin).unwrap();
    let tx_cpu = thread_cpu_ns() - c0;
    acks.stop().unwrap();
    drop(rx);
    let secs = t0.elapsed().as_secs_f64();
    row.mbps = (size * u64::from(tput_n)) as f64 / secs / 1e6;
    row.tx_cpu_us = tx_cpu as f64 / 1e3 / f64::from(tput_n);
    row.rx_cpu_us = rx_cpu as f64 / 1e3 / f64::from(tput_n);
    row
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes: Vec<u64> = if quick {
        vec![64, 4096, 256 << 10, 8 << 20]
    } else {
        vec![
            64,
            256,
            1024,
            4096,
            16 << 10,
            64 << 10,
            256 << 10,
            1 << 20,
            8 << 20,
        ]
    };
    println!("status-byte (SB) vs sliding window (SW) over softhca, 100 Gb/s preset, 3 blocks");
    println!(
        "softhca polling: {}; transports busy-poll (spin, then yield); the window's ACKs on an ACK thread (its CPU not counted below)",
        resex_softhca::describe_polling(&resex_softhca::PollOptions {
            idle_sleep: IDLE_SLEEP,
            ..Default::default()
        })
    );
    println!(
        "NOTE: real-time figures on a shared machine measure the host (the HCA thread's sleeps, \
         the scheduler, other tenants), not the transport. `resex lab transport` runs the same \
         transports in virtual time on a NIC model."
    );
    println!(
        "{:>8}  {:>9} {:>9}  {:>9} {:>9}  {:>9} {:>9}  {:>13} {:>13}",
        "size",
        "sync SB",
        "sync SW",
        "lat SB",
        "lat SW",
        "MB/s SB",
        "MB/s SW",
        "CPU/msg SB",
        "CPU/msg SW"
    );
    println!(
        "{:>8}  {:>9} {:>9}  {:>9} {:>9}  {:>9} {:>9}  {:>13} {:>13}",
        "", "us", "us", "us", "us", "", "", "tx+rx us", "tx+rx us"
    );
    for size in sizes {
        let sb = status_byte(size, quick);
        let sw = window(size, quick);
        let label = if size >= 1 << 20 {
            format!("{}M", size >> 20)
        } else if size >= 1024 {
            format!("{}K", size >> 10)
        } else {
            format!("{size}")
        };
        println!(
            "{:>8}  {:>9.2} {:>9.2}  {:>9.2} {:>9.2}  {:>9.0} {:>9.0}  {:>6.2}+{:<6.2} {:>6.2}+{:<6.2}",
            label,
            sb.sync_us,
            sw.sync_us,
            sb.lat_us,
            sw.lat_us,
            sb.mbps,
            sw.mbps,
            sb.tx_cpu_us,
            sb.rx_cpu_us,
            sw.tx_cpu_us,
            sw.rx_cpu_us
        );
    }
}
