//! Shared test harness: a synthetic guest plus its monitor, driven by a program of operations.
#![allow(dead_code, missing_docs, clippy::cast_possible_truncation)]

use proptest::prelude::*;
use resex_guestmem::VecMemory;
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::synth::{SynthConfig, SynthGuest, Wr};
use resex_ibmon::{Counters, VmMonitor};
use resex_mlx5::consts::send_op;
use resex_mlx5::CqeSize;

#[derive(Clone, Debug)]
pub enum Op {
    Post { qp: usize, wr: Wr },
    Doorbell,
    Complete { qp: usize, n: usize, fail: bool },
    Receive { qp: usize, bytes: u32 },
    Poll { cq: usize, n: usize },
    Scan { budget: u32 },
}

pub fn wr_strategy() -> impl Strategy<Value = Wr> {
    let opcode = prop_oneof![
        4 => Just(send_op::SEND),
        1 => Just(send_op::SEND_IMM),
        4 => Just(send_op::RDMA_WRITE),
        1 => Just(send_op::RDMA_WRITE_IMM),
        3 => Just(send_op::RDMA_READ),
        1 => Just(send_op::ATOMIC_CS),
        1 => Just(send_op::ATOMIC_FA),
        1 => Just(send_op::NOP),
    ];
    let size = prop_oneof![
        3 => 0u32..=64,
        3 => 0u32..=5000,
        2 => 0u32..=(8 << 20),
        1 => Just(0u32),
    ];
    (
        opcode,
        proptest::collection::vec(size, 0..8),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.35),
    )
        .prop_map(|(opcode, sges, inline, signaled)| {
            let sges = if inline {
                sges.into_iter().map(|s| s % 200).collect()
            } else {
                sges
            };
            Wr {
                opcode,
                sges,
                inline,
                signaled,
            }
        })
}

pub fn op_strategy(qps: usize, cqs: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..qps, wr_strategy()).prop_map(|(qp, wr)| Op::Post { qp, wr }),
        2 => Just(Op::Doorbell),
        4 => (0..qps, 1usize..20, prop::bool::weighted(0.03)).prop_map(|(qp, n, fail)| Op::Complete { qp, n, fail }),
        2 => (0..qps, 0u32..100_000).prop_map(|(qp, bytes)| Op::Receive { qp, bytes }),
        4 => (0..cqs, 1usize..20).prop_map(|(cq, n)| Op::Poll { cq, n }),
        3 => prop_oneof![1u32..4, 1u32..64, Just(1_000_000)].prop_map(|budget| Op::Scan { budget }),
    ]
}

pub fn config_strategy() -> impl Strategy<Value = SynthConfig> {
    (
        1usize..4,
        prop::sample::select(vec![1u32, 2, 4, 8, 16, 64, 256]),
        prop::sample::select(vec![2u32, 4, 8, 64]),
        prop::bool::ANY,
        prop::sample::select(vec![256u32, 1024, 4096]),
        prop::bool::ANY,
        prop_oneof![Just(0u32), Just(65_530), any::<u32>()],
        prop_oneof![Just(0u32), Just((1 << 24) - 3), 0u32..(1 << 24)],
        prop_oneof![Just(0u64), (0u64..64).prop_map(|k| k * 64)],
        any::<u64>(),
    )
        .prop_map(
            |(
                qps,
                wqe_cnt,
                cqe_cnt,
                big,
                path_mtu,
                shared_cq,
                sq_start,
                cq_start,
                sq_offset,
                seed,
            )| {
                SynthConfig {
                    qps,
                    wqe_cnt,
                    cqe_cnt,
                    cqe_size: if big { CqeSize::B128 } else { CqeSize::B64 },
                    path_mtu,
                    shared_cq,
                    sq_start,
                    cq_start,
                    sq_offset,
                    seed,
                }
            },
        )
}

impl Op {
    /// The same operation with its QP and CQ numbers folded into the guest's actual counts.
    pub fn fit(&self, qps: usize, cqs: usize) -> Op {
        match self.clone() {
            Op::Post { qp, wr } => Op::Post { qp: qp % qps, wr },
            Op::Complete { qp, n, fail } => Op::Complete {
                qp: qp % qps,
                n,
                fail,
            },
            Op::Receive { qp, bytes } => Op::Receive {
                qp: qp % qps,
                bytes,
            },
            Op::Poll { cq, n } => Op::Poll { cq: cq % cqs, n },
            other => other,
        }
    }
}

/// A guest, its memory and a monitor built from the guest's registration document.
pub struct Rig {
    pub mem: VecMemory,
    pub guest: SynthGuest,
    pub mon: VmMonitor,
    /// Guest CQ i -> monitor CQ index.
    pub cq_map: Vec<usize>,
}

impl Rig {
    pub fn new(cfg: &SynthConfig) -> Rig {
        let mem = VecMemory::new(4 << 20);
        let guest = SynthGuest::new(&mem, cfg).expect("guest fits");
        let json = guest.registration().to_json();
        let reg = resex_proto::Registration::parse(json.as_bytes()).unwrap();
        let layout = validate(&reg, 4 << 20, &Limits::default()).expect("valid registration");
        let mon = VmMonitor::new(layout);
        let cq_map = (0..guest.cq_count())
            .map(|i| {
                mon.layout()
                    .cqs
                    .iter()
                    .position(|c| c.dbrec.0 == guest.cq_dbrec(i))
                    .unwrap()
            })
            .collect();
        Rig {
            mem,
            guest,
            mon,
            cq_map,
        }
    }

    /// The furthest the guest may poll CQ `cq` without getting ahead of the monitor.
    pub fn poll_limit(&self, cq: usize) -> u32 {
        self.mon.cq_settled_index(self.cq_map[cq])
    }

    /// Runs one operation. With `fast_monitor`, the guest never polls past what the monitor
    /// has read (the monitor keeps up, so counts are exact).
    pub fn apply(&mut self, op: &Op, fast_monitor: bool) {
        match op {
            Op::Post { qp, wr } => {
                self.guest.post(&self.mem, *qp, wr);
            }
            Op::Doorbell => self.guest.ring_doorbells(&self.mem),
            Op::Complete { qp, n, fail } => {
                self.guest.complete(&self.mem, *qp, *n, *fail);
            }
            Op::Receive { qp, bytes } => {
                self.guest.receive(&self.mem, *qp, *bytes);
            }
            Op::Poll { cq, n } => {
                let limit = fast_monitor.then(|| self.poll_limit(*cq));
                self.guest.poll(&self.mem, *cq, *n, limit);
            }
            Op::Scan { budget } => {
                self.mon.scan(&self.mem, *budget);
            }
        }
    }

    /// Completes everything (a final signalled NOP where needed), then polls and scans until
    /// nothing is left.
    pub fn drain(&mut self) {
        for qp in 0..self.guest.qp_count() {
            for _ in 0..10_000 {
                if !self.guest.has_unreported(qp) {
                    break;
                }
                let nop = Wr {
                    opcode: send_op::NOP,
                    sges: vec![],
                    inline: false,
                    signaled: true,
                };
                self.guest.post(&self.mem, qp, &nop);
                self.guest.complete(&self.mem, qp, usize::MAX, false);
                self.mon.scan(&self.mem, 1_000_000);
                for cq in 0..self.guest.cq_count() {
                    let limit = self.poll_limit(cq);
                    self.guest.poll(&self.mem, cq, usize::MAX, Some(limit));
                }
            }
            assert!(!self.guest.has_unreported(qp), "drain made no progress");
        }
        for _ in 0..4 {
            self.mon.scan(&self.mem, 1_000_000);
        }
    }
}

/// Every field of `a` is at most the same field of `b` (counts never invented).
pub fn at_most(a: &Counters, b: &Counters) -> bool {
    a.wqes <= b.wqes
        && a.completions <= b.completions
        && a.tx_bytes <= b.tx_bytes
        && a.tx_packets <= b.tx_packets
        && a.rx_read_bytes <= b.rx_read_bytes
        && a.rx_read_packets <= b.rx_read_packets
        && a.recv_bytes <= b.recv_bytes
        && a.mtus <= b.mtus
        && a.errors <= b.errors
}
