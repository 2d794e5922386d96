//! One connection, one mechanism, one message size: latency (one message at a time, from the
//! first try to the receiver taking it), then throughput and CPU (messages back to back), in
//! a fresh world each.

use super::actors::{AckThread, Receiver, Sender, Shared, SharedTx};
use super::preset::Testbed;
use super::sim::{run, Actor, SimError, ThreadCpu, World};
use resex_shim::transport::pair::{self, Options, Pair};
use resex_shim::transport::status_byte::Config;
use resex_shim::transport::Kind;
use std::cell::RefCell;
use std::rc::Rc;

/// A connection's figures.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct OneFigures {
    /// Mean latency, us.
    pub latency_us: f64,
    /// Payload MB/s (1e6 bytes/s), back to back.
    pub mbps: f64,
    /// Sender-side CPU per message (sending thread, plus the ACK thread if any), ns.
    pub tx_cpu_ns: f64,
    /// Receiver CPU per message, ns.
    pub rx_cpu_ns: f64,
    /// Sender-side threads' busy-polling time over the run, percent of one CPU (100 per
    /// thread that never sleeps).
    pub tx_busy_pct: f64,
    /// The sliding window's sync: the receiver's ACK to the sender's head moving, mean us
    /// (only for the window).
    pub ack_sync_us: f64,
}

/// Sizes and options of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// The testbed.
    pub bed: Testbed,
    /// Blocks (buffers) on each side.
    pub blocks: u32,
    /// Message size.
    pub size: u64,
    /// Charge copies.
    pub charge_copies: bool,
}

/// Guest RAM for a setup: both sides' blocks and rings, with room.
pub fn ram_for(blocks: u32, size: u64) -> u64 {
    (4 * u64::from(blocks) * (size + 8) + (16 << 20)).next_multiple_of(1 << 20)
}

/// Connects `kind` from guest 0 to guest 1 of a fresh world.
pub fn world_pair(kind: Kind, s: &Setup, guests: u16) -> Result<(World, Pair), SimError> {
    let world = World::new(&s.bed, guests, ram_for(s.blocks, s.size), s.charge_copies)?;
    let cfg = config(s);
    let p = pair::connect(
        kind,
        &world.guests[0],
        &world.guests[1],
        &cfg,
        Options::default(),
    )?;
    Ok((world, p))
}

/// The shim's sizes for a setup.
pub fn config(s: &Setup) -> Config {
    Config {
        blocks: s.blocks,
        payload: s.size,
        path_mtu: s.bed.mtu,
        ..Config::default()
    }
}

pub(crate) struct Run {
    pub(crate) sender: Sender,
    pub(crate) acks: Option<AckThread>,
    pub(crate) receiver: Receiver,
    pub(crate) cpu: Vec<ThreadCpu>,
}

/// `count` messages of one connection, back to back or `one` at a time.
pub(crate) fn one_run(kind: Kind, s: &Setup, count: u64, one: bool) -> Result<Run, SimError> {
    let (world, Pair { tx, rx }) = world_pair(kind, s, 2)?;
    let tx: SharedTx = Rc::new(RefCell::new(tx));
    let shared = Rc::new(Shared::default());
    let size = usize::try_from(s.size).unwrap_or(usize::MAX);
    let mut sender = Sender::new(tx.clone(), shared.clone(), size, count, one);
    let mut receiver = Receiver::new(rx, shared.clone(), count);
    let mut acks = (kind == Kind::SlidingWindow).then(|| AckThread::new(tx, shared));
    let cpu = {
        let mut actors: Vec<&mut dyn Actor> = vec![&mut sender, &mut receiver];
        if let Some(a) = acks.as_mut() {
            actors.push(a);
        }
        run(&world, &mut actors, 0)?
    };
    Ok(Run {
        sender,
        acks,
        receiver,
        cpu,
    })
}

/// Mean of `b[k] - a[k]`, us.
pub fn mean_gap_us(a: &[u64], b: &[u64]) -> f64 {
    let n = a.len().min(b.len());
    if n == 0 {
        return 0.0;
    }
    let sum: u64 = a.iter().zip(b).map(|(x, y)| y.saturating_sub(*x)).sum();
    sum as f64 / n as f64 / 1e3
}

/// Latency over `lat_n` messages, throughput and CPU over `tput_n`.
pub fn measure(kind: Kind, s: &Setup, lat_n: u64, tput_n: u64) -> Result<OneFigures, SimError> {
    let mut f = OneFigures::default();
    let lat = one_run(kind, s, lat_n, true)?;
    f.latency_us = mean_gap_us(&lat.sender.started, &lat.receiver.got);
    if let Some(a) = &lat.acks {
        f.ack_sync_us = mean_gap_us(&lat.receiver.got, &a.acked);
    }
    let t = one_run(kind, s, tput_n, false)?;
    let first = t.sender.started.first().copied().unwrap_or(0);
    let last = t.receiver.got.last().copied().unwrap_or(first);
    let secs = (last.saturating_sub(first)).max(1) as f64 / 1e9;
    f.mbps = (t.receiver.bytes as f64) / secs / 1e6;
    let n = tput_n.max(1) as f64;
    let tx_threads: Vec<&ThreadCpu> = [Some(&t.cpu[0]), t.cpu.get(2)]
        .into_iter()
        .flatten()
        .collect();
    f.tx_cpu_ns = tx_threads.iter().map(|c| c.work_ns).sum::<u64>() as f64 / n;
    f.rx_cpu_ns = t.cpu[1].work_ns as f64 / n;
    let span = t.cpu[0].done_ns.max(1) as f64;
    f.tx_busy_pct = tx_threads.iter().map(|c| c.busy_ns as f64).sum::<f64>() / span * 100.0;
    Ok(f)
}
