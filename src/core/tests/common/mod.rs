//! A guest for the core's tests: a synthetic guest's rings (real WQEs and CQEs, with ground
//! truth) in the first MiB of its RAM, a latency mailbox above them.
#![allow(dead_code, missing_docs, clippy::cast_possible_truncation)]

use resex_common::LatencySummary;
use resex_guestmem::{GuestAddress, GuestMemory, MemError, VecMemory};
use resex_ibmon::registry::{validate, Layout, Limits};
use resex_ibmon::synth::{SynthConfig, SynthGuest, Wr};
use resex_ibmon::Counters;
use resex_mlx5::consts::send_op;
use resex_proto::Registration;
use resex_shim::mailbox::Mailbox;
use std::sync::Arc;

/// The synthetic guest's share of RAM (it scatters its rings over all of it).
pub const SYNTH_RAM: u64 = 1 << 20;
/// Where the mailbox is.
pub const MAILBOX: u64 = SYNTH_RAM + 0x1000;
/// RAM in all.
pub const RAM: u64 = 2 << 20;

/// The first `size` bytes of another memory.
pub struct Prefix {
    pub inner: Arc<VecMemory>,
    pub size: u64,
}

impl GuestMemory for Prefix {
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
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        if addr
            .0
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > self.size)
        {
            return Err(MemError::OutOfRange {
                addr,
                len: data.len(),
                size: self.size,
            });
        }
        self.inner.write(addr, data)
    }
}

pub struct Guest {
    pub mem: Arc<VecMemory>,
    pub view: Prefix,
    pub synth: SynthGuest,
    pub mailbox: Mailbox,
}

pub fn send(len: u32, signaled: bool) -> Wr {
    Wr {
        opcode: send_op::RDMA_WRITE,
        sges: vec![len],
        inline: false,
        signaled,
    }
}

impl Guest {
    pub fn new(seed: u64) -> Guest {
        let mem = Arc::new(VecMemory::new(RAM as usize));
        let view = Prefix {
            inner: mem.clone(),
            size: SYNTH_RAM,
        };
        let cfg = SynthConfig {
            qps: 2,
            shared_cq: true,
            wqe_cnt: 64,
            cqe_cnt: 64,
            seed,
            ..SynthConfig::default()
        };
        let synth = SynthGuest::new(&view, &cfg).unwrap();
        let mailbox = Mailbox::new(mem.clone(), MAILBOX, 8, 128).unwrap();
        Guest {
            mem,
            view,
            synth,
            mailbox,
        }
    }

    pub fn registration(&self) -> Registration {
        let mut r = self.synth.registration().clone();
        r.mailbox = Some(self.mailbox.registration());
        r
    }

    pub fn layout(&self) -> Layout {
        validate(&self.registration(), RAM, &Limits::default()).unwrap()
    }

    /// Posts `n` writes of `len` bytes on QP `qp` (the last signalled), completes and polls
    /// them: one CQE.
    pub fn work(&mut self, qp: usize, n: usize, len: u32) {
        for k in 0..n {
            assert!(self.synth.post(&self.view, qp, &send(len, k + 1 == n)));
        }
        self.synth.ring_doorbells(&self.view);
        self.synth.complete(&self.view, qp, usize::MAX, false);
        for cq in 0..self.synth.cq_count() {
            self.synth.poll(&self.view, cq, usize::MAX, None);
        }
    }

    pub fn truth(&self) -> Counters {
        let mut t = Counters::default();
        for c in self.synth.truth() {
            t += *c;
        }
        t
    }

    pub fn report(&mut self, count: u64, mean_ns: u64) {
        let s = LatencySummary {
            count,
            mean_ns: mean_ns as f64,
            stddev_ns: 0.0,
            min_ns: mean_ns,
            max_ns: mean_ns,
            p50_ns: mean_ns,
            p99_ns: mean_ns,
            p999_ns: mean_ns,
        };
        assert!(self.mailbox.report(&s, 10_000_000).unwrap());
    }
}
