//! The status-byte transport and the sliding window, end to end over softhca on the real clock.
#![allow(clippy::cast_possible_truncation, clippy::type_complexity)]

mod common;

use common::live;
use resex_shim::transport::pair::{self, Options, Pair};
use resex_shim::transport::realtime::{self, RealClock};
use resex_shim::transport::status_byte::{
    Config, StatusByteReceiver, StatusByteSender, DATA, FREE, UNAVAILABLE,
};
use resex_shim::transport::{Kind, Polling};
use resex_softhca::LinkConfig;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn payload(dev: u8, k: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(k * 7 + u32::from(dev)) as u8
        })
        .collect()
}

/// Four tasks share one sender (one QP), random sizes 64 B to 8 MiB, a receiver that sleeps at
/// random: every message arrives intact, each task's in packet order.
#[test]
fn several_tasks_random_sizes_and_receiver_delays_arrive_intact_and_in_order() {
    several_tasks(Polling::Spin);
}

/// The same with a sender that sleeps between polls once a wait passes 200 us.
#[test]
fn adaptive_polling_delivers_the_same() {
    several_tasks(Polling::Adaptive);
}

/// The same with a sender that polls in batches (naps of up to 1 ms after 20 us).
#[test]
fn batch_polling_delivers_the_same() {
    several_tasks(Polling::Batch);
}

fn several_tasks(polling: Polling) {
    let (_hca, a, b, _t) = live(LinkConfig::hundred_gig(), 96 << 20);
    let cfg = Config {
        blocks: 3,
        payload: 8 << 20,
        path_mtu: 4096,
        timeout: Duration::from_secs(60),
        ring_entries: 0,
        polling,
    };
    let mut rx = StatusByteReceiver::new(&b.p, &cfg).unwrap();
    let tx = Arc::new(StatusByteSender::connect(&a.p, &cfg, rx.endpoint()).unwrap());
    rx.accept(tx.qp()).unwrap();

    let mut rng = fastrand::Rng::with_seed(7);
    let plan: Vec<Vec<usize>> = (0..4)
        .map(|_| {
            (0..6)
                .map(|_| {
                    if rng.u8(..) < 40 {
                        rng.usize(1 << 20..=8 << 20)
                    } else {
                        rng.usize(64..64 << 10)
                    }
                })
                .collect()
        })
        .collect();
    let total: usize = plan.iter().map(Vec::len).sum();
    let tasks: Vec<_> = plan
        .iter()
        .cloned()
        .enumerate()
        .map(|(dev, sizes)| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for (k, len) in sizes.into_iter().enumerate() {
                    tx.send(dev as u8, &payload(dev as u8, k as u32, len))
                        .unwrap();
                }
            })
        })
        .collect();
    let mut next: HashMap<u8, u16> = HashMap::new();
    for _ in 0..total {
        if rng.u8(..) < 60 {
            std::thread::sleep(Duration::from_micros(rng.u64(0..3000)));
        }
        let m = rx.recv(Duration::from_secs(60)).unwrap();
        let k = next.entry(m.dev).or_insert(0);
        assert_eq!(m.packet, *k, "device {} out of order", m.dev);
        let len = plan[usize::from(m.dev)][usize::from(m.packet)];
        assert_eq!(m.data.len(), len);
        assert!(
            m.data == payload(m.dev, u32::from(m.packet), len),
            "device {} packet {} corrupted",
            m.dev,
            m.packet
        );
        *k += 1;
    }
    for t in tasks {
        t.join().unwrap();
    }
    tx.flush().unwrap();
    let s = tx.stats();
    assert_eq!(s.blocks, total as u64);
    assert!(
        s.syncs > 0,
        "with 3 blocks and {total} messages the sender must synchronise"
    );
}

/// The receiver holds block 1 (status 2): the sender skips it and keeps going through the other
/// blocks without blocking; once released, the block is used again.
#[test]
fn receiver_marks_a_block_unavailable_and_the_sender_skips_it() {
    let (_hca, a, b, _t) = live(LinkConfig::hundred_gig(), 16 << 20);
    let cfg = Config {
        blocks: 3,
        payload: 4096,
        path_mtu: 4096,
        timeout: Duration::from_secs(30),
        ring_entries: 0,
        polling: Default::default(),
    };
    let mut rx = StatusByteReceiver::new(&b.p, &cfg).unwrap();
    let tx = StatusByteSender::connect(&a.p, &cfg, rx.endpoint()).unwrap();
    rx.accept(tx.qp()).unwrap();
    rx.mark_unavailable(1).unwrap();
    tx.sync().unwrap();
    let mut used = Vec::new();
    for k in 0..20u32 {
        tx.send(0, &payload(0, k, 1000)).unwrap();
        let (block, m) = loop {
            if let Some(got) = rx.poll_block().unwrap() {
                break got;
            }
            std::thread::yield_now();
        };
        assert_eq!(m.packet as u32, k);
        used.push(block);
        assert_eq!(rx.status(1).unwrap(), UNAVAILABLE);
    }
    assert!(!used.contains(&1), "{used:?}");
    assert!(tx.stats().skipped_unavailable > 0);
    rx.mark_available(1).unwrap();
    tx.flush().unwrap();
    let mut after = Vec::new();
    for k in 20..30u32 {
        tx.send(0, &payload(0, k, 1000)).unwrap();
        let (block, _) = loop {
            if let Some(got) = rx.poll_block().unwrap() {
                break got;
            }
            std::thread::yield_now();
        };
        after.push(block);
    }
    assert!(after.contains(&1), "{after:?}");
    assert_eq!((FREE, DATA), (0, 1));
}

/// Every mechanism (the sliding window with its ACK thread) on the real clock: messages of
/// mixed sizes arrive intact and in order, and the sender ends with nothing in flight.
#[test]
fn every_mechanism_delivers_in_order_on_the_real_clock() {
    for kind in Kind::ALL {
        let (_hca, a, b, _t) = live(LinkConfig::hundred_gig(), 32 << 20);
        let cfg = Config {
            blocks: 3,
            payload: 1 << 20,
            path_mtu: 4096,
            timeout: Duration::from_secs(30),
            ring_entries: 0,
            polling: Default::default(),
        };
        let Pair { tx, mut rx } =
            pair::connect(kind, &a.p, &b.p, &cfg, Options::default()).unwrap();
        let tx = Arc::new(Mutex::new(tx));
        let poller = (kind == Kind::SlidingWindow)
            .then(|| realtime::spawn_poller(tx.clone(), RealClock::new()).unwrap());
        let sizes = [64usize, 1 << 20, 5000, 70_000, 64, 300_000, 1, 4096];
        let rx_thread = std::thread::spawn(move || {
            let clock = RealClock::new();
            let mut got = Vec::new();
            for _ in 0..sizes.len() * 3 {
                let m = realtime::recv(&mut *rx, &clock, Duration::from_secs(30), Polling::Spin);
                got.push(m.unwrap());
            }
            (got, rx)
        });
        let clock = RealClock::new();
        for round in 0..3u32 {
            for (k, &len) in sizes.iter().enumerate() {
                let data = payload(2, round * 100 + k as u32, len);
                realtime::send_shared(&tx, &clock, 2, &data, cfg.timeout, Polling::Spin).unwrap();
            }
        }
        // HiPower's responder sees a message only once the requester saw its WRITE complete:
        // flush (poll) before waiting for the receiver.
        realtime::flush_shared(&tx, &clock, cfg.timeout, Polling::Spin).unwrap();
        let (got, rx) = rx_thread.join().unwrap();
        if let Some(p) = poller {
            p.stop().unwrap();
        }
        drop(rx);
        assert_eq!(got.len(), sizes.len() * 3, "{kind}");
        for (i, m) in got.iter().enumerate() {
            let (round, k) = (i / sizes.len(), i % sizes.len());
            assert_eq!(m.packet as usize, i, "{kind}");
            assert_eq!(
                m.data,
                payload(2, (round * 100 + k) as u32, sizes[k]),
                "{kind}"
            );
        }
        assert_eq!(tx.lock().unwrap().in_flight(), 0, "{kind}");
    }
}

#[test]
fn oversized_messages_are_refused() {
    let (_hca, a, b, _t) = live(LinkConfig::hundred_gig(), 16 << 20);
    let cfg = Config {
        blocks: 2,
        payload: 1000,
        path_mtu: 4096,
        timeout: Duration::from_secs(5),
        ring_entries: 0,
        polling: Default::default(),
    };
    let mut rx = StatusByteReceiver::new(&b.p, &cfg).unwrap();
    let tx = StatusByteSender::connect(&a.p, &cfg, rx.endpoint()).unwrap();
    rx.accept(tx.qp()).unwrap();
    let err = tx.send(0, &[0u8; 1001]).unwrap_err();
    assert!(err.to_string().contains("do not fit"), "{err}");
}

/// A receiver handed a sender of another mechanism says so instead of connecting.
#[test]
fn a_receiver_refuses_a_sender_of_another_mechanism() {
    use resex_shim::transport::any::{connect_sender, PendingReceiver};
    let (_hca, a, b, _t) = live(LinkConfig::hundred_gig(), 16 << 20);
    let cfg = Config::default();
    let hp = PendingReceiver::new(Kind::Hipower, &b.p, &cfg).unwrap();
    let sb = PendingReceiver::new(Kind::StatusByte, &b.p, &cfg).unwrap();
    let (_tx, sb_addr) = connect_sender(&a.p, &cfg, sb.endpoint(), Options::default()).unwrap();
    let Err(e) = hp.accept(sb_addr) else {
        panic!("a HiPower receiver accepted a status-byte sender");
    };
    let e = e.to_string();
    assert!(e.contains("a hipower receiver cannot accept"), "{e}");
}
