//! The lab host: softhca on a virtual clock, a far-side sink on port 1, one server model per
//! scenario guest on port 0, the real monitor reading each guest's rings every interval, the
//! real pricing engine, and caps applied to the vCPU models after the actuator delay.

use crate::result::{HostResult, LabResult, Series, VmResult, VmSeries};
use crate::server::{compute_ns, Server, Work};
use resex_guestmem::{GuestMemory, VecMemory};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::{Counters, VmMonitor};
use resex_pricing::{
    BaselineLearner, Engine, IntervalInput, LatencyReport, PolicyConfig, VmId, VmSpec, VmUsage,
};
use resex_proto::{Registration, REGISTRATION_VERSION};
use resex_scenario::Scenario;
use resex_shim::provider::{access, Mr, QpAddr};
use resex_shim::{CompletionQueue, Provider, QpInit, QueuePair, SoftProvider};
use resex_softhca::{LinkConfig, PortId, SoftHca};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

/// Lab settings.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Seeds the phase of each open-loop guest's arrivals.
    pub seed: u64,
    /// Step of the guest models, ns (the HCA's link model is exact; guests react per step).
    pub dt_ns: u64,
    /// The pricing interval, ns (the daemon's 1 ms).
    pub interval_ns: u64,
    /// Latency report period of reporting guests, intervals.
    pub report_every: u64,
    /// Delay between a pricing decision and its cap taking effect, ns.
    pub actuator_delay_ns: u64,
    /// The policy (name, configuration); `None`: monitor only.
    pub policy: Option<(String, PolicyConfig)>,
    /// Virtual seconds to run (`None`: the scenario's duration).
    pub duration_s: Option<f64>,
    /// Jump over steps in which nothing can happen (the result is the same as stepping every
    /// `dt_ns`; a test holds it to that).
    pub skip_idle: bool,
    /// Latency figures of the result leave out orders that arrived before this, virtual seconds.
    pub warmup_s: f64,
    /// Record time series (one point per report period) into the result.
    pub series: bool,
}

impl Default for LabConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            dt_ns: 5_000,
            interval_ns: 1_000_000,
            report_every: 10,
            actuator_delay_ns: 0,
            policy: None,
            duration_s: None,
            skip_idle: true,
            warmup_s: 0.0,
            series: false,
        }
    }
}

/// Why the lab could not run.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The shim refused something (the model's own verbs).
    #[error("guest {guest}: {source}")]
    Shim {
        /// Which guest.
        guest: String,
        /// Why.
        source: resex_shim::ShimError,
    },
    /// The monitor refused a registration.
    #[error("guest {guest}: registration refused: {why}")]
    Registration {
        /// Which guest.
        guest: String,
        /// Why.
        why: String,
    },
    /// Pricing failed.
    #[error("pricing: {0}")]
    Pricing(#[from] resex_pricing::PricingError),
    /// A setting that cannot work.
    #[error("{0}")]
    Invalid(String),
}

struct Guest {
    name: String,
    id: u32,
    vcpus: u32,
    weight: f64,
    sla: Option<f64>,
    reports: bool,
    report_scale: f64,
    lie_from_ns: u64,
    start_ns: u64,
    mem: Arc<VecMemory>,
    server: Server,
    monitor: VmMonitor,
    /// Sink-side QP, kept alive for the run.
    _peer: Box<dyn QueuePair>,
    in_engine: bool,
    learner: BaselineLearner,
    intervals: u64,
    cpu_sum: f64,
    cap_sum: f64,
    cap_min: f64,
    balance_min: Option<f64>,
    counted: Counters,
    /// The latency of the last report period.
    period: resex_common::LatencySummary,
    /// Counted at the last series point.
    at_point: Counters,
}

/// A lab host built from a scenario.
pub struct LabHost {
    scenario: Scenario,
    cfg: LabConfig,
    link: LinkConfig,
    hca: SoftHca,
    _sink: (SoftProvider, Mr),
    /// The sink's CQs (one per server's peer QP), alive for the run.
    _peer_cqs: Vec<Box<dyn CompletionQueue>>,
    guests: Vec<Guest>,
    engine: Option<Engine>,
    policy: String,
    caps: VecDeque<(u64, usize, Option<f64>)>,
    series: Option<Series>,
}

impl std::fmt::Debug for LabHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LabHost {{ {}: {} guests }}",
            self.scenario.name,
            self.guests.len()
        )
    }
}

const HEAP: u64 = 1 << 20;
const PAGE: u64 = 4096;

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

impl LabHost {
    /// Builds the host: the sink, every guest's server model and monitor, and the engine.
    pub fn new(scenario: &Scenario, cfg: LabConfig) -> Result<Self, LabError> {
        if cfg.dt_ns == 0 || !cfg.interval_ns.is_multiple_of(cfg.dt_ns) {
            return Err(LabError::Invalid(format!(
                "the step ({} ns) must divide the interval ({} ns)",
                cfg.dt_ns, cfg.interval_ns
            )));
        }
        let link = scenario.link_config();
        let hca = SoftHca::new(link, 2);
        let path_mtu = link.mtu;
        let max_buf = scenario
            .guests
            .iter()
            .map(|g| g.benchex.buffer.0)
            .max()
            .unwrap_or(4096);
        // The far side: one memory region every server writes into, and a QP per server.
        let sink_ram = HEAP
            + max_buf.div_ceil(PAGE) * PAGE
            + (4 << 20)
            + (64 << 10) * scenario.guests.len() as u64;
        let sink_mem: Arc<dyn GuestMemory> = Arc::new(VecMemory::new(
            usize::try_from(sink_ram).unwrap_or(usize::MAX),
        ));
        let sink_port = hca.add_guest(sink_mem.clone(), PortId(1));
        let shim = |guest: &str| {
            let g = guest.to_owned();
            move |source| LabError::Shim { guest: g, source }
        };
        let sink = SoftProvider::new(sink_mem, HEAP, sink_ram, Arc::new(sink_port))
            .map_err(shim("sink"))?;
        let sink_mr = sink
            .reg_mr(
                &sink.alloc(max_buf.max(1)).map_err(shim("sink"))?,
                access::LOCAL_WRITE | access::REMOTE_WRITE,
            )
            .map_err(shim("sink"))?;
        let mut seed = cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut guests = Vec::new();
        let mut peer_cqs = Vec::new();
        for (i, g) in scenario.guests.iter().enumerate() {
            let w = &g.benchex;
            let ram = HEAP + w.buffer.0.div_ceil(PAGE) * PAGE + (2 << 20);
            let mem = Arc::new(VecMemory::new(usize::try_from(ram).unwrap_or(usize::MAX)));
            let dynmem: Arc<dyn GuestMemory> = mem.clone();
            let port = hca.add_guest(dynmem.clone(), PortId(0));
            let p = SoftProvider::new(dynmem, HEAP, ram, Arc::new(port)).map_err(shim(&g.name))?;
            let peer_cq = sink.create_cq(16).map_err(shim("sink"))?;
            let init = QpInit {
                max_send_wr: 16,
                max_recv_wr: 0,
                path_mtu,
                ..QpInit::default()
            };
            let mut peer = sink
                .create_qp(&init, peer_cq.cqn(), peer_cq.cqn())
                .map_err(shim("sink"))?;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let start_ns = (g.start_s * 1e9) as u64;
            seed = xorshift(seed);
            let phase = if w.rate > 0.0 {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let gap = (1e9 / w.rate) as u64;
                seed % gap.max(1)
            } else {
                0
            };
            let work = Work {
                buffer: w.buffer.0,
                rate: w.rate,
                compute_ns: compute_ns(w.compute, w.buffer.0),
                start_ns: start_ns + phase,
            };
            let (mut server, qpn) = Server::new(
                &p,
                work,
                path_mtu,
                QpAddr::qpn(peer.qpn()),
                sink_mr.remote(0),
            )
            .map_err(shim(&g.name))?;
            server.vcpu.set_cap(g.cap);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            {
                server.measure_from_ns = (cfg.warmup_s.max(0.0) * 1e9) as u64;
            }
            peer.connect(QpAddr::qpn(qpn)).map_err(shim("sink"))?;
            peer_cqs.push(peer_cq);
            let doc = Registration {
                version: REGISTRATION_VERSION,
                vm: Some(g.name.clone()),
                path_mtu,
                qps: p.registration(qpn).into_iter().collect(),
                mailbox: None,
            };
            let layout =
                validate(&doc, ram, &Limits::default()).map_err(|e| LabError::Registration {
                    guest: g.name.clone(),
                    why: e.to_string(),
                })?;
            guests.push(Guest {
                name: g.name.clone(),
                id: u32::try_from(i + 1).unwrap_or(u32::MAX),
                vcpus: g.vcpus.max(1),
                weight: g.weight,
                sla: g.sla_threshold,
                reports: g.reports,
                report_scale: g.report_scale,
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                lie_from_ns: (g.report_scale_from_s * 1e9) as u64,
                start_ns,
                mem,
                server,
                monitor: VmMonitor::new(layout),
                _peer: peer,
                in_engine: false,
                learner: BaselineLearner::default(),
                intervals: 0,
                cpu_sum: 0.0,
                cap_sum: 0.0,
                cap_min: f64::INFINITY,
                balance_min: None,
                counted: Counters::default(),
                at_point: Counters::default(),
                period: resex_common::LatencySummary::default(),
            });
        }
        let (engine, policy) = match &cfg.policy {
            Some((name, pc)) => (Some(Engine::new(pc.clone())), name.clone()),
            None => (None, "none".to_owned()),
        };
        Ok(Self {
            scenario: scenario.clone(),
            cfg,
            link,
            hca,
            _sink: (sink, sink_mr),
            _peer_cqs: peer_cqs,
            guests,
            engine,
            policy,
            caps: VecDeque::new(),
            series: None,
        })
    }

    /// Runs to the end; `progress(done, total)` is called about a hundred times.
    pub fn run(mut self, mut progress: impl FnMut(u64, u64)) -> Result<LabResult, LabError> {
        let duration_s = self.cfg.duration_s.unwrap_or(self.scenario.duration_s);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let end = (duration_s * 1e9) as u64;
        let (dt, iv) = (self.cfg.dt_ns, self.cfg.interval_ns);
        let steps_per_interval = iv / dt;
        let intervals = end / iv;
        let tick = (intervals / 100).max(1);
        if self.cfg.skip_idle {
            self.run_events(intervals, tick, &mut progress)?;
        } else {
            for k in 0..intervals {
                for s in 0..steps_per_interval {
                    let now = k * iv + (s + 1) * dt;
                    self.hca.poll(now);
                    for g in &mut self.guests {
                        g.server.step(now, dt).map_err(|source| LabError::Shim {
                            guest: g.name.clone(),
                            source,
                        })?;
                    }
                    while self.caps.front().is_some_and(|c| c.0 <= now) {
                        let (_, gi, cap) = self.caps.pop_front().expect("front exists");
                        self.guests[gi].server.vcpu.set_cap(cap);
                    }
                }
                self.interval(k + 1, (k + 1) * iv)?;
                if (k + 1).is_multiple_of(tick) {
                    progress(k + 1, intervals);
                }
            }
        }
        Ok(self.result(duration_s))
    }

    /// The event-driven loop: only the steps at which something can happen are visited, and at
    /// each only the guests with something to do step (the others are accounted in bulk when
    /// they next step or at the interval's end). A guest steps at its own next event (a
    /// start, an arrival, computing done, its vCPU budget spent or renewed), when the HCA
    /// retired work on its QP, or when a cap is applied to it. The HCA is told of every
    /// doorbell, so it only looks at QPs with work. The result is the same as stepping every
    /// guest every step (`skip_idle = false`; a test holds it to that).
    fn run_events(
        &mut self,
        intervals: u64,
        tick: u64,
        progress: &mut impl FnMut(u64, u64),
    ) -> Result<(), LabError> {
        let (dt, iv) = (self.cfg.dt_ns, self.cfg.interval_ns);
        let grid = |t: u64| t.div_ceil(dt) * dt;
        self.hca.set_doorbell_hints(true);
        let by_qpn: HashMap<u32, usize> = self
            .guests
            .iter()
            .enumerate()
            .map(|(i, g)| (g.server.qpn(), i))
            .collect();
        let n = self.guests.len();
        // Per guest: accounted through this time, and its next own event (MAX: none).
        let mut synced = vec![0u64; n];
        let mut wake = vec![u64::MAX; n];
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        for (i, g) in self.guests.iter().enumerate() {
            if let Some(t) = g.server.next_event(0, dt) {
                wake[i] = t;
                heap.push(Reverse((t, i)));
            }
        }
        let mut due: Vec<usize> = Vec::new();
        let mut retired: Vec<u32> = Vec::new();
        for k in 0..intervals {
            let end = (k + 1) * iv;
            let mut now = k * iv + dt;
            loop {
                self.hca.poll(now);
                due.clear();
                retired.clear();
                self.hca.take_retired(&mut retired);
                due.extend(retired.iter().filter_map(|q| by_qpn.get(q).copied()));
                while let Some(&Reverse((t, i))) = heap.peek() {
                    if t > now {
                        break;
                    }
                    heap.pop();
                    if wake[i] == t {
                        due.push(i);
                    }
                }
                due.sort_unstable();
                due.dedup();
                let mut posted = false;
                for &i in &due {
                    let g = &mut self.guests[i];
                    let from = synced[i];
                    g.server
                        .skip(from, (now - dt).saturating_sub(from) / dt, dt);
                    g.server.step(now, dt).map_err(|source| LabError::Shim {
                        guest: g.name.clone(),
                        source,
                    })?;
                    synced[i] = now;
                    if g.server.posted {
                        posted = true;
                        self.hca.doorbell(g.server.qpn());
                    }
                    wake[i] = g.server.next_event(now, dt).unwrap_or(u64::MAX);
                    if wake[i] != u64::MAX {
                        heap.push(Reverse((wake[i], i)));
                    }
                }
                while self.caps.front().is_some_and(|c| c.0 <= now) {
                    let (_, i, cap) = self.caps.pop_front().expect("front exists");
                    let g = &mut self.guests[i];
                    let from = synced[i];
                    g.server.skip(from, (now - from) / dt, dt);
                    synced[i] = now;
                    g.server.vcpu.set_cap(cap);
                    // The next step, whatever the guest's own events: a cap can unpark a
                    // vCPU whose completion arrived while it was parked.
                    wake[i] = now + dt;
                    heap.push(Reverse((wake[i], i)));
                }
                if now >= end {
                    break;
                }
                let mut next = end;
                if posted {
                    next = now + dt;
                } else {
                    while let Some(&Reverse((t, i))) = heap.peek() {
                        if wake[i] == t {
                            next = next.min(t);
                            break;
                        }
                        heap.pop();
                    }
                    if let Some(d) = self.hca.next_due_ns() {
                        next = next.min(grid(d));
                    }
                    if let Some(c) = self.caps.front() {
                        next = next.min(grid(c.0));
                    }
                }
                now = next.max(now + dt);
            }
            for (i, g) in self.guests.iter_mut().enumerate() {
                let from = synced[i];
                g.server.skip(from, (end - from) / dt, dt);
                synced[i] = end;
            }
            self.interval(k + 1, end)?;
            if (k + 1).is_multiple_of(tick) {
                progress(k + 1, intervals);
            }
        }
        Ok(())
    }

    /// End of interval `i` at `now`: monitor, reports, pricing, caps.
    fn interval(&mut self, i: u64, now: u64) -> Result<(), LabError> {
        let iv = self.cfg.interval_ns;
        let mut usage = Vec::with_capacity(self.guests.len());
        let mut bits = 0.0;
        let header = f64::from(self.link.header_bytes) * 8.0;
        for g in &mut self.guests {
            if now <= g.start_ns {
                continue;
            }
            g.monitor.scan(&*g.mem, 1 << 16);
            let total = g.monitor.total();
            let d = total - g.counted;
            #[allow(clippy::cast_precision_loss)]
            {
                bits += d.tx_bytes as f64 * 8.0 + d.tx_packets as f64 * header;
            }
            g.counted = total;
            #[allow(clippy::cast_precision_loss)]
            let cpu_pct = g.server.vcpu.take_used() as f64 * 100.0 / iv as f64;
            let mut report = None;
            if i.is_multiple_of(self.cfg.report_every.max(1)) {
                let s = g.server.interval.take_interval();
                g.period = s;
                if g.reports && s.count > 0 {
                    let k = if now > g.lie_from_ns {
                        g.report_scale
                    } else {
                        1.0
                    };
                    #[allow(clippy::cast_precision_loss)]
                    let r = LatencyReport {
                        count: s.count,
                        mean_ns: s.mean_ns * k,
                        stddev_ns: s.stddev_ns * k,
                        p50_ns: s.p50_ns as f64 * k,
                        p99_ns: s.p99_ns as f64 * k,
                        p999_ns: s.p999_ns as f64 * k,
                    };
                    g.learner.learn(&r);
                    report = Some(r);
                }
            }
            let cap = g.server.vcpu.cap().unwrap_or(100.0 * f64::from(g.vcpus));
            g.intervals += 1;
            g.cpu_sum += cpu_pct;
            g.cap_sum += cap;
            g.cap_min = g.cap_min.min(cap);
            usage.push(VmUsage {
                vm: VmId(g.id),
                cpu_pct,
                mtus: d.mtus,
                bytes: d.tx_bytes,
                report,
            });
        }
        // What the host measures: the monitor's counts against the port's rate.
        #[allow(clippy::cast_precision_loss)]
        let link_util = bits / (self.link.bits_per_sec as f64 * iv as f64 / 1e9);
        self.price(i, now, usage, link_util)?;
        if self.cfg.series && i.is_multiple_of(self.cfg.report_every.max(1)) {
            self.point(now);
        }
        Ok(())
    }

    /// Appends one series point (the report period that ends at `now`).
    fn point(&mut self, now: u64) {
        let period_ns = self.cfg.interval_ns * self.cfg.report_every.max(1);
        #[allow(clippy::cast_precision_loss)]
        let secs = period_ns as f64 / 1e9;
        let header = f64::from(self.link.header_bytes);
        let n = self.guests.len();
        let series = self.series.get_or_insert_with(|| Series {
            vms: Vec::with_capacity(n),
            ..Series::default()
        });
        if series.vms.is_empty() {
            series.vms = self
                .guests
                .iter()
                .map(|g| VmSeries {
                    name: g.name.clone(),
                    ..VmSeries::default()
                })
                .collect();
        }
        #[allow(clippy::cast_precision_loss)]
        series.t_s.push(now as f64 / 1e9);
        let mut bits = 0.0;
        for (g, vs) in self.guests.iter_mut().zip(&mut series.vms) {
            let d = g.counted - g.at_point;
            g.at_point = g.counted;
            #[allow(clippy::cast_precision_loss)]
            let (data, pkts) = (d.tx_bytes as f64 * 8.0, d.tx_packets as f64);
            bits += data + pkts * header * 8.0;
            let has = g.period.count > 0;
            #[allow(clippy::cast_precision_loss)]
            vs.lat_mean_us.push(has.then(|| g.period.mean_ns / 1000.0));
            #[allow(clippy::cast_precision_loss)]
            vs.lat_p99_us
                .push(has.then(|| g.period.p99_ns as f64 / 1000.0));
            vs.cap
                .push(g.server.vcpu.cap().unwrap_or(100.0 * f64::from(g.vcpus)));
            vs.mbps.push(data / secs / 1e6);
            let rate = self
                .engine
                .as_ref()
                .and_then(|e| e.account(VmId(g.id)))
                .map_or(1.0, |a| a.rate);
            vs.rate.push(rate);
        }
        #[allow(clippy::cast_precision_loss)]
        series
            .link_util
            .push(bits / (self.link.bits_per_sec as f64 * secs));
    }

    /// The pricing part of the end of interval `i`.
    fn price(
        &mut self,
        i: u64,
        now: u64,
        mut usage: Vec<VmUsage>,
        link_util: f64,
    ) -> Result<(), LabError> {
        let Some(engine) = &mut self.engine else {
            return Ok(());
        };
        for g in &mut self.guests {
            if now <= g.start_ns {
                continue;
            }
            // A reporting VM joins once its quiet latency is learned (the daemon's rule: the
            // mean of its first ten reports); the others when they start.
            let ready = !g.reports || g.learner.baseline().is_some();
            if ready && !g.in_engine {
                engine.add_vm(
                    VmSpec {
                        id: VmId(g.id),
                        name: g.name.clone(),
                        vcpus: g.vcpus,
                        weight: g.weight,
                        sla_threshold: g.sla,
                        baseline: g.learner.baseline(),
                    },
                    i,
                )?;
                g.in_engine = true;
            }
        }
        usage.retain(|u| self.guests.iter().any(|g| g.id == u.vm.0 && g.in_engine));
        let out = engine.step(&IntervalInput {
            interval: i,
            link_util: Some(link_util),
            usage: &usage,
        })?;
        for row in &out.rows {
            if let Some(g) = self.guests.iter_mut().find(|g| g.id == row.vm.0) {
                g.balance_min = Some(
                    g.balance_min
                        .map_or(row.balance, |b: f64| b.min(row.balance)),
                );
            }
        }
        for d in &out.decisions {
            if let Some(gi) = self.guests.iter().position(|g| g.id == d.vm.0) {
                let full = 100.0 * f64::from(self.guests[gi].vcpus);
                let cap = (d.cap_pct < full - 1e-9).then_some(d.cap_pct);
                self.caps
                    .push_back((now + self.cfg.actuator_delay_ns, gi, cap));
            }
        }
        Ok(())
    }

    fn result(&mut self, duration_s: f64) -> LabResult {
        let us = |ns: f64| ns / 1000.0;
        let mut link_bits = 0.0;
        let vms = self
            .guests
            .iter()
            .map(|g| {
                let s = g.server.all.clone().take_interval();
                let split = g.server.split.means_us();
                let has = s.count > 0;
                #[allow(clippy::cast_precision_loss)]
                let f = |x: u64| has.then(|| us(x as f64));
                #[allow(clippy::cast_precision_loss)]
                let tx_bits = g.counted.tx_bytes as f64 * 8.0;
                #[allow(clippy::cast_precision_loss)]
                {
                    link_bits += tx_bits
                        + g.counted.tx_packets as f64 * f64::from(self.link.header_bytes) * 8.0;
                }
                #[allow(clippy::cast_precision_loss)]
                let n = g.intervals.max(1) as f64;
                VmResult {
                    name: g.name.clone(),
                    lat_mean_us: has.then(|| us(s.mean_ns)),
                    lat_p50_us: f(s.p50_ns),
                    lat_p99_us: f(s.p99_ns),
                    lat_p999_us: f(s.p999_ns),
                    requests: g.server.done,
                    tx_mbps: tx_bits / duration_s.max(1e-9) / 1e6,
                    mtus: g.counted.mtus,
                    cpu_pct_mean: g.cpu_sum / n,
                    cap_mean: g.cap_sum / n,
                    cap_min: if g.cap_min.is_finite() {
                        g.cap_min
                    } else {
                        100.0 * f64::from(g.vcpus)
                    },
                    balance_min: g.balance_min,
                    queue_us: split.map(|s| s.0),
                    compute_us: split.map(|s| s.1),
                    wait_us: split.map(|s| s.2),
                }
            })
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let capacity = self.link.bits_per_sec as f64 * duration_s.max(1e-9);
        LabResult {
            scenario: self.scenario.name.clone(),
            policy: self.policy.clone(),
            seed: self.cfg.seed,
            duration_s,
            vms,
            host: HostResult {
                link_util: link_bits / capacity,
            },
            series: self.series.clone(),
        }
    }
}
