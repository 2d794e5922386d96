//! The exchange server: accepts clients over the bootstrap socket, takes their orders first come
//! first served from one queue, prices each with Black-Scholes, and replies with `buffer` bytes.
//! Its own latency per order (arrival to reply completion) goes to a shared recorder: that is
//! what the agent reports. Time is split as in the paper's Fig. 2: compute, I/O wait (inside
//! `send`: free blocks, synchronisation) and polling (waiting for the reply's completion).
//!
//! The transport is the server's choice ([`ServerConfig::transport`]); clients follow its offer.
//! Whatever the mechanism, a reply is done when its WRITEs completed locally (not when the
//! client handed its block back).

use crate::boot::{self, Listener};
use crate::bs::price_book;
use crate::clock::{now_ns, Idle};
use crate::wire::{Answer, Done, Offer, Order, ReplyHeader, ORDER_BYTES, REPLY_HEADER};
use crate::BenchError;
use resex_common::LatencyRecorder;
use resex_shim::transport::any::{self, PendingReceiver};
use resex_shim::transport::realtime::{self, RealClock};
use resex_shim::transport::status_byte::Config;
use resex_shim::transport::{BlockReceiver, BlockSender, Kind, Polling};
use resex_shim::Provider;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Server parameters.
#[derive(Debug, Clone, Copy)]
pub struct ServerConfig {
    /// Reply size, bytes (the paper's buffer size).
    pub buffer: u64,
    /// Options priced per order (the compute per request).
    pub compute: u32,
    /// Status-byte blocks per connection.
    pub blocks: u32,
    /// Path MTU.
    pub path_mtu: u32,
    /// Send queue and CQ depth of reply senders: deep, so that the host's monitor can still
    /// count a new reply QP from its first WQE when the agent registers it late. A reply is 2
    /// WQEs plus a synchronisation READ now and then: at 400 replies a second, 4096 entries
    /// are 4-5 s of registration delay (256 were lapped in 0.3 s: a CI run on a loaded machine
    /// counted 206 of 300 replies, the monitor attaching at the present position).
    pub ring_entries: u32,
    /// How the server waits for the device.
    pub polling: Polling,
    /// The transport mechanism of its connections.
    pub transport: Kind,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            buffer: 64 * 1024,
            compute: 20,
            blocks: 3,
            path_mtu: 1024,
            ring_entries: 4096,
            polling: Polling::Spin,
            transport: Kind::StatusByte,
        }
    }
}

/// What the server did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ServerStats {
    /// Clients that connected.
    pub clients: u64,
    /// Orders answered.
    pub requests: u64,
    /// Bytes of replies sent.
    pub reply_bytes: u64,
    /// Total time orders waited in the queue, ns.
    pub queue_ns: u64,
    /// Total compute, ns.
    pub compute_ns: u64,
    /// Total time inside `send` (free block, synchronisation), ns.
    pub wait_ns: u64,
    /// Total time polling for reply completions, ns.
    pub poll_ns: u64,
    /// Malformed orders dropped.
    pub bad_orders: u64,
    /// Connections dropped on an error.
    pub dropped: u64,
}

struct Conn {
    id: u64,
    orders: Box<dyn BlockReceiver>,
    replies: Box<dyn BlockSender>,
    clock: RealClock,
    timeout: Duration,
}

fn transport(cfg: &ServerConfig, payload: u64) -> Config {
    Config {
        blocks: cfg.blocks,
        payload,
        path_mtu: cfg.path_mtu,
        timeout: Duration::from_secs(30),
        ring_entries: cfg.ring_entries,
        polling: cfg.polling,
    }
}

fn handshake(
    p: &dyn Provider,
    cfg: &ServerConfig,
    s: &mut dyn boot::Stream,
    id: u64,
) -> Result<Conn, BenchError> {
    let orders = PendingReceiver::new(cfg.transport, p, &transport(cfg, ORDER_BYTES as u64))?;
    boot::send(
        s,
        &Offer {
            orders: orders.endpoint(),
            buffer: cfg.buffer,
            path_mtu: cfg.path_mtu,
        },
    )?;
    let a: Answer = boot::recv(s)?;
    if a.replies.kind() != cfg.transport {
        return Err(BenchError::Transport {
            offered: a.replies.kind(),
            server: cfg.transport,
        });
    }
    let orders = orders.accept(a.order_qp)?;
    let tcfg = transport(cfg, cfg.buffer);
    // The window's ACKs are read by `send` itself (no ACK thread in a one-thread server).
    let opts = any::Options {
        ack_thread: false,
        ..any::Options::default()
    };
    let (replies, reply_qp) = any::connect_sender(p, &tcfg, a.replies, opts)?;
    boot::send(s, &Done { reply_qp })?;
    Ok(Conn {
        id,
        orders,
        replies,
        clock: RealClock::new(),
        timeout: tcfg.timeout,
    })
}

/// Runs a server on `listener` until `stop` is set. Returns its counters.
pub fn run(
    p: Arc<dyn Provider>,
    cfg: ServerConfig,
    listener: Listener,
    recorder: Arc<Mutex<LatencyRecorder>>,
    stop: Arc<AtomicBool>,
) -> Result<ServerStats, BenchError> {
    if cfg.buffer < REPLY_HEADER as u64 {
        return Err(BenchError::Buffer {
            buffer: cfg.buffer,
            min: REPLY_HEADER as u64,
        });
    }
    let (tx, rx) = mpsc::channel::<Conn>();
    listener.set_nonblocking(true)?;
    let acceptor = {
        let p = p.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("benchex-accept".into())
            .spawn(move || {
                let mut id = 0;
                while !stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok(mut s) => {
                            id += 1;
                            match handshake(&*p, &cfg, &mut *s, id) {
                                Ok(c) => {
                                    if tx.send(c).is_err() {
                                        return;
                                    }
                                }
                                Err(e) => tracing::warn!("client {id}: handshake failed: {e}"),
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(e) => {
                            tracing::warn!("accept: {e}");
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            })?
    };

    let mut conns: Vec<Conn> = Vec::new();
    let mut queue: VecDeque<Queued> = VecDeque::new();
    let mut stats = ServerStats::default();
    let mut reply = vec![0u8; usize::try_from(cfg.buffer).unwrap_or(usize::MAX)];
    let mut idle = Idle::default();
    let mut next = 0usize;
    let mut slow = SlowLog::default();
    while !stop.load(Ordering::Acquire) {
        while let Ok(c) = rx.try_recv() {
            stats.clients += 1;
            tracing::info!("client {} connected", c.id);
            conns.push(c);
        }
        let mut dead = take_arrivals(&mut conns, next, &mut queue, &mut stats);
        next = next.wrapping_add(1);
        // First come, first served.
        if let Some((i, order, arrived)) = queue.pop_front() {
            idle.busy();
            if !dead.contains(&i) {
                let c = &mut conns[i];
                match serve_one(c, &order, arrived, &cfg, &mut reply, &mut stats, &recorder) {
                    Ok(split) => slow.note(split, now_ns()),
                    Err(e) => {
                        tracing::warn!("client {}: {e}", c.id);
                        dead.push(i);
                    }
                }
            }
        } else {
            idle.idle();
        }
        if !dead.is_empty() {
            drop_dead(&mut conns, &mut queue, dead, &mut stats);
        }
    }
    let _ = acceptor.join();
    Ok(stats)
}

/// An order waiting: its connection's index, the order, when it arrived (ns).
type Queued = (usize, Order, u64);

/// Takes every connection's arrivals into `queue`, round robin from `next`; the indexes of the
/// connections that failed.
fn take_arrivals(
    conns: &mut [Conn],
    next: usize,
    queue: &mut VecDeque<Queued>,
    stats: &mut ServerStats,
) -> Vec<usize> {
    let mut dead = Vec::new();
    for k in 0..conns.len() {
        let i = (next + k) % conns.len();
        loop {
            let now = conns[i].clock.now_ns();
            match conns[i].orders.try_recv(now) {
                Ok(Some(m)) => match Order::decode(&m.data) {
                    Some(o) => queue.push_back((i, o, now_ns())),
                    None => stats.bad_orders += 1,
                },
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("client {}: {e}", conns[i].id);
                    dead.push(i);
                    break;
                }
            }
        }
    }
    dead
}

/// Drops the connections at the indexes `dead`, and their queued orders (the others' indexes
/// shift down).
fn drop_dead(
    conns: &mut Vec<Conn>,
    queue: &mut VecDeque<Queued>,
    mut dead: Vec<usize>,
    stats: &mut ServerStats,
) {
    dead.sort_unstable();
    dead.dedup();
    for &i in dead.iter().rev() {
        let c = conns.remove(i);
        tracing::warn!("client {} dropped", c.id);
        stats.dropped += 1;
    }
    queue.retain(|(i, _, _)| !dead.contains(i));
    for e in queue.iter_mut() {
        e.0 -= dead.iter().filter(|&&d| d < e.0).count();
    }
}

/// One order's time at the server, ns.
#[derive(Debug, Clone, Copy, Default)]
struct Split {
    queue: u64,
    compute: u64,
    wait: u64,
    poll: u64,
}

impl Split {
    fn total(&self) -> u64 {
        self.queue + self.compute + self.wait + self.poll
    }
}

/// Logs, at most once a second, the slowest order of the last second when it took longer than
/// [`SLOW_NS`], split as in Fig. 2: a stall shows where it happened.
#[derive(Debug, Default)]
struct SlowLog {
    worst: Option<Split>,
    since: u64,
    /// The second's orders, summed (for the debug line of means).
    sum: Split,
    n: u64,
}

const SLOW_NS: u64 = 20_000_000;

impl SlowLog {
    fn note(&mut self, s: Split, now: u64) {
        self.sum.queue += s.queue;
        self.sum.compute += s.compute;
        self.sum.wait += s.wait;
        self.sum.poll += s.poll;
        self.n += 1;
        if s.total() >= SLOW_NS && self.worst.is_none_or(|w| s.total() > w.total()) {
            self.worst = Some(s);
        }
        if now.saturating_sub(self.since) >= 1_000_000_000 {
            if let Some(w) = self.worst.take() {
                let ms = |ns: u64| ns as f64 / 1e6;
                tracing::warn!(
                    "slowest order of the last second: {:.1} ms (queue {:.1}, compute {:.1}, \
                     I/O wait {:.1}, polling {:.1})",
                    ms(w.total()),
                    ms(w.queue),
                    ms(w.compute),
                    ms(w.wait),
                    ms(w.poll)
                );
            }
            if self.n > 0 {
                let us = |ns: u64| ns as f64 / 1e3 / self.n as f64;
                let m = self.sum;
                tracing::debug!(
                    "mean order of the last second ({}): {:.1} us (queue {:.1}, compute {:.1}, \
                     I/O wait {:.1}, polling {:.1})",
                    self.n,
                    us(m.total()),
                    us(m.queue),
                    us(m.compute),
                    us(m.wait),
                    us(m.poll)
                );
            }
            self.sum = Split::default();
            self.n = 0;
            self.since = now;
        }
    }
}

fn serve_one(
    c: &mut Conn,
    order: &Order,
    arrived: u64,
    cfg: &ServerConfig,
    reply: &mut [u8],
    stats: &mut ServerStats,
    recorder: &Mutex<LatencyRecorder>,
) -> Result<Split, BenchError> {
    let start = now_ns();
    let value = price_book(&order.option, cfg.compute);
    let computed = now_ns();
    ReplyHeader {
        id: order.id,
        client_ns: order.client_ns,
        value,
        queue_ns: start - arrived,
        compute_ns: computed - start,
    }
    .write(reply);
    realtime::send(&mut *c.replies, &c.clock, 0, reply, c.timeout, cfg.polling)?;
    let sent = now_ns();
    realtime::complete(&mut *c.replies, &c.clock, c.timeout, cfg.polling)?;
    let done = now_ns();
    stats.requests += 1;
    stats.reply_bytes += cfg.buffer;
    stats.queue_ns += start - arrived;
    stats.compute_ns += computed - start;
    stats.wait_ns += sent - computed;
    stats.poll_ns += done - sent;
    recorder
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .record(arrived, done);
    Ok(Split {
        queue: start - arrived,
        compute: computed - start,
        wait: sent - computed,
        poll: done - sent,
    })
}
