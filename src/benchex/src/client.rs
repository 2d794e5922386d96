//! A trading client: connects to a server over the bootstrap socket, sends timestamped orders
//! (open loop at a fixed rate, timestamped when due, so a stalled sender shows as latency; or
//! closed loop with a window; or closed loop as a periodic job: a burst of orders, then a pause
//! once their replies are in), and records each reply's round trip.

// Float-to-integer conversions here are of measured, bounded quantities (ns, counts, ranks).
#![allow(clippy::cast_possible_truncation)]

use crate::boot;
use crate::bs::Option_;
use crate::clock::{now_ns, wait_until, Idle};
use crate::wire::{Answer, Done, Offer, Order, ReplyHeader, ORDER_BYTES};
use crate::BenchError;
use resex_common::{LatencyRecorder, LatencySummary};
use resex_shim::transport::any::{self, PendingReceiver};
use resex_shim::transport::realtime::{self, RealClock};
use resex_shim::transport::status_byte::Config;
use resex_shim::transport::{BlockReceiver, BlockSender, Kind, Polling};
use resex_shim::Provider;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod in_flight;
mod periodic;
pub use in_flight::InFlightWait;
pub use periodic::{
    check_periodic, start_wait, PeriodicError, MAX_BURST, MAX_START_WAIT, MAX_THINK, MIN_THINK_MS,
};
use periodic::{send_periodic, wait_for_start, Iterations};

/// Client parameters.
#[derive(Debug, Clone, Copy)]
pub struct ClientConfig {
    /// Orders per second (0: closed loop, `window` orders outstanding).
    pub rate: f64,
    /// Outstanding orders in closed loop.
    pub window: u64,
    /// Stop after this many orders (0: no limit).
    pub count: u64,
    /// Stop after this long (None: no limit).
    pub duration: Option<Duration>,
    /// Status-byte blocks per direction.
    pub blocks: u32,
    /// How the order sender waits for the device.
    pub polling: Polling,
    /// A periodic job (closed loop only, `rate` 0): the pause after each iteration's last
    /// reply before the next iteration (zero: no iterations, the plain closed loop).
    pub think: Duration,
    /// A periodic job's orders per iteration (with `window` outstanding); 1 unless `think` is
    /// set.
    pub burst: u64,
    /// Wait after connecting until this Unix time, ms (wall clock), before the first order, so
    /// that the workers of a job start together (at most [`MAX_START_WAIT`]; a time past: at
    /// once).
    pub start_unix_ms: Option<u64>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            rate: 1000.0,
            window: 2,
            count: 0,
            duration: Some(Duration::from_secs(5)),
            blocks: 3,
            polling: Polling::Spin,
            think: Duration::ZERO,
            burst: 1,
            start_unix_ms: None,
        }
    }
}

/// What a client saw.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ClientResult {
    /// Orders sent.
    pub sent: u64,
    /// Replies received.
    pub received: u64,
    /// Reply bytes received.
    pub reply_bytes: u64,
    /// Wall time, s.
    pub seconds: f64,
    /// Round-trip latency.
    #[serde(serialize_with = "crate::ser_summary")]
    pub rtt: LatencySummary,
    /// Server-side queue time, mean ns (echoed in replies).
    pub server_queue_mean_ns: f64,
    /// Server-side compute, mean ns.
    pub server_compute_mean_ns: f64,
    /// A periodic job's complete iterations (every reply in); 0 in the plain modes.
    pub iterations: u64,
    /// A periodic job's mean period, ns: from one iteration's first order to the next one's (0
    /// with fewer than 2 iterations begun).
    pub iteration_mean_ns: f64,
}

/// Logs, at most once a second, the worst lateness of an order's send (from when it was due to
/// when the transport took it) when it exceeded 20 ms: a stalled sender shows where it stalled.
#[derive(Debug, Default)]
struct LateLog {
    worst: u64,
    since: u64,
}

impl LateLog {
    fn note(&mut self, late_ns: u64) {
        if late_ns >= 20_000_000 {
            self.worst = self.worst.max(late_ns);
        }
        let now = now_ns();
        if now.saturating_sub(self.since) >= 1_000_000_000 {
            if self.worst > 0 {
                tracing::warn!(
                    "orders went out up to {:.1} ms after they were due in the last second",
                    self.worst as f64 / 1e6
                );
            }
            self.worst = 0;
            self.since = now;
        }
    }
}

/// A client's end of the exchange, after the bootstrap.
struct Connected {
    orders: Box<dyn BlockSender>,
    order_cfg: Config,
    kind: Kind,
    replies: Box<dyn BlockReceiver>,
}

/// Connects to the server at `addr` (waiting up to 60 s for it) and exchanges endpoints: the
/// server's offer, the client's answer, the server's reply QP.
fn connect(p: &dyn Provider, cfg: &ClientConfig, addr: &str) -> Result<Connected, BenchError> {
    let mut s = boot::connect(addr, Duration::from_secs(60))?;
    let offer: Offer = boot::recv(&mut *s)?;
    let tcfg = |payload| Config {
        blocks: cfg.blocks,
        payload,
        path_mtu: offer.path_mtu,
        timeout: Duration::from_secs(30),
        ring_entries: 64,
        polling: cfg.polling,
    };
    // The server chose the mechanism: its order receiver's. The window's ACKs are read by
    // `send` itself (no ACK thread).
    let kind = offer.orders.kind();
    let replies = PendingReceiver::new(kind, p, &tcfg(offer.buffer))?;
    let opts = any::Options {
        ack_thread: false,
        ..any::Options::default()
    };
    let order_cfg = tcfg(ORDER_BYTES as u64);
    let (orders, order_qp) = any::connect_sender(p, &order_cfg, offer.orders, opts)?;
    boot::send(
        &mut *s,
        &Answer {
            order_qp,
            replies: replies.endpoint(),
        },
    )?;
    let done: Done = boot::recv(&mut *s)?;
    Ok(Connected {
        orders,
        order_cfg,
        kind,
        replies: replies.accept(done.reply_qp)?,
    })
}

/// What the replies measured.
#[derive(Default)]
struct Tally {
    rtt: LatencyRecorder,
    bytes: u64,
    queue_ns: u64,
    compute_ns: u64,
    /// When the latest reply arrived, [`now_ns`].
    last_ns: u64,
}

/// The thread that takes the replies (on `clock`) until `finished`, counting them in `received` and
/// measuring them in `rec`.
fn spawn_receiver(
    mut replies: Box<dyn BlockReceiver>,
    clock: RealClock,
    received: Arc<AtomicU64>,
    finished: Arc<AtomicBool>,
    rec: Arc<Mutex<Tally>>,
) -> Result<std::thread::JoinHandle<Result<(), BenchError>>, BenchError> {
    Ok(std::thread::Builder::new()
        .name("benchex-replies".into())
        .spawn(move || -> Result<(), BenchError> {
            let mut idle = Idle::default();
            while !finished.load(Ordering::Acquire) {
                match replies.try_recv(clock.now_ns())? {
                    Some(m) => {
                        idle.busy();
                        let now = now_ns();
                        let mut r = rec.lock().unwrap_or_else(|p| p.into_inner());
                        r.last_ns = now;
                        if let Some(h) = ReplyHeader::read(&m.data) {
                            r.rtt.record(h.client_ns, now);
                            r.bytes += m.data.len() as u64;
                            r.queue_ns += h.queue_ns;
                            r.compute_ns += h.compute_ns;
                        }
                        drop(r);
                        received.fetch_add(1, Ordering::AcqRel);
                    }
                    None => idle.idle(),
                }
            }
            Ok(())
        })?)
}

/// Sends one order (with `cfg`'s timeout and polling).
fn post(
    orders: &mut dyn BlockSender,
    clock: &RealClock,
    kind: Kind,
    order: &Order,
    cfg: &Config,
) -> Result<(), resex_shim::ShimError> {
    realtime::send(orders, clock, 0, &order.encode(), cfg.timeout, cfg.polling)?;
    // HiPower's responder sees an order only once this side reaped its WRITE's completion
    // (which flips the buffer's bitmap0 bit); the others' orders are visible on arrival.
    if kind == Kind::Hipower {
        realtime::complete(orders, clock, cfg.timeout, cfg.polling)?;
    }
    Ok(())
}

/// Order `id`, due at `due`, on a pseudo-random spot price (xorshift `rng`).
fn next_order(rng: &mut u64, id: u64, due: u64) -> Order {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    Order {
        id,
        client_ns: due,
        option: Option_ {
            spot: 90.0 + (*rng % 2000) as f64 / 100.0,
            strike: 100.0,
            vol: 0.25,
            years: 0.5,
            rate: 0.02,
        },
    }
}

/// The order side of a connected client: what sends, and what it has sent.
struct Sender {
    orders: Box<dyn BlockSender>,
    cfg: Config,
    kind: Kind,
    clock: RealClock,
    rng: u64,
    sent: u64,
    late: LateLog,
}

impl Sender {
    /// Sends the next order, due at `due`.
    fn send(&mut self, due: u64) -> Result<(), resex_shim::ShimError> {
        let order = next_order(&mut self.rng, self.sent, due);
        post(&mut *self.orders, &self.clock, self.kind, &order, &self.cfg)?;
        self.late.note(now_ns().saturating_sub(due));
        self.sent += 1;
        Ok(())
    }
}

/// When a client stops sending: `stop`, its count, its end ([`now_ns`]).
struct Limits {
    stop: Arc<AtomicBool>,
    count: u64,
    end: Option<u64>,
}

impl Limits {
    /// Stopped, or past the end (orders still to send or not).
    fn over(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.end.is_some_and(|e| now_ns() >= e)
    }

    /// No more orders after `sent`.
    fn reached(&self, sent: u64) -> bool {
        self.over() || (self.count > 0 && sent >= self.count)
    }

    /// Sleeps until `deadline` ([`now_ns`]), or until stopped or past the end.
    fn pause_until(&self, deadline: u64) {
        loop {
            let now = now_ns();
            if now >= deadline || self.over() {
                return;
            }
            std::thread::sleep(Duration::from_nanos((deadline - now).min(5_000_000)));
        }
    }
}

/// Fewer than `cfg.window` orders are waiting for their replies (closed loop).
fn window_open(tx: &Sender, cfg: &ClientConfig, received: &AtomicU64) -> bool {
    tx.sent.saturating_sub(received.load(Ordering::Acquire)) < cfg.window.max(1)
}

/// The plain modes: open loop at `cfg.rate` from `start`, or closed loop with `cfg.window`
/// outstanding, until a limit.
fn send_plain(
    tx: &mut Sender,
    cfg: &ClientConfig,
    lim: &Limits,
    received: &AtomicU64,
    start: u64,
) -> Result<(), resex_shim::ShimError> {
    let mut idle = Idle::default();
    loop {
        if lim.reached(tx.sent) {
            return Ok(());
        }
        let due = if cfg.rate > 0.0 {
            // Open loop: order k is due at start + k / rate, whatever happened before.
            let due = start + (tx.sent as f64 * 1e9 / cfg.rate) as u64;
            if lim.end.is_some_and(|e| due >= e) {
                return Ok(());
            }
            wait_until(due);
            due
        } else {
            if !window_open(tx, cfg, received) {
                idle.idle();
                continue;
            }
            idle.busy();
            now_ns()
        };
        tx.send(due)?;
    }
}

/// Runs one client against the server at `addr` until its count or duration is reached or
/// `stop` is set.
pub fn run(
    p: Arc<dyn Provider>,
    cfg: ClientConfig,
    addr: &str,
    stop: Arc<AtomicBool>,
) -> Result<ClientResult, BenchError> {
    cfg.check()?;
    let Connected {
        orders,
        order_cfg,
        kind,
        replies,
    } = connect(&*p, &cfg, addr)?;
    let clock = RealClock::new();
    let received = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let rec = Arc::new(Mutex::new(Tally::default()));
    let receiver = spawn_receiver(
        replies,
        clock,
        received.clone(),
        finished.clone(),
        rec.clone(),
    )?;
    if let Some(t) = cfg.start_unix_ms {
        wait_for_start(t, &stop);
    }

    let start = now_ns();
    let lim = Limits {
        stop: stop.clone(),
        count: cfg.count,
        end: cfg
            .duration
            .map(|d| start + u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    };
    let mut tx = Sender {
        orders,
        cfg: order_cfg,
        kind,
        clock,
        rng: 0x2545_f491_4f6c_dd1d,
        sent: 0,
        late: LateLog::default(),
    };
    let result = if cfg.periodic() {
        send_periodic(&mut tx, &cfg, &lim, &received, &rec)
    } else {
        send_plain(&mut tx, &cfg, &lim, &received, start).map(|()| Iterations::default())
    };
    let sent = tx.sent;
    // Wait for the replies still in flight, while they keep coming.
    if !InFlightWait::default().wait(sent, &received, &stop, now_ns) {
        let got = received.load(Ordering::Acquire);
        tracing::warn!(
            "{} of {sent} orders had no reply when the client stopped waiting",
            sent.saturating_sub(got)
        );
    }
    finished.store(true, Ordering::Release);
    let rx = receiver.join().map_err(|_| BenchError::Panicked {
        thread: "reply thread",
    })?;
    let it = result?;
    rx?;
    let seconds = (now_ns() - start) as f64 / 1e9;
    let mut r = rec.lock().unwrap_or_else(|p| p.into_inner());
    let n = r.rtt.len().max(1) as f64;
    let (q, c) = (r.queue_ns as f64 / n, r.compute_ns as f64 / n);
    Ok(ClientResult {
        sent,
        received: received.load(Ordering::Acquire),
        reply_bytes: r.bytes,
        seconds,
        rtt: r.rtt.take_interval(),
        server_queue_mean_ns: q,
        server_compute_mean_ns: c,
        iterations: it.complete,
        iteration_mean_ns: it.mean_ns(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn periodic_settings_that_cannot_work_are_refused() {
        assert_eq!(check_periodic(0.0, 1, 1000.0), Ok(()));
        assert_eq!(check_periodic(20.0, 4, 0.0), Ok(()));
        assert_eq!(check_periodic(60_000.0, 4096, 0.0), Ok(()));
        assert_eq!(
            check_periodic(-1.0, 1, 0.0),
            Err(PeriodicError::Think(-1.0))
        );
        assert!(matches!(
            check_periodic(f64::NAN, 1, 0.0),
            Err(PeriodicError::Think(_))
        ));
        assert_eq!(
            check_periodic(60_001.0, 1, 0.0),
            Err(PeriodicError::Think(60_001.0))
        );
        assert_eq!(
            check_periodic(1e-12, 4, 0.0),
            Err(PeriodicError::Think(1e-12))
        );
        assert_eq!(check_periodic(20.0, 0, 0.0), Err(PeriodicError::Burst(0)));
        assert_eq!(
            check_periodic(20.0, 4097, 0.0),
            Err(PeriodicError::Burst(4097))
        );
        assert_eq!(
            check_periodic(20.0, 4, 100.0),
            Err(PeriodicError::OpenLoop(100.0))
        );
        assert_eq!(
            check_periodic(0.0, 4, 0.0),
            Err(PeriodicError::BurstWithoutThink(4))
        );
        assert_eq!(
            PeriodicError::OpenLoop(100.0).to_string(),
            "--think-ms (a periodic job) runs closed loop only: --rate must be 0, not 100"
        );
    }

    #[test]
    fn the_default_config_is_a_plain_one_that_passes() {
        let cfg = ClientConfig::default();
        assert_eq!(cfg.check(), Ok(()));
        assert!(!cfg.periodic());
        let periodic = ClientConfig {
            rate: 0.0,
            think: Duration::from_millis(20),
            burst: 4,
            ..cfg
        };
        assert!(periodic.periodic());
        let too_long = ClientConfig {
            think: Duration::from_secs(61),
            ..periodic
        };
        assert!(matches!(too_long.check(), Err(PeriodicError::Think(_))));
    }

    #[test]
    fn start_wait_is_zero_for_a_past_time_and_capped() {
        let now = UNIX_EPOCH + Duration::from_millis(1_000_000);
        assert_eq!(start_wait(999_000, now), Duration::ZERO);
        assert_eq!(start_wait(1_000_000, now), Duration::ZERO);
        assert_eq!(start_wait(1_000_300, now), Duration::from_millis(300));
        assert_eq!(start_wait(u64::MAX, now), MAX_START_WAIT);
    }

    #[test]
    fn iteration_period_needs_two_iterations() {
        let mut it = Iterations::default();
        assert_eq!(it.mean_ns(), 0.0);
        it.begin(100);
        assert_eq!(it.mean_ns(), 0.0);
        it.begin(300);
        it.begin(700);
        assert_eq!(it.mean_ns(), 300.0);
    }
}
