//! What crosses the wire: orders (client to server), replies (server to client, `buffer` bytes
//! of which the first [`REPLY_HEADER`] carry the result), and the bootstrap handshake that
//! exchanges transport endpoints over a stream socket (as perftest exchanges QP numbers): the
//! server chooses the mechanism, the client follows its offer.

use crate::bs::Option_;
use resex_shim::transport::any::{AnyEndpoint, SenderAddr};
use serde::{Deserialize, Serialize};

/// Bytes of an order.
pub const ORDER_BYTES: usize = 48;
/// Bytes of a reply's header; the rest of the reply is the buffer's payload.
pub const REPLY_HEADER: usize = 40;

/// A client's order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Order {
    /// Client's order number.
    pub id: u64,
    /// When the client queued it (client clock, ns).
    pub client_ns: u64,
    /// The option to price.
    pub option: Option_,
}

fn f(b: &[u8], off: usize) -> [u8; 8] {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    w
}

impl Order {
    /// Wire bytes.
    pub fn encode(&self) -> [u8; ORDER_BYTES] {
        let mut b = [0u8; ORDER_BYTES];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..16].copy_from_slice(&self.client_ns.to_le_bytes());
        b[16..24].copy_from_slice(&self.option.spot.to_le_bytes());
        b[24..32].copy_from_slice(&self.option.strike.to_le_bytes());
        b[32..40].copy_from_slice(&self.option.vol.to_le_bytes());
        b[40..48].copy_from_slice(&self.option.years.to_le_bytes());
        b
    }

    /// Parses an order; `None` when it is short or its numbers are not sane (a peer's bytes).
    pub fn decode(b: &[u8]) -> Option<Order> {
        if b.len() < ORDER_BYTES {
            return None;
        }
        let num = |o| f64::from_le_bytes(f(b, o));
        let option = Option_ {
            spot: num(16),
            strike: num(24),
            vol: num(32),
            years: num(40),
            rate: 0.02,
        };
        let sane = |v: f64, lo: f64, hi: f64| v.is_finite() && v >= lo && v <= hi;
        if !(sane(option.spot, 0.01, 1e6)
            && sane(option.strike, 0.01, 1e6)
            && sane(option.vol, 0.001, 10.0)
            && sane(option.years, 0.0, 100.0))
        {
            return None;
        }
        Some(Order {
            id: u64::from_le_bytes(f(b, 0)),
            client_ns: u64::from_le_bytes(f(b, 8)),
            option,
        })
    }
}

/// The head of a reply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplyHeader {
    /// The order it answers.
    pub id: u64,
    /// The order's client timestamp, echoed.
    pub client_ns: u64,
    /// The book's value.
    pub value: f64,
    /// Time the order waited in the server's queue, ns.
    pub queue_ns: u64,
    /// Time its pricing took, ns.
    pub compute_ns: u64,
}

impl ReplyHeader {
    /// Writes the header over the start of `buf` (at least [`REPLY_HEADER`] bytes).
    pub fn write(&self, buf: &mut [u8]) {
        buf[0..8].copy_from_slice(&self.id.to_le_bytes());
        buf[8..16].copy_from_slice(&self.client_ns.to_le_bytes());
        buf[16..24].copy_from_slice(&self.value.to_le_bytes());
        buf[24..32].copy_from_slice(&self.queue_ns.to_le_bytes());
        buf[32..40].copy_from_slice(&self.compute_ns.to_le_bytes());
    }

    /// Reads a header; `None` when the reply is too short.
    pub fn read(b: &[u8]) -> Option<ReplyHeader> {
        (b.len() >= REPLY_HEADER).then(|| ReplyHeader {
            id: u64::from_le_bytes(f(b, 0)),
            client_ns: u64::from_le_bytes(f(b, 8)),
            value: f64::from_le_bytes(f(b, 16)),
            queue_ns: u64::from_le_bytes(f(b, 24)),
            compute_ns: u64::from_le_bytes(f(b, 32)),
        })
    }
}

/// Handshake step 1, server to client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Offer {
    /// The server's order receiver (its mechanism is the connection's).
    pub orders: AnyEndpoint,
    /// Reply size, bytes.
    pub buffer: u64,
    /// Path MTU the server's QPs use.
    pub path_mtu: u32,
}

/// Handshake step 2, client to server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Answer {
    /// The client's order sender.
    pub order_qp: SenderAddr,
    /// The client's reply receiver.
    pub replies: AnyEndpoint,
}

/// Handshake step 3, server to client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Done {
    /// The server's reply sender.
    pub reply_qp: SenderAddr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_and_headers_round_trip_and_garbage_is_refused() {
        let o = Order {
            id: 9,
            client_ns: 123,
            option: Option_ {
                spot: 100.0,
                strike: 101.0,
                vol: 0.3,
                years: 0.25,
                rate: 0.02,
            },
        };
        assert_eq!(Order::decode(&o.encode()), Some(o));
        assert_eq!(Order::decode(&[0xff; ORDER_BYTES]), None);
        assert_eq!(Order::decode(&[0; 10]), None);
        let h = ReplyHeader {
            id: 1,
            client_ns: 2,
            value: 3.5,
            queue_ns: 4,
            compute_ns: 5,
        };
        let mut b = vec![0u8; 64];
        h.write(&mut b);
        assert_eq!(ReplyHeader::read(&b), Some(h));
        assert_eq!(ReplyHeader::read(&b[..10]), None);
    }
}
