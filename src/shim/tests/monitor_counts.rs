//! The monitor (IBMon), reading the sender's rings out of guest memory, counts exactly what
//! softhca executed for a run of the status-byte transport: its unsignalled data writes, its
//! signalled inline status writes and its synchronising READs.
#![allow(clippy::cast_possible_truncation, clippy::type_complexity)]

mod common;

use common::live;
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::VmMonitor;
use resex_proto::{Registration, REGISTRATION_VERSION};
use resex_shim::transport::status_byte::{Config, StatusByteReceiver, StatusByteSender};
use resex_softhca::LinkConfig;
use std::time::Duration;

#[test]
fn monitor_counts_exactly_what_softhca_executed() {
    let (hca, a, b, _t) = live(LinkConfig::resex_testbed(), 32 << 20);
    let cfg = Config {
        blocks: 3,
        payload: 256 << 10,
        path_mtu: 1024,
        timeout: Duration::from_secs(30),
        ring_entries: 4096,
        polling: Default::default(),
    };
    let mut rx = StatusByteReceiver::new(&b.p, &cfg).unwrap();
    let tx = StatusByteSender::connect(&a.p, &cfg, rx.endpoint()).unwrap();
    rx.accept(tx.qp()).unwrap();
    let qpn = tx.qp().qpn;

    let reg = Registration {
        rings: Vec::new(),
        version: REGISTRATION_VERSION,
        vm: Some("sender".into()),
        path_mtu: 1024,
        qps: vec![a.p.registration(qpn).unwrap()],
        mailbox: None,
    };
    use resex_guestmem::GuestMemory;
    let layout = validate(&reg, a.mem.size(), &Limits::default()).unwrap();
    let mut monitor = VmMonitor::new(layout);

    const N: u32 = 300;
    // A slow receiver, so that the sender must synchronise.
    let receiver = std::thread::spawn(move || {
        for k in 0..N {
            if k % 5 == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
            rx.recv(Duration::from_secs(30)).unwrap();
        }
        rx
    });
    let mut rng = fastrand::Rng::with_seed(3);
    let mut sent_bytes = 0u64;
    for k in 0..N {
        let len = if k % 10 == 0 {
            rng.usize(64 << 10..256 << 10)
        } else {
            rng.usize(1..3000)
        };
        tx.send(0, &vec![k as u8; len]).unwrap();
        sent_bytes += len as u64 + 8;
        // Scan after every send, as the daemon does each tick (its rings are deep enough that
        // the synchronisations of one send cannot lap the monitor).
        monitor.scan(&*a.mem, 1 << 20);
    }
    let _rx = receiver.join().unwrap();
    tx.flush().unwrap();
    for _ in 0..4 {
        monitor.scan(&*a.mem, 1 << 20);
    }
    let truth = hca.stats(qpn).unwrap();
    let got = monitor.total();
    let s = tx.stats();
    // Two WQEs per block, one per synchronisation.
    assert_eq!(truth.wqes, 2 * s.blocks + s.syncs);
    assert_eq!(
        truth.tx_bytes,
        sent_bytes + s.blocks,
        "data plus one status byte per block"
    );
    assert_eq!(got.wqes, truth.wqes);
    assert_eq!(got.tx_bytes, truth.tx_bytes);
    assert_eq!(got.tx_packets, truth.tx_packets);
    assert_eq!(got.rx_read_bytes, truth.rx_read_bytes);
    assert_eq!(got.rx_read_bytes, 3 * s.syncs);
    assert_eq!(got.rx_read_packets, truth.rx_read_packets);
    assert_eq!((got.overruns, got.anomalies, got.errors), (0, 0, 0));
    assert!(s.syncs > 0);
    // The sender's QP destroyed: its work stays in the HCA's ground truth, as in the
    // monitor's totals (what `resex xen hca --stats` reports).
    assert_eq!(a.port.retired_stats(), (Default::default(), 0));
    drop(tx);
    assert!(a.port.qp_stats().iter().all(|(n, _)| *n != qpn));
    let (retired, qps) = a.port.retired_stats();
    assert_eq!((retired, qps), (truth, 1));
}
