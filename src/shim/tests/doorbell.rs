//! softhca on the real clock waits for its guests' doorbells: a guest's provider asks for one at
//! its first QP and rings it after each doorbell record write; the HCA then costs nothing while
//! idle and still serves a guest that has no doorbell (it polls that guest's records).

#![allow(clippy::cast_possible_truncation)]

mod common;

use common::{guest, live, Guest};
use resex_proto::hca::{ControlError, CreateCq, CreateQp, HcaControl, MrKeys, QpAddr, RegMr};
use resex_shim::transport::status_byte::{Config, StatusByteReceiver, StatusByteSender};
use resex_shim::SoftProvider;
use resex_softhca::{Clock, GuestPort, LinkConfig, MonotonicClock, SoftHca};
use std::sync::Arc;
use std::time::Duration;

/// Sends `n` 4 KiB messages from `a` to `b` and receives them all.
fn exchange(a: &SoftProvider, b: &SoftProvider, n: u32) {
    let cfg = Config {
        blocks: 3,
        payload: 64 << 10,
        path_mtu: 1024,
        timeout: Duration::from_secs(20),
        ring_entries: 256,
        polling: Default::default(),
    };
    let mut rx = StatusByteReceiver::new(b, &cfg).unwrap();
    let tx = StatusByteSender::connect(a, &cfg, rx.endpoint()).unwrap();
    rx.accept(tx.qp()).unwrap();
    let receiver = std::thread::spawn(move || {
        for k in 0..n {
            let got = rx.recv(Duration::from_secs(20)).unwrap();
            assert_eq!(got.data, vec![k as u8; 4096], "message {k}");
        }
    });
    for k in 0..n {
        tx.send(0, &[k as u8; 4096]).unwrap();
    }
    receiver.join().unwrap();
    tx.flush().unwrap();
}

#[test]
fn guests_that_ring_are_served_and_an_idle_port_sleeps() {
    let (_hca, a, b, t) = live(LinkConfig::resex_testbed(), 16 << 20);
    exchange(&a.p, &b.p, 200);
    let before = t.polls();
    std::thread::sleep(Duration::from_millis(300));
    let polls = t.polls() - before;
    // Every guest rings: the idle thread wakes every 10 ms (timer polling: every 2-20 us).
    assert!(polls <= 60, "{polls} polls in 300 ms of an idle port");
    assert!(t.cpu_ns().is_some());
}

/// A guest's control path that has no doorbell (as a VM behind a virtio-serial port).
struct NoBell(GuestPort);

impl HcaControl for NoBell {
    fn create_cq(&self, req: &CreateCq) -> Result<u32, ControlError> {
        self.0.create_cq(req)
    }
    fn create_qp(&self, req: &CreateQp) -> Result<u32, ControlError> {
        self.0.create_qp(req)
    }
    fn connect_qp(&self, qpn: u32, remote: QpAddr) -> Result<(), ControlError> {
        self.0.connect_qp(qpn, remote)
    }
    fn destroy_qp(&self, qpn: u32) -> Result<(), ControlError> {
        self.0.destroy_qp(qpn)
    }
    fn reg_mr(&self, req: &RegMr) -> Result<MrKeys, ControlError> {
        self.0.reg_mr(req)
    }
    fn dereg_mr(&self, lkey: u32) -> Result<(), ControlError> {
        self.0.dereg_mr(lkey)
    }
}

#[test]
fn a_guest_without_a_doorbell_is_polled_and_served() {
    let hca = SoftHca::new(LinkConfig::resex_testbed(), 2);
    let _t = hca.spawn(
        Arc::new(MonotonicClock::new()) as Arc<dyn Clock>,
        Duration::from_micros(20),
    );
    let ram = 16usize << 20;
    let a: Guest = guest(&hca, ram, 0);
    let plain = Arc::new(NoBell(a.port.clone()));
    let mem: Arc<dyn resex_guestmem::GuestMemory> = a.mem.clone();
    let silent = SoftProvider::new(mem, 1 << 20, ram as u64, plain).unwrap();
    let b = guest(&hca, ram, 1);
    // Both ways: the silent guest sends, then receives from a ringing one.
    exchange(&silent, &b.p, 100);
    exchange(&b.p, &silent, 100);
}
