//! HiPower's incast experiments: one master and four workers, each on a port of its own;
//! broadcast (the master sends to every worker from one thread) and gather (every worker sends
//! to the master, which serves all four from one thread). Throughput is the master's total;
//! CPU is the master thread's per message; latency is each message's first try to its taking.

use super::actors::{Master, Receiver, Sender, Shared, SharedTx};
use super::one::{config, mean_gap_us, ram_for, Setup};
use super::sim::{run, Actor, SimError, World};
use resex_shim::transport::pair::{self, Options};
use resex_shim::transport::Kind;
use std::cell::RefCell;
use std::rc::Rc;

/// Workers (the paper: four).
pub const WORKERS: u16 = 4;

/// An incast run's figures.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Incast {
    /// The master's total payload MB/s.
    pub mbps: f64,
    /// The master thread's CPU per message, ns.
    pub master_cpu_ns: f64,
    /// Mean message latency under load, us.
    pub latency_us: f64,
}

/// `gather`: workers send `count` messages each to the master; else the master broadcasts
/// `count` messages to each worker.
pub fn incast(kind: Kind, s: &Setup, count: u64, gather: bool) -> Result<Incast, SimError> {
    let world = World::new(
        &s.bed,
        WORKERS + 1,
        ram_for(s.blocks, s.size) * 2,
        s.charge_copies,
    )?;
    let cfg = config(s);
    let size = usize::try_from(s.size).unwrap_or(usize::MAX);
    let mut master = Master {
        senders: Vec::new(),
        receivers: Vec::new(),
    };
    let mut workers_tx = Vec::new();
    let mut workers_rx = Vec::new();
    for w in 1..=usize::from(WORKERS) {
        let (from, to) = if gather { (w, 0) } else { (0, w) };
        let p = pair::connect(
            kind,
            &world.guests[from],
            &world.guests[to],
            &cfg,
            Options::default(),
        )?;
        let shared = Rc::new(Shared::default());
        let tx: SharedTx = Rc::new(RefCell::new(p.tx));
        let sender = Sender::new(tx, shared.clone(), size, count, false);
        let receiver = Receiver::new(p.rx, shared, count);
        if gather {
            workers_tx.push(sender);
            master.receivers.push(receiver);
        } else {
            master.senders.push(sender);
            workers_rx.push(receiver);
        }
    }
    let cpu = {
        let mut actors: Vec<&mut dyn Actor> = vec![&mut master];
        for a in workers_tx.iter_mut() {
            actors.push(a);
        }
        for a in workers_rx.iter_mut() {
            actors.push(a);
        }
        run(&world, &mut actors, 0)?
    };
    let (senders, receivers): (Vec<&Sender>, Vec<&Receiver>) = if gather {
        (
            workers_tx.iter().collect(),
            master.receivers.iter().collect(),
        )
    } else {
        (master.senders.iter().collect(), workers_rx.iter().collect())
    };
    let first = senders
        .iter()
        .filter_map(|s| s.started.first())
        .min()
        .copied()
        .unwrap_or(0);
    let last = receivers
        .iter()
        .filter_map(|r| r.got.last())
        .max()
        .copied()
        .unwrap_or(first);
    let bytes: u64 = receivers.iter().map(|r| r.bytes).sum();
    let secs = last.saturating_sub(first).max(1) as f64 / 1e9;
    let msgs = (count * u64::from(WORKERS)).max(1) as f64;
    let lat: f64 = senders
        .iter()
        .zip(&receivers)
        .map(|(s, r)| mean_gap_us(&s.started, &r.got))
        .sum::<f64>()
        / f64::from(WORKERS);
    Ok(Incast {
        mbps: bytes as f64 / secs / 1e6,
        master_cpu_ns: cpu[0].work_ns as f64 / msgs,
        latency_us: lat,
    })
}
