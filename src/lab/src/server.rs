//! The BenchEx server as a workload model: orders arrive (open loop at a rate, or back to back
//! in closed loop), each is computed on the vCPU, then answered with one signalled RDMA WRITE
//! of the buffer size through the shim; the server busy-polls its CQ, as the paper's BenchEx
//! does, so it uses its whole vCPU share and a cap bounds how fast it can post. Its latency per
//! order (arrival to the completion it sees) goes to a recorder, as the agent reports it.

use crate::vcpu::Vcpu;
use resex_common::LatencyRecorder;
use resex_shim::provider::{access, Mr, QpAddr, RemoteAddr};
use resex_shim::{CompletionQueue, Provider, QpInit, QueuePair, SendOp, SendWr, Wc};
use std::collections::VecDeque;

/// A server's work, from its scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    /// Reply bytes.
    pub buffer: u64,
    /// Orders per second (0: closed loop, always one ready).
    pub rate: f64,
    /// CPU time per order before its reply is posted, ns (pricing plus copying the reply).
    pub compute_ns: u64,
    /// First arrival, ns.
    pub start_ns: u64,
    /// Reply in WRITEs of this many bytes, [`CHUNK_WINDOW`] outstanding (0 or at least the
    /// buffer: one WRITE).
    pub chunk: u64,
    /// Orders come only from [`Server::push_order`], each with its own compute time and
    /// bytes, sent as WRITEs of `chunk` bytes that all reuse the `buffer` (the lab fabric's
    /// workers: a transfer of any size from a buffer of one chunk).
    pub external: bool,
    /// From a time on, another reply size and rate (a tenant whose workload changes).
    pub turn: Option<Turn>,
}

/// A change of a server's work at `at_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Turn {
    /// When, ns.
    pub at_ns: u64,
    /// Reply bytes from then on.
    pub buffer: u64,
    /// Orders per second from then on (0: closed loop).
    pub rate: f64,
    /// CPU time per order from then on, ns.
    pub compute_ns: u64,
}

/// Chunks of a reply in flight at once.
pub const CHUNK_WINDOW: u64 = 4;

/// The most WRITEs one reply may be split into (the lab refuses smaller chunks).
pub const MAX_CHUNKS: u64 = 65_536;

/// CPU cost model: 0.5 us per option priced, 0.1 us per KiB of reply copied.
pub fn compute_ns(options: u32, buffer: u64) -> u64 {
    u64::from(options) * 500 + buffer / 1024 * 100
}

/// Where orders spent their time (the paper's Fig. 2), summed: queued (arrival to the start of
/// its computing: the server was busy with earlier orders), computing (to the post), and waiting
/// for its completion (post to the poll that saw it: the I/O and the polling).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Split {
    /// Orders summed.
    pub n: u64,
    /// Queued, ns.
    pub queue_ns: u64,
    /// Computing, ns.
    pub compute_ns: u64,
    /// Waiting for the completion, ns.
    pub wait_ns: u64,
}

impl Split {
    fn add(&mut self, arrived: u64, started: u64, posted: u64, seen: u64) {
        self.n += 1;
        self.queue_ns += started.saturating_sub(arrived);
        self.compute_ns += posted.saturating_sub(started);
        self.wait_ns += seen.saturating_sub(posted);
    }

    /// Means per order, us: (queued, computing, waiting); `None` without orders.
    pub fn means_us(&self) -> Option<(f64, f64, f64)> {
        #[allow(clippy::cast_precision_loss)]
        let m = |x: u64| x as f64 / self.n as f64 / 1000.0;
        (self.n > 0).then(|| (m(self.queue_ns), m(self.compute_ns), m(self.wait_ns)))
    }
}

enum State {
    Ready,
    Computing {
        arrived: u64,
        started: u64,
        left: u64,
    },
    Waiting(Reply),
}

/// An order whose reply is being sent.
#[derive(Clone, Copy)]
struct Reply {
    arrived: u64,
    started: u64,
    posted: u64,
    /// Chunks still to post.
    to_post: u64,
    /// Chunks posted and not completed.
    out: u64,
}

/// One server: its QP, its reply buffer, its queue and its vCPU.
pub struct Server {
    /// Its vCPU.
    pub vcpu: Vcpu,
    work: Work,
    qp: Box<dyn QueuePair>,
    cq: Box<dyn CompletionQueue>,
    buf: Mr,
    dst: RemoteAddr,
    queue: VecDeque<u64>,
    next_arrival: u64,
    state: State,
    wcs: Vec<Wc>,
    next_id: u64,
    /// External orders waiting: (arrived, compute ns, bytes).
    orders: VecDeque<(u64, u64, u64)>,
    /// Bytes of the order being answered.
    order_bytes: u64,
    /// Compute time of the order about to start.
    order_compute: u64,
    /// Every order's latency over the run (orders that arrived at or after `measure_from_ns`).
    pub all: LatencyRecorder,
    /// Orders that arrived before this are left out of `all` (a warm-up).
    pub measure_from_ns: u64,
    /// Where the orders in `all` spent their time.
    pub split: Split,
    /// Orders since the last report.
    pub interval: LatencyRecorder,
    /// Orders answered.
    pub done: u64,
    /// Errors seen on completions.
    pub errors: u64,
    /// The last step posted a work request (the HCA must see the next step).
    pub posted: bool,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Server {{ qpn: {}, done: {} }}",
            self.qp.qpn(),
            self.done
        )
    }
}

impl Server {
    /// A server on `p` whose replies go to `dst` through a QP connected to `remote`.
    pub fn new(
        p: &dyn Provider,
        work: Work,
        path_mtu: u32,
        remote: QpAddr,
        dst: RemoteAddr,
    ) -> Result<(Self, u32), resex_shim::ShimError> {
        let cq = p.create_cq(64)?;
        let init = QpInit {
            max_send_wr: 64,
            max_recv_wr: 0,
            path_mtu,
            ..QpInit::default()
        };
        let mut qp = p.create_qp(&init, cq.cqn(), cq.cqn())?;
        qp.connect(remote)?;
        let most = work.turn.map_or(work.buffer, |t| t.buffer.max(work.buffer));
        let buf = p.reg_mr(&p.alloc(most.max(1))?, access::LOCAL_WRITE)?;
        let qpn = qp.qpn();
        Ok((
            Self {
                vcpu: Vcpu::new(),
                work,
                qp,
                cq,
                buf,
                dst,
                queue: VecDeque::new(),
                next_arrival: work.start_ns,
                state: State::Ready,
                wcs: Vec::new(),
                next_id: 0,
                orders: VecDeque::new(),
                order_bytes: work.buffer,
                order_compute: work.compute_ns,
                all: LatencyRecorder::new(),
                measure_from_ns: 0,
                split: Split::default(),
                interval: LatencyRecorder::new(),
                done: 0,
                errors: 0,
                posted: false,
            },
            qpn,
        ))
    }

    /// Bytes per WRITE (0: the whole reply in one). An external order without a chunk size
    /// sends WRITEs of the buffer: they all reuse it.
    fn chunk(&self) -> u64 {
        if self.work.external && self.work.chunk == 0 {
            self.work.buffer.max(1)
        } else {
            self.work.chunk
        }
    }

    /// WRITEs per reply.
    fn chunks(&self) -> u64 {
        let bytes = self.order_bytes;
        match self.chunk() {
            0 => 1,
            c if c >= bytes => 1,
            c => bytes.div_ceil(c),
        }
    }

    /// An external order arrives at `at_ns`: compute for `compute_ns`, then send `bytes`
    /// (at least 1). Only for servers whose work is [`Work::external`].
    pub fn push_order(&mut self, at_ns: u64, compute_ns: u64, bytes: u64) {
        self.orders.push_back((at_ns, compute_ns, bytes.max(1)));
    }

    /// Sending an order's reply (posted, not all completed).
    pub fn sending(&self) -> bool {
        matches!(self.state, State::Waiting(_))
    }

    /// Posts `n` chunks of the reply from chunk `from` on, each signalled.
    fn post_chunks(&mut self, n: u64, from: u64) -> Result<(), resex_shim::ShimError> {
        let bytes = self.order_bytes;
        let size = if self.chunks() == 1 {
            bytes
        } else {
            self.chunk()
        };
        for k in from..from + n {
            let len = size.min(bytes - k * size);
            // External orders reuse one chunk's buffer for every WRITE.
            let off = if self.work.external { 0 } else { k * size };
            self.next_id += 1;
            self.qp.post_send(&[SendWr {
                wr_id: self.next_id,
                op: SendOp::Write(RemoteAddr {
                    addr: self.dst.addr + off,
                    rkey: self.dst.rkey,
                }),
                sges: &[self.buf.sge(off, u32::try_from(len).unwrap_or(u32::MAX))],
                inline: None,
                signaled: true,
            }])?;
        }
        if n > 0 {
            self.posted = true;
        }
        Ok(())
    }

    /// The QP number (for the monitor's registration).
    pub fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    /// Orders waiting (not yet computed).
    pub fn backlog(&self) -> usize {
        self.queue.len()
    }

    /// The first step time after `now_ns` (a multiple of `dt_ns`) at which this server can do
    /// something of its own: start, take an arrival, finish computing, run out of budget, or
    /// get a new period's budget. `None`: it only waits for the HCA. Steps before it may be
    /// skipped with [`Self::skip`].
    pub fn next_event(&self, now_ns: u64, dt_ns: u64) -> Option<u64> {
        let grid = |t: u64| t.div_ceil(dt_ns).max(1) * dt_ns;
        let soon = now_ns + dt_ns;
        if soon < self.work.start_ns {
            return Some(grid(self.work.start_ns));
        }
        let mut ev: Option<u64> = None;
        let mut at = |t: u64| ev = Some(ev.map_or(t, |e| e.min(t)));
        if let Some(left) = self.vcpu.left_ns() {
            // A capped vCPU: its next period, and the step that spends its budget.
            at(grid(
                (now_ns / crate::vcpu::PERIOD_NS + 1) * crate::vcpu::PERIOD_NS,
            ));
            if left <= 0 {
                return ev; // parked until then
            }
            let steps = u64::try_from(left).unwrap_or(u64::MAX).div_ceil(dt_ns);
            at(now_ns + steps.max(1) * dt_ns);
        }
        if let Some(t) = self.work.turn {
            at(grid(t.at_ns).max(soon));
        }
        match self.state {
            State::Waiting(_) => {}
            State::Ready if self.work.external => {
                // An order is taken in the first step that ends after its arrival.
                if let Some(&(a, _, _)) = self.orders.front() {
                    at(((a / dt_ns + 1) * dt_ns).max(soon));
                }
            }
            State::Ready if self.work.rate > 0.0 && self.queue.is_empty() => {
                at(grid(self.next_arrival).max(soon));
            }
            State::Ready => at(soon),
            State::Computing { left, .. } => at(now_ns + left.div_ceil(dt_ns).max(1) * dt_ns),
        }
        ev
    }

    /// Accounts `steps` steps of `dt_ns` in which nothing happens but the server's busy-polling
    /// (and its computing, if it computes): what [`Self::step`] would have done, in bulk. Only
    /// valid for steps before [`Self::next_event`].
    pub fn skip(&mut self, now_ns: u64, steps: u64, dt_ns: u64) {
        if steps == 0 || now_ns + steps * dt_ns < self.work.start_ns {
            return;
        }
        if !self.vcpu.can_run(now_ns + dt_ns) {
            return;
        }
        let ns = steps * dt_ns;
        self.vcpu.run(ns);
        if let State::Computing {
            arrived,
            started,
            left,
        } = self.state
        {
            self.state = State::Computing {
                arrived,
                started,
                left: left.saturating_sub(ns),
            };
        }
    }

    /// The work changes at its turn (the order in hand is answered as it began).
    fn turn(&mut self, now_ns: u64) {
        let Some(t) = self.work.turn.filter(|t| now_ns >= t.at_ns) else {
            return;
        };
        if self.work.rate <= 0.0 && t.rate > 0.0 {
            self.next_arrival = now_ns;
        }
        self.work.buffer = t.buffer;
        self.work.rate = t.rate;
        self.work.compute_ns = t.compute_ns;
        self.order_compute = t.compute_ns;
        if t.rate <= 0.0 {
            self.queue.clear();
        }
        self.work.turn = None;
    }

    /// Advances the server by one step of `dt_ns` ending at `now_ns`.
    pub fn step(&mut self, now_ns: u64, dt_ns: u64) -> Result<(), resex_shim::ShimError> {
        self.posted = false;
        if now_ns < self.work.start_ns {
            return Ok(());
        }
        self.turn(now_ns);
        self.arrivals(now_ns);
        if !self.vcpu.can_run(now_ns) {
            return Ok(()); // parked: completions wait in the CQ unseen
        }
        // The server busy-polls: it runs (and is charged) for the whole step.
        self.vcpu.run(dt_ns);
        loop {
            let more = match self.state {
                State::Waiting(r) => self.poll_reply(now_ns, r)?,
                State::Ready => self.take_order(now_ns, dt_ns),
                State::Computing {
                    arrived,
                    started,
                    left,
                } => self.compute(now_ns, dt_ns, arrived, started, left)?,
            };
            if !more {
                return Ok(());
            }
        }
    }

    /// Open loop: orders arrive on schedule whatever the server is doing.
    #[inline]
    fn arrivals(&mut self, now_ns: u64) {
        if self.work.rate > 0.0 {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let gap = (1e9 / self.work.rate).max(1.0) as u64;
            while self.next_arrival <= now_ns {
                self.queue.push_back(self.next_arrival);
                self.next_arrival += gap;
            }
        }
    }

    /// Polls the reply's completions, posts more of its chunks, or answers the order; true
    /// when the server is ready for the next order in this step.
    #[inline]
    fn poll_reply(&mut self, now_ns: u64, mut r: Reply) -> Result<bool, resex_shim::ShimError> {
        self.wcs.clear();
        self.cq.poll(&mut self.wcs, 4)?;
        if self.wcs.is_empty() {
            return Ok(false);
        }
        for wc in &self.wcs {
            if !matches!(wc.status, resex_shim::WcStatus::Success) {
                self.errors += 1;
            }
        }
        r.out = r.out.saturating_sub(self.wcs.len() as u64);
        if r.to_post > 0 || r.out > 0 {
            let n = r.to_post.min(CHUNK_WINDOW - r.out.min(CHUNK_WINDOW));
            self.post_chunks(n, self.chunks() - r.to_post)?;
            r.to_post -= n;
            r.out += n;
            self.state = State::Waiting(r);
            return Ok(false);
        }
        if r.arrived >= self.measure_from_ns {
            self.all.record(r.arrived, now_ns);
            self.split.add(r.arrived, r.started, r.posted, now_ns);
        }
        self.interval.record(r.arrived, now_ns);
        self.done += 1;
        self.state = State::Ready;
        Ok(true)
    }

    /// Takes the next order, if one has arrived, and starts computing it; true if it did.
    #[inline]
    fn take_order(&mut self, now_ns: u64, dt_ns: u64) -> bool {
        let Some(arrived) = self.next_order(now_ns) else {
            return false;
        };
        if !self.work.external {
            self.order_bytes = self.work.buffer;
        }
        // Computing starts in this step (at its start, or at the arrival).
        let started = now_ns.saturating_sub(dt_ns).max(arrived);
        self.state = State::Computing {
            arrived,
            started,
            left: self.order_compute,
        };
        true
    }

    /// The arrival time of the next order to answer, taken off its queue.
    #[inline]
    fn next_order(&mut self, now_ns: u64) -> Option<u64> {
        if self.work.external {
            // Not before it arrives (a cap or a vCPU period can step the guest
            // earlier than the order's own wake-up).
            match self.orders.front() {
                Some(&(a, c, b)) if a < now_ns => {
                    self.orders.pop_front();
                    self.order_compute = c;
                    self.order_bytes = b;
                    Some(a)
                }
                _ => None,
            }
        } else if self.work.rate > 0.0 {
            self.queue.pop_front()
        } else {
            Some(now_ns)
        }
    }

    /// Computes for this step; once done, posts the reply's first chunks. Always ends the step.
    #[inline]
    fn compute(
        &mut self,
        now_ns: u64,
        dt_ns: u64,
        arrived: u64,
        started: u64,
        left: u64,
    ) -> Result<bool, resex_shim::ShimError> {
        if left > dt_ns {
            self.state = State::Computing {
                arrived,
                started,
                left: left - dt_ns,
            };
            return Ok(false);
        }
        let chunks = self.chunks();
        let first = chunks.min(CHUNK_WINDOW);
        self.post_chunks(first, 0)?;
        self.state = State::Waiting(Reply {
            arrived,
            started,
            posted: now_ns,
            to_post: chunks - first,
            out: first,
        });
        self.posted = true;
        Ok(false)
    }
}
