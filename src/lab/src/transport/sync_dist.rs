//! Fig. 11 of the status-byte paper: each synchronisation's time over a run of messages sent
//! back to back (3 blocks, the paper's setting), per mechanism, and its distribution.
//!
//! - status-byte: from posting the RDMA READ of the receiver's status bytes to seeing its
//!   completion (the sender's counters, read after every step of the sending thread);
//! - sliding window: from the receiver taking a block (and sending its ACK) to the sender's
//!   ACK thread moving the head past it.
//!
//! The model has no noise of its own: what spreads the figures is the port and the threads,
//! shared with the data (an ACK or a READ waits behind WRITEs already on the wire).

use super::actors::{Receiver, Shared};
use super::one::{config, one_run, ram_for, Setup};
use super::sim::{run, Actor, SimError, Step, World};
use resex_shim::transport::status_byte::{SbSender, StatusByteReceiver};
use resex_shim::transport::{BlockSender, Kind, Work};
use serde::Serialize;
use std::rc::Rc;

/// A distribution of synchronisation times, us.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Dist {
    /// Synchronisations.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Dist {
    /// The distribution of `v` (empty: all zero).
    pub fn of(v: &[f64]) -> Dist {
        if v.is_empty() {
            return Dist::default();
        }
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        // A rank of at most n (q <= 1) fits a usize.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = |q: f64| s[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let mean = s.iter().sum::<f64>() / n as f64;
        let var = s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        Dist {
            n,
            mean,
            stddev: var.sqrt(),
            min: s[0],
            p50: rank(0.5),
            p99: rank(0.99),
            max: s[n - 1],
        }
    }
}

/// A status-byte sender of `count` messages back to back that notes each synchronisation's
/// time from its counters.
struct SbStream {
    tx: SbSender,
    data: Vec<u8>,
    count: u64,
    sent: u64,
    seen: (u64, u64),
    samples: Vec<f64>,
    shared: Rc<Shared>,
}

impl SbStream {
    fn note(&mut self) {
        let st = self.tx.stats();
        let (n, ns) = (st.syncs - self.seen.0, st.sync_ns - self.seen.1);
        if n > 0 {
            // Several in one step (it does not happen with one READ in flight) share it.
            for _ in 0..n {
                self.samples.push(ns as f64 / n as f64 / 1e3);
            }
        }
        self.seen = (st.syncs, st.sync_ns);
    }
}

impl Actor for SbStream {
    fn step(&mut self, now: u64) -> Result<(Step, Work), SimError> {
        let step = if self.sent == self.count {
            let changed = self.tx.poll(now)?;
            if self.tx.in_flight() == 0 {
                self.shared.sender_done.set(true);
                Step::Done
            } else if changed {
                Step::Progress
            } else {
                Step::Wait
            }
        } else if self.tx.try_send(now, 0, &self.data)?.is_some() {
            self.sent += 1;
            Step::Progress
        } else {
            self.tx.wake_at().map_or(Step::Wait, Step::WaitUntil)
        };
        self.note();
        Ok((step, self.tx.take_work()))
    }
}

/// Each synchronisation's time, us, in order, over `count` messages of `s.size` bytes sent
/// back to back.
pub fn sync_series(kind: Kind, s: &Setup, count: u64) -> Result<Vec<f64>, SimError> {
    match kind {
        Kind::StatusByte => {
            let world = World::new(&s.bed, 2, ram_for(s.blocks, s.size), s.charge_copies)?;
            let cfg = config(s);
            let mut rx = StatusByteReceiver::new(&world.guests[1], &cfg)?;
            let tx = SbSender::connect(&world.guests[0], &cfg, rx.endpoint())?;
            rx.accept(tx.qp())?;
            let size = usize::try_from(s.size).unwrap_or(usize::MAX);
            let mut sender = SbStream {
                tx,
                data: (0..size)
                    .map(|i| u8::try_from(i % 251).unwrap_or(0))
                    .collect(),
                count,
                sent: 0,
                seen: (0, 0),
                samples: Vec::new(),
                shared: Rc::new(Shared::default()),
            };
            let mut receiver = Receiver::new(Box::new(rx), sender.shared.clone(), count);
            run(&world, &mut [&mut sender, &mut receiver], 0)?;
            Ok(sender.samples)
        }
        Kind::SlidingWindow => {
            let r = one_run(kind, s, count, false)?;
            let acked = r.acks.map(|a| a.acked).unwrap_or_default();
            Ok(r.receiver
                .got
                .iter()
                .zip(&acked)
                .map(|(g, a)| a.saturating_sub(*g) as f64 / 1e3)
                .collect())
        }
        kind => Err(SimError::NotCompared { kind }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_distribution_by_nearest_rank() {
        let d = Dist::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((d.n, d.min, d.p50, d.p99, d.max), (4, 1.0, 2.0, 4.0, 4.0));
        assert!((d.mean - 2.5).abs() < 1e-12);
        assert!((d.stddev - 1.25f64.sqrt()).abs() < 1e-12);
        assert_eq!(Dist::of(&[]), Dist::default());
    }

    #[test]
    fn fig_11_refuses_a_transport_it_does_not_compare() {
        let s = Setup {
            bed: crate::transport::preset::STATUS_BYTE,
            blocks: 3,
            size: 4096,
            charge_copies: false,
        };
        let e = sync_series(Kind::Cpwr, &s, 1).unwrap_err();
        assert!(
            matches!(e, SimError::NotCompared { kind: Kind::Cpwr }),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "Fig. 11 compares status-byte and the sliding window, not cpwr"
        );
    }
}
