//! The status-byte paper's experiments beyond one connection's latency and throughput:
//! synchronisation time against the number of blocks (Fig. 10) and a receiver holding a block
//! (Fig. 18).

use super::actors::{Sender, Shared, SharedTx};
use super::one::{config, measure, ram_for, Setup};
use super::sim::{run, Actor, SimError, Step, World};
use resex_shim::transport::status_byte::{SbSender, StatusByteReceiver, FREE};
use resex_shim::transport::window::{WindowReceiver, WindowSender};
use resex_shim::transport::{BlockReceiver, BlockSender, Kind, Work};
use std::cell::RefCell;
use std::rc::Rc;

/// Posts `n` synchronisations one after another.
struct Syncer {
    tx: SbSender,
    left: u32,
}

impl Actor for Syncer {
    fn step(&mut self, now: u64) -> Result<(Step, Work), SimError> {
        self.tx.reap(now)?;
        if !self.tx.syncing() {
            if self.left == 0 {
                return Ok((Step::Done, self.tx.take_work()));
            }
            self.left -= 1;
            self.tx.start_sync(now)?;
            return Ok((Step::Progress, self.tx.take_work()));
        }
        Ok((Step::Wait, self.tx.take_work()))
    }
}

/// Status-byte synchronisation: mean time from posting the RDMA READ of `blocks` status bytes
/// to seeing its completion, us.
pub fn status_byte_sync_us(s: &Setup, rounds: u32) -> Result<f64, SimError> {
    let world = World::new(&s.bed, 2, ram_for(s.blocks, s.size), s.charge_copies)?;
    let cfg = config(s);
    let mut rx = StatusByteReceiver::new(&world.guests[1], &cfg)?;
    let tx = SbSender::connect(&world.guests[0], &cfg, rx.endpoint())?;
    rx.accept(tx.qp())?;
    let mut syncer = Syncer { tx, left: rounds };
    run(&world, &mut [&mut syncer], 0)?;
    let st = syncer.tx.stats();
    Ok(st.sync_ns as f64 / st.syncs.max(1) as f64 / 1e3)
}

/// Sliding-window synchronisation: the receiver's ACK until the sender's ACK thread moves the
/// head, mean us over one-at-a-time messages.
pub fn window_sync_us(s: &Setup, rounds: u64) -> Result<f64, SimError> {
    Ok(measure(Kind::SlidingWindow, s, rounds, 1)?.ack_sync_us)
}

/// The hold schedule of Fig. 18 (ns).
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    /// The receiver starts holding a block.
    pub from_ns: u64,
    /// It lets it go.
    pub to_ns: u64,
    /// The run ends.
    pub end_ns: u64,
    /// The block held (the paper: the third).
    pub block: u32,
}

enum Held {
    Sb(StatusByteReceiver),
    Sw(WindowReceiver),
}

/// A receiver that holds a block from `from_ns` to `to_ns`; records when each message came.
struct HoldingReceiver {
    held: Held,
    hold: Hold,
    phase: u8,
    shared: Rc<Shared>,
    got: Vec<u64>,
}

impl HoldingReceiver {
    fn act(&mut self, now: u64) -> Result<(), SimError> {
        match (&mut self.held, self.phase) {
            // The block is held once it is free (taken): its status becomes unavailable.
            (Held::Sb(r), 0) if now >= self.hold.from_ns && r.status(self.hold.block)? == FREE => {
                r.mark_unavailable(self.hold.block)?;
                self.phase = 1;
            }
            (Held::Sb(r), 1) if now >= self.hold.to_ns => {
                r.mark_available(self.hold.block)?;
                self.phase = 2;
            }
            (Held::Sw(r), 0) if now >= self.hold.from_ns => {
                r.hold();
                self.phase = 1;
            }
            (Held::Sw(r), 1) if now >= self.hold.to_ns => {
                r.release()?;
                self.phase = 2;
            }
            _ => {}
        }
        Ok(())
    }
}

impl Actor for HoldingReceiver {
    fn step(&mut self, now: u64) -> Result<(Step, Work), SimError> {
        self.act(now)?;
        if self.shared.sender_done.get() {
            return Ok((Step::Done, Work::default()));
        }
        let (m, w) = match &mut self.held {
            Held::Sb(r) => (
                BlockReceiver::try_recv(r, now)?,
                BlockReceiver::take_work(r),
            ),
            Held::Sw(r) => (
                BlockReceiver::try_recv(r, now)?,
                BlockReceiver::take_work(r),
            ),
        };
        if m.is_some() {
            self.got.push(now);
            self.shared.received.set(self.shared.received.get() + 1);
            return Ok((Step::Progress, w));
        }
        // Wake for the schedule even when nothing arrives.
        let st = match self.phase {
            0 => Step::WaitUntil(self.hold.from_ns.max(now + 1)),
            1 => Step::WaitUntil(self.hold.to_ns.max(now + 1)),
            _ => Step::Wait,
        };
        Ok((st, w))
    }
}

/// Fig. 18: MB/s received per `bin_ns` while the receiver holds a block from `hold.from_ns` to
/// `hold.to_ns`, sending `s.size` messages back to back until `hold.end_ns`.
pub fn hold_series(kind: Kind, s: &Setup, hold: Hold, bin_ns: u64) -> Result<Vec<f64>, SimError> {
    let world = World::new(&s.bed, 2, ram_for(s.blocks, s.size), s.charge_copies)?;
    let cfg = config(s);
    let (tx, held): (Box<dyn BlockSender>, Held) = match kind {
        Kind::StatusByte => {
            let mut rx = StatusByteReceiver::new(&world.guests[1], &cfg)?;
            let tx = SbSender::connect(&world.guests[0], &cfg, rx.endpoint())?;
            rx.accept(tx.qp())?;
            (Box::new(tx), Held::Sb(rx))
        }
        _ => {
            let mut rx = WindowReceiver::new(&world.guests[1], &cfg)?;
            let tx = WindowSender::connect(&world.guests[0], &cfg, rx.endpoint(), true)?;
            rx.accept(tx.qp())?;
            (Box::new(tx), Held::Sw(rx))
        }
    };
    let tx: SharedTx = Rc::new(RefCell::new(tx));
    let shared = Rc::new(Shared::default());
    let size = usize::try_from(s.size).unwrap_or(usize::MAX);
    let mut sender = Sender::new(tx.clone(), shared.clone(), size, u64::MAX, false);
    sender.until_ns = hold.end_ns;
    let mut rx = HoldingReceiver {
        held,
        hold,
        phase: 0,
        shared: shared.clone(),
        got: Vec::new(),
    };
    let mut acks = super::actors::AckThread::new(tx, shared);
    {
        let mut actors: Vec<&mut dyn Actor> = vec![&mut sender, &mut rx];
        if kind == Kind::SlidingWindow {
            actors.push(&mut acks);
        }
        run(&world, &mut actors, 0)?;
    }
    let bins = usize::try_from(hold.end_ns / bin_ns.max(1)).unwrap_or(0);
    let mut out = vec![0.0; bins];
    for t in &rx.got {
        if let Some(b) = usize::try_from(t / bin_ns.max(1))
            .ok()
            .and_then(|i| out.get_mut(i))
        {
            *b += s.size as f64;
        }
    }
    let secs = bin_ns as f64 / 1e9;
    Ok(out.into_iter().map(|b| b / secs / 1e6).collect())
}
