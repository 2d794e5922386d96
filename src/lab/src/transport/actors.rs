//! The guest threads of the transport experiments: a sender (back to back, or one message at
//! a time), the sliding window's ACK thread, a receiver, and a master that serves several
//! connections from one thread (HiPower's broadcast and gather). Each records when things
//! happened, in virtual ns.

use super::sim::{Actor, SimError, Step};
use resex_shim::transport::{BlockReceiver, BlockSender, Kind, Work};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// A sender shared by its sending thread and its ACK thread.
pub type SharedTx = Rc<RefCell<Box<dyn BlockSender>>>;

/// Counts shared between threads of one connection.
#[derive(Debug, Default)]
pub struct Shared {
    /// Messages the receiver took.
    pub received: Cell<u64>,
    /// The sender sent everything and saw it all confirmed.
    pub sender_done: Cell<bool>,
}

/// Sends `count` messages of `size` bytes; with `one_at_a_time`, each only after the receiver
/// took the previous one (latency); then waits until nothing is in flight and the end (if any)
/// is signalled.
pub struct Sender {
    tx: SharedTx,
    shared: Rc<Shared>,
    data: Vec<u8>,
    count: u64,
    one_at_a_time: bool,
    sent: u64,
    /// No new message from this time on (ns).
    pub until_ns: u64,
    /// When each message was first tried.
    pub started: Vec<u64>,
    trying: bool,
    /// Polls completions itself while it waits (not when an ACK thread does: the sliding
    /// window's).
    own_poll: bool,
}

impl Sender {
    /// A sender of `count` messages of `size` bytes.
    pub fn new(tx: SharedTx, shared: Rc<Shared>, size: usize, count: u64, one: bool) -> Self {
        let own_poll = tx.borrow().kind() != Kind::SlidingWindow;
        Self {
            tx,
            shared,
            data: (0..size)
                .map(|i| u8::try_from(i % 251).unwrap_or(0))
                .collect(),
            count,
            one_at_a_time: one,
            sent: 0,
            until_ns: u64::MAX,
            started: Vec::new(),
            trying: false,
            own_poll,
        }
    }
}

impl Actor for Sender {
    fn step(&mut self, now: u64) -> Result<(Step, Work), SimError> {
        let mut tx = self.tx.borrow_mut();
        if now >= self.until_ns && !self.trying {
            self.count = self.sent;
        }
        if self.sent == self.count {
            let changed = self.own_poll && tx.poll(now)?;
            let done = tx.in_flight() == 0 && tx.finish(now)?;
            let w = tx.take_work();
            if done {
                self.shared.sender_done.set(true);
                return Ok((Step::Done, w));
            }
            return Ok((if changed { Step::Progress } else { Step::Wait }, w));
        }
        if self.one_at_a_time && self.shared.received.get() < self.sent {
            let changed = self.own_poll && tx.poll(now)?;
            let w = tx.take_work();
            return Ok((if changed { Step::Progress } else { Step::Wait }, w));
        }
        if !self.trying {
            self.trying = true;
            self.started.push(now);
        }
        let r = tx.try_send(now, 0, &self.data)?;
        let w = tx.take_work();
        if r.is_some() {
            self.sent += 1;
            self.trying = false;
            let _ = self.data.first_mut().map(|b| *b = b.wrapping_add(1));
            return Ok((Step::Progress, w));
        }
        Ok((tx.wake_at().map_or(Step::Wait, Step::WaitUntil), w))
    }
}

/// The sliding window's ACK thread: polls for ACKs until the sender is done.
pub struct AckThread {
    tx: SharedTx,
    shared: Rc<Shared>,
    /// When the sender learned of each message's ACK (the poll that moved the head past it).
    pub acked: Vec<u64>,
}

impl AckThread {
    /// The ACK thread of `tx`.
    pub fn new(tx: SharedTx, shared: Rc<Shared>) -> Self {
        Self {
            tx,
            shared,
            acked: Vec::new(),
        }
    }
}

impl Actor for AckThread {
    fn step(&mut self, now: u64) -> Result<(Step, Work), SimError> {
        if self.shared.sender_done.get() {
            return Ok((Step::Done, Work::default()));
        }
        let mut tx = self.tx.borrow_mut();
        let before = tx.in_flight();
        let moved = tx.poll(now)?;
        let w = tx.take_work();
        if moved {
            let n = before.saturating_sub(tx.in_flight()).max(1);
            self.acked
                .extend(std::iter::repeat_n(now, usize::try_from(n).unwrap_or(1)));
            return Ok((Step::Progress, w));
        }
        Ok((Step::Wait, w))
    }
}

/// Receives `count` messages (and HiPower's end, if `until_finished`); records arrival times.
pub struct Receiver {
    rx: Box<dyn BlockReceiver>,
    shared: Rc<Shared>,
    count: u64,
    /// When each message was taken.
    pub got: Vec<u64>,
    /// Payload bytes taken.
    pub bytes: u64,
}

impl Receiver {
    /// A receiver of `count` messages.
    pub fn new(rx: Box<dyn BlockReceiver>, shared: Rc<Shared>, count: u64) -> Self {
        Self {
            rx,
            shared,
            count,
            got: Vec::new(),
            bytes: 0,
        }
    }
}

impl Actor for Receiver {
    fn step(&mut self, now: u64) -> Result<(Step, Work), SimError> {
        if self.got.len() as u64 == self.count {
            // Stay until the sender is done: HiPower's requester gets its buffers back by
            // reading the bitmap this side keeps.
            let done = self.shared.sender_done.get();
            return Ok((
                if done { Step::Done } else { Step::Wait },
                self.rx.take_work(),
            ));
        }
        let m = self.rx.try_recv(now)?;
        let w = self.rx.take_work();
        match m {
            Some(m) => {
                self.got.push(now);
                self.bytes += m.data.len() as u64;
                self.shared.received.set(self.shared.received.get() + 1);
                Ok((Step::Progress, w))
            }
            None => Ok((Step::Wait, w)),
        }
    }
}

/// One thread serving several connections: each step tries every sender (broadcast: the same
/// message to each worker in turn) or every receiver (gather), round robin.
pub struct Master {
    /// Broadcast: its senders (each sends `count`).
    pub senders: Vec<Sender>,
    /// Gather: its receivers.
    pub receivers: Vec<Receiver>,
}

impl Actor for Master {
    fn step(&mut self, now: u64) -> Result<(Step, Work), SimError> {
        let mut total = Work::default();
        let mut progress = false;
        let mut all_done = true;
        for s in &mut self.senders {
            if s.shared.sender_done.get() {
                continue;
            }
            let (st, w) = s.step(now)?;
            total.add(&w);
            progress |= st == Step::Progress;
            all_done &= st == Step::Done || s.shared.sender_done.get();
        }
        for r in &mut self.receivers {
            if r.got.len() as u64 == r.count && r.shared.sender_done.get() {
                continue;
            }
            let (st, w) = r.step(now)?;
            total.add(&w);
            progress |= st == Step::Progress;
            all_done &= st == Step::Done;
        }
        let step = if all_done {
            Step::Done
        } else if progress {
            Step::Progress
        } else {
            Step::Wait
        };
        Ok((step, total))
    }
}
