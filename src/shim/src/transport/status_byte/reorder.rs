//! Each device's packets back in packet-number order (the receiver may take blocks in any
//! order). Bounded: a hostile or broken sender that skips packet numbers cannot make it hold
//! more than [`MAX_EARLY`] early messages; past that the oldest gap is given up.

use crate::transport::Message;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Early messages held at most (beyond: the gap is skipped).
pub const MAX_EARLY: usize = 1024;

/// Puts each device's packets back in packet-number order.
#[derive(Debug, Default)]
pub struct Reorder {
    next: HashMap<u8, u16>,
    early: BTreeMap<(u8, u16), Message>,
    ready: VecDeque<Message>,
}

impl Reorder {
    /// Adds an arrived message.
    pub fn push(&mut self, m: Message) {
        let dev = m.dev;
        let expected = *self.next.entry(dev).or_insert(0);
        if m.packet != expected {
            self.early.insert((dev, m.packet), m);
            if self.early.len() > MAX_EARLY {
                // A gap that never fills: give up on it, from the first early message on.
                if let Some((&(d, p), _)) = self.early.first_key_value() {
                    self.next.insert(d, p);
                    self.drain(d);
                }
            }
            return;
        }
        self.next.insert(dev, expected.wrapping_add(1));
        self.ready.push_back(m);
        self.drain(dev);
    }

    fn drain(&mut self, dev: u8) {
        let mut expected = self.next.get(&dev).copied().unwrap_or(0);
        while let Some(m) = self.early.remove(&(dev, expected)) {
            expected = expected.wrapping_add(1);
            self.ready.push_back(m);
        }
        self.next.insert(dev, expected);
    }

    /// The next in-order message.
    pub fn pop(&mut self) -> Option<Message> {
        self.ready.pop_front()
    }

    /// Messages waiting for an earlier one.
    pub fn waiting(&self) -> usize {
        self.early.len()
    }
}
