//! Two guests on one software HCA, on two link ports.
#![allow(dead_code)]

use resex_guestmem::{GuestMemory, VecMemory};
use resex_shim::{CompletionQueue, SoftProvider, Wc};
use resex_softhca::{
    Clock, GuestPort, HcaThread, LinkConfig, MonotonicClock, PortId, SoftHca, VirtualClock,
};
use std::sync::Arc;
use std::time::Duration;

pub struct Guest {
    pub mem: Arc<VecMemory>,
    pub port: GuestPort,
    pub p: SoftProvider,
}

pub struct World {
    pub hca: SoftHca,
    pub clock: Arc<VirtualClock>,
    pub a: Guest,
    pub b: Guest,
}

pub fn guest(hca: &SoftHca, ram: usize, port: u16) -> Guest {
    let mem = Arc::new(VecMemory::new(ram));
    let dynmem: Arc<dyn GuestMemory> = mem.clone();
    let gp = hca.add_guest(dynmem.clone(), PortId(port));
    let p = SoftProvider::new(dynmem, 1 << 20, ram as u64, Arc::new(gp.clone())).unwrap();
    Guest { mem, port: gp, p }
}

/// A world in virtual time: the test drives the HCA.
pub fn world(link: LinkConfig, ram: usize) -> World {
    let hca = SoftHca::new(link, 2);
    let a = guest(&hca, ram, 0);
    let b = guest(&hca, ram, 1);
    World {
        hca,
        clock: Arc::new(VirtualClock::new()),
        a,
        b,
    }
}

impl World {
    /// Advances virtual time in 1 us steps (polling the HCA) until `cq` yields `n`
    /// completions or 100 ms pass.
    pub fn wait(&self, cq: &mut dyn CompletionQueue, n: usize) -> Vec<Wc> {
        let mut out = Vec::new();
        for _ in 0..100_000 {
            self.clock.advance(1_000);
            self.hca.poll(self.clock.now_ns());
            let want = n - out.len();
            cq.poll(&mut out, want).unwrap();
            if out.len() >= n {
                return out;
            }
        }
        panic!("only {} of {n} completions: {out:?}", out.len());
    }

    /// Runs the HCA for `ns` of virtual time.
    pub fn run(&self, ns: u64) {
        for _ in 0..ns / 1_000 {
            self.clock.advance(1_000);
            self.hca.poll(self.clock.now_ns());
        }
    }
}

/// A world on the real clock with the HCA on its own thread.
pub fn live(link: LinkConfig, ram: usize) -> (SoftHca, Guest, Guest, HcaThread) {
    let hca = SoftHca::new(link, 2);
    let a = guest(&hca, ram, 0);
    let b = guest(&hca, ram, 1);
    let t = hca.spawn(
        Arc::new(MonotonicClock::new()) as Arc<dyn Clock>,
        Duration::from_micros(20),
    );
    (hca, a, b, t)
}
