//! A provider whose memory is not guest-physical (a process inside a VM, whose pages are
//! scattered over guest RAM): the device and the monitor see only guest-physical addresses,
//! the shim only its own. Data arrives intact and the monitor, reading guest RAM, counts exactly
//! what softhca executed.
#![allow(clippy::cast_possible_truncation)]

mod common;

use resex_guestmem::{GuestAddress, GuestMemory, MemError, VecMemory};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::VmMonitor;
use resex_proto::{Registration, REGISTRATION_VERSION};
use resex_shim::transport::status_byte::{Config, StatusByteReceiver, StatusByteSender};
use resex_shim::SoftProvider;
use resex_softhca::{Clock, LinkConfig, MonotonicClock, PortId, SoftHca};
use std::sync::Arc;
use std::time::Duration;

const PAGE: u64 = 4096;

/// A process's view of guest RAM: its page i is guest page `map[i]`.
struct Scattered {
    ram: Arc<VecMemory>,
    map: Vec<u64>,
}

impl Scattered {
    /// Calls `f(guest address, range of the access)` for each page-sized piece of an access.
    fn pieces(
        &self,
        addr: GuestAddress,
        len: usize,
        mut f: impl FnMut(GuestAddress, std::ops::Range<usize>) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let mut done = 0;
        while done < len {
            let a = addr.0 + done as u64;
            let page = *self
                .map
                .get((a / PAGE) as usize)
                .ok_or(MemError::OutOfRange {
                    addr,
                    len,
                    size: self.size(),
                })?;
            let n = ((PAGE - a % PAGE) as usize).min(len - done);
            f(GuestAddress(page * PAGE + a % PAGE), done..done + n)?;
            done += n;
        }
        Ok(())
    }
}

impl GuestMemory for Scattered {
    fn size(&self) -> u64 {
        self.map.len() as u64 * PAGE
    }
    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        let len = buf.len();
        self.pieces(addr, len, |g, r| self.ram.read(g, &mut buf[r]))
    }
    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        self.pieces(addr, data.len(), |g, r| self.ram.write(g, &data[r]))
    }
}

#[test]
fn a_scattered_process_view_works_through_guest_physical_addresses() {
    let hca = SoftHca::new(LinkConfig::resex_testbed(), 2);
    // 24 MiB of guest RAM; the process sees 16 MiB of it, its pages in a shuffled order.
    let ram = Arc::new(VecMemory::new(24 << 20));
    let mut pages: Vec<u64> = (0..(24u64 << 20) / PAGE).collect();
    fastrand::Rng::with_seed(9).shuffle(&mut pages);
    pages.truncate(((16u64 << 20) / PAGE) as usize);
    let view = Arc::new(Scattered {
        ram: ram.clone(),
        map: pages.clone(),
    });
    let device_mem: Arc<dyn GuestMemory> = ram.clone();
    let port = hca.add_guest(device_mem, PortId(0));
    let phys_map = pages.clone();
    let a = SoftProvider::with_phys(
        view,
        1 << 20,
        15 << 20,
        Arc::new(port),
        Arc::new(move |x: u64| {
            phys_map
                .get((x / PAGE) as usize)
                .map(|p| p * PAGE + x % PAGE)
        }),
    )
    .unwrap();
    let b = common::guest(&hca, 16 << 20, 1);
    let _t = hca.spawn(
        Arc::new(MonotonicClock::new()) as Arc<dyn Clock>,
        Duration::from_micros(20),
    );
    let cfg = Config {
        blocks: 3,
        payload: 64 << 10,
        path_mtu: 1024,
        timeout: Duration::from_secs(30),
        ring_entries: 1024,
        polling: Default::default(),
    };
    let mut rx = StatusByteReceiver::new(&b.p, &cfg).unwrap();
    let tx = StatusByteSender::connect(&a, &cfg, rx.endpoint()).unwrap();
    rx.accept(tx.qp()).unwrap();
    let qpn = tx.qp().qpn;
    // The registration names guest-physical pages only, all inside the 24 MiB.
    let reg = Registration {
        rings: Vec::new(),
        version: REGISTRATION_VERSION,
        vm: Some("scattered".into()),
        path_mtu: 1024,
        qps: vec![a.registration(qpn).unwrap()],
        mailbox: None,
    };
    let layout = validate(&reg, ram.size(), &Limits::default()).unwrap();
    let mut monitor = VmMonitor::new(layout);
    const N: u32 = 60;
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        for _ in 0..N {
            got.push(rx.recv(Duration::from_secs(30)).unwrap());
        }
        got
    });
    let mut sent = Vec::new();
    for k in 0..N {
        let msg: Vec<u8> = (0..(k as usize * 997 % 60_000 + 1))
            .map(|i| (i as u32 ^ k) as u8)
            .collect();
        tx.send(0, &msg).unwrap();
        sent.push(msg);
        monitor.scan(&*ram, 1 << 20);
    }
    let got = receiver.join().unwrap();
    assert_eq!(got.len(), sent.len());
    for (g, s) in got.iter().zip(&sent) {
        assert_eq!(&g.data, s, "intact across scattered pages");
    }
    tx.flush().unwrap();
    for _ in 0..4 {
        monitor.scan(&*ram, 1 << 20);
    }
    let (truth, seen) = (hca.stats(qpn).unwrap(), monitor.total());
    assert_eq!(seen.wqes, truth.wqes);
    assert_eq!(seen.tx_bytes, truth.tx_bytes);
    assert_eq!(seen.tx_packets, truth.tx_packets);
    assert_eq!((seen.overruns, seen.anomalies, seen.errors), (0, 0, 0));
    assert!(truth.wqes >= u64::from(N));
}
