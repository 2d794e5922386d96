//! The lab host: softhca on a virtual clock, a far-side sink on port 1, one server model per
//! scenario guest on port 0, and the host core (the real monitor, mailboxes and pricing engine,
//! driven as resexd drives it) at the end of every interval, with caps applied to the vCPU
//! models after the actuator delay. The loops that move virtual time are in [`crate::events`].

use crate::driver::{Action, LabDriver};
pub use crate::error::LabError;
use crate::guest::{Build, Guest, HEAP};
use crate::result::{HostResult, LabResult, Series, VmResult, VmSeries, VmTraffic};
use resex_api::Snapshot;
use resex_core::periods::{InlineDetector, PeriodConfig};
use resex_core::{CoreConfig, HostLink};
use resex_guestmem::{GuestMemory, VecMemory};
use resex_pricing::PolicyConfig;
use resex_scenario::Scenario;
use resex_shim::provider::{access, Mr};
use resex_shim::{CompletionQueue, Provider, QpInit, SoftProvider};
use resex_softhca::{LinkConfig, PortId, SoftHca};
use std::sync::Arc;

/// Lab settings.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Seeds the phase of each open-loop guest's arrivals.
    pub seed: u64,
    /// Step of the guest models, ns (the HCA's link model is exact; guests react per step).
    pub dt_ns: u64,
    /// The pricing interval, ns (the daemon's 1 ms; a policy's `ledger.interval_ms` must
    /// match it).
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
    /// Record each VM's transmitted bytes per interval, as the monitor counted them, into the
    /// result ([`crate::result::VmTraffic`]: what traffic analysis, such as finding a periodic
    /// job's period, works from).
    pub traffic: bool,
    /// Guests take orders only from [`LabHost::push_order`]: the lab fabric's workers
    /// (`crate::fabric`), each order a compute phase and a transfer of its own size.
    pub external: bool,
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
            traffic: false,
            external: false,
        }
    }
}

/// A lab host built from a scenario.
pub struct LabHost {
    pub(crate) scenario: Scenario,
    pub(crate) cfg: LabConfig,
    pub(crate) link: LinkConfig,
    pub(crate) hca: SoftHca,
    _sink: (SoftProvider, Mr),
    /// The sink's CQs (one per server's peer QP), alive for the run.
    _peer_cqs: Vec<Box<dyn CompletionQueue>>,
    pub(crate) guests: Vec<Guest>,
    pub(crate) driver: LabDriver,
    policy: String,
    series: Option<Series>,
    /// The core's link utilisation summed over the intervals, and the intervals.
    link_sum: f64,
    stepped: u64,
    /// The period detector, fed every interval (only on a fabric whose hosts are in a fleet).
    periods: Option<Box<InlineDetector>>,
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

const PAGE: u64 = 4096;

/// The core's view of the scenario's link.
pub fn core_link(link: &LinkConfig) -> HostLink {
    HostLink {
        bits_per_sec: link.bits_per_sec,
        header_bytes: link.header_bytes,
    }
}

/// Refuses a step that does not divide the interval, a policy of another interval, a reply
/// split into too many chunks, and a periodic job (embedded host only).
fn check(scenario: &Scenario, cfg: &LabConfig) -> Result<(), LabError> {
    if cfg.dt_ns == 0 || !cfg.interval_ns.is_multiple_of(cfg.dt_ns) {
        return Err(LabError::Step {
            dt_ns: cfg.dt_ns,
            interval_ns: cfg.interval_ns,
        });
    }
    if let Some((name, p)) = &cfg.policy {
        if p.ledger.interval_ms * 1_000_000 != cfg.interval_ns {
            return Err(LabError::PolicyInterval {
                policy: name.clone(),
                policy_ms: p.ledger.interval_ms,
                interval_ns: cfg.interval_ns,
            });
        }
    }
    if let Some(g) = scenario.guests.iter().find(|g| {
        let w = &g.benchex;
        w.chunk.0 > 0 && w.buffer.0.div_ceil(w.chunk.0) > crate::server::MAX_CHUNKS
    }) {
        return Err(LabError::Chunks {
            guest: g.name.clone(),
            chunk: g.benchex.chunk.0,
            buffer: g.benchex.buffer.0,
            max: crate::server::MAX_CHUNKS,
        });
    }
    if let Some(g) = scenario.guests.iter().find(|g| g.benchex.periodic()) {
        return Err(LabError::Periodic {
            guest: g.name.clone(),
        });
    }
    Ok(())
}

/// A failure of the sink's provider.
fn sink_shim(source: resex_shim::ShimError) -> LabError {
    LabError::Shim {
        guest: "sink".into(),
        source,
    }
}

/// The far side: one memory region every server writes into (the QPs are made per server).
fn sink(scenario: &Scenario, hca: &SoftHca) -> Result<(SoftProvider, Mr), LabError> {
    let max_buf = scenario
        .guests
        .iter()
        .map(|g| g.turns.map_or(0, |t| t.buffer.0).max(g.benchex.buffer.0))
        .max()
        .unwrap_or(4096);
    let sink_ram = HEAP
        + max_buf.div_ceil(PAGE) * PAGE
        + (4 << 20)
        + (64 << 10) * scenario.guests.len() as u64;
    let sink_mem: Arc<dyn GuestMemory> = Arc::new(VecMemory::new(
        usize::try_from(sink_ram).unwrap_or(usize::MAX),
    ));
    let sink_port = hca.add_guest(sink_mem.clone(), PortId(1));
    let sink =
        SoftProvider::new(sink_mem, HEAP, sink_ram, Arc::new(sink_port)).map_err(sink_shim)?;
    let sink_mr = sink
        .reg_mr(
            &sink.alloc(max_buf.max(1)).map_err(sink_shim)?,
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        )
        .map_err(sink_shim)?;
    Ok((sink, sink_mr))
}

/// The sink's CQs, one per server's peer QP.
type PeerCqs = Vec<Box<dyn CompletionQueue>>;

/// Every scenario guest's server model, each with its peer QP on the sink (and that QP's CQ).
fn guests(
    scenario: &Scenario,
    cfg: &LabConfig,
    hca: &SoftHca,
    sink: &SoftProvider,
    sink_mr: &Mr,
    path_mtu: u32,
) -> Result<(Vec<Guest>, PeerCqs), LabError> {
    let mut seed = cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut guests = Vec::new();
    let mut peer_cqs = Vec::new();
    for (i, g) in scenario.guests.iter().enumerate() {
        let peer_cq = sink.create_cq(16).map_err(sink_shim)?;
        let init = QpInit {
            max_send_wr: 16,
            max_recv_wr: 0,
            path_mtu,
            ..QpInit::default()
        };
        let peer = sink
            .create_qp(&init, peer_cq.cqn(), peer_cq.cqn())
            .map_err(sink_shim)?;
        peer_cqs.push(peer_cq);
        seed = resex_common::rng::xorshift(seed);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let measure_from_ns = (cfg.warmup_s.max(0.0) * 1e9) as u64;
        guests.push(Guest::new(
            i,
            g,
            Build {
                hca,
                peer,
                reply_to: sink_mr.remote(0),
                path_mtu,
                phase_ns: phase_ns(seed, g.benchex.rate),
                measure_from_ns,
                external: cfg.external,
            },
        )?);
    }
    Ok((guests, peer_cqs))
}

/// The phase of an open-loop guest's arrivals (at `rate` orders/s) drawn from `seed`.
fn phase_ns(seed: u64, rate: f64) -> u64 {
    if rate > 0.0 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let gap = (1e9 / rate) as u64;
        seed % gap.max(1)
    } else {
        0
    }
}

impl LabHost {
    /// Builds the host: the sink, every guest's server model, and the driver of the core.
    pub fn new(scenario: &Scenario, cfg: LabConfig) -> Result<Self, LabError> {
        check(scenario, &cfg)?;
        let link = crate::link_of(scenario);
        let hca = SoftHca::new(link, 2);
        let (sink, sink_mr) = sink(scenario, &hca)?;
        let (guests, peer_cqs) = guests(scenario, &cfg, &hca, &sink, &sink_mr, link.mtu)?;
        let core_cfg = CoreConfig {
            interval_ns: cfg.interval_ns,
            link: core_link(&link),
            ..CoreConfig::default()
        };
        let policy = cfg
            .policy
            .as_ref()
            .map_or_else(|| "none".to_owned(), |p| p.0.clone());
        let driver = LabDriver::new(core_cfg, cfg.policy.clone(), cfg.actuator_delay_ns);
        Ok(Self {
            scenario: scenario.clone(),
            cfg,
            link,
            hca,
            _sink: (sink, sink_mr),
            _peer_cqs: peer_cqs,
            guests,
            driver,
            policy,
            series: None,
            link_sum: 0.0,
            stepped: 0,
            periods: None,
        })
    }

    /// Runs to the end; `progress(done, total)` is called about a hundred times.
    pub fn run(mut self, mut progress: impl FnMut(u64, u64)) -> Result<LabResult, LabError> {
        let duration_s = self.cfg.duration_s.unwrap_or(self.scenario.duration_s);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let end = (duration_s * 1e9) as u64;
        let intervals = end / self.cfg.interval_ns;
        let tick = (intervals / 100).max(1);
        if self.cfg.skip_idle {
            self.run_events(intervals, tick, &mut progress)?;
        } else {
            self.run_stepped(intervals, tick, &mut progress)?;
        }
        Ok(self.result(duration_s))
    }

    /// End of interval `i` at `now`: guests that started join, reports go into mailboxes, CPU
    /// is sampled, the core steps, and each guest's figures are updated from its row.
    pub(crate) fn interval(&mut self, i: u64, now: u64) -> Result<(), LabError> {
        let period = i.is_multiple_of(self.cfg.report_every.max(1));
        let period_ns = self.cfg.interval_ns * self.cfg.report_every.max(1);
        for g in &mut self.guests {
            if now <= g.start_ns {
                continue;
            }
            if !g.started {
                g.started = true;
                self.driver
                    .add(g.id, g.info.clone(), g.mem.clone(), &g.doc)?;
                // It used no CPU before this interval.
                self.driver.cpu_sample(
                    g.id,
                    resex_core::CpuSample {
                        total_ns: g.cpu_total_ns,
                        at_ns: now - self.cfg.interval_ns,
                    },
                )?;
            }
            g.cpu_total_ns += g.server.vcpu.take_used();
            if period {
                g.report(now, period_ns);
            }
            // The host's own evidence: what softhca measured of its work requests.
            if let Some(st) = self.hca.stats(g.server.qpn()) {
                self.driver.nic_sample(
                    g.id,
                    resex_common::NicTimes {
                        wqes: st.timed,
                        sojourn_ns: st.sojourn_ns,
                        wire_ns: st.wire_ns,
                    },
                )?;
            }
        }
        let guests = &self.guests;
        let out = self.driver.interval_end(
            now,
            guests
                .iter()
                .filter(|g| g.started)
                .map(|g| (g.id, g.cpu_total_ns)),
        )?;
        if let Some(p) = &mut self.periods {
            p.tick(now, out);
        }
        self.link_sum += out.link_util;
        self.stepped += 1;
        // Rows are in id order, and guest k has id k + 1: a merge walk.
        for row in &out.rows {
            let Some(g) = usize::try_from(row.vm.0)
                .ok()
                .and_then(|k| k.checked_sub(1))
                .and_then(|k| self.guests.get_mut(k))
            else {
                continue;
            };
            g.counted += row.delta;
            let cap = g.server.vcpu.cap().unwrap_or_else(|| g.info.full_cap());
            g.intervals += 1;
            g.cpu_sum += row.cpu_pct;
            g.cap_sum += cap;
            g.cap_min = g.cap_min.min(cap);
            if let Some(p) = row.priced {
                g.balance_min = Some(g.balance_min.map_or(p.balance, |b: f64| b.min(p.balance)));
            }
        }
        if self.cfg.series && period {
            self.point(now);
        }
        if self.cfg.traffic {
            for g in self.guests.iter_mut().filter(|g| g.started) {
                g.traffic.push(g.counted.tx_bytes - g.at_traffic);
                g.at_traffic = g.counted.tx_bytes;
            }
        }
        Ok(())
    }

    /// Applies the caps and transmit limits due at `now`; `changed` sees each guest whose
    /// vCPU cap changes first (to bring it up to `now`).
    pub(crate) fn apply_caps(&mut self, now: u64, mut changed: impl FnMut(usize, &mut Guest)) {
        while let Some((id, action)) = self.driver.pop_due(now) {
            let Some(k) = usize::try_from(id.0).ok().and_then(|k| k.checked_sub(1)) else {
                continue;
            };
            let Some(g) = self.guests.get_mut(k) else {
                continue;
            };
            match action {
                Action::Cap(cap) => {
                    changed(k, g);
                    g.server.vcpu.set_cap(cap);
                }
                Action::Tx(tx) => {
                    g.policy_tx = tx;
                    self.hca.set_tx_limit(g.vport, g.tx_in_force(), now);
                }
            }
        }
    }

    /// The lab fabric's ceiling on guest `k`'s vport (`None`: lifted), from `now` on; the
    /// core's own limit still holds beneath it. A ceiling that moves keeps its token bucket.
    pub(crate) fn set_fabric_ceiling(&mut self, k: usize, bps: Option<u64>, now: u64) {
        let Some(g) = self.guests.get_mut(k) else {
            return;
        };
        g.fabric_max = bps;
        let tx = g.tx_in_force();
        if bps.is_some() {
            self.hca.set_tx_rate(g.vport, tx, now);
        } else {
            self.hca.set_tx_limit(g.vport, tx, now);
        }
    }

    /// Detects its guests' periods from now on, on a clock whose zero is Unix
    /// `unix_at_zero_ns` (resexd's settings: an 8 192-interval window, a verdict redone every
    /// 2 s).
    pub(crate) fn detect_periods(&mut self, unix_at_zero_ns: u64) {
        let iv = self.cfg.interval_ns;
        let cfg = PeriodConfig::new(8192, iv, 2_000_000_000 / iv.max(1));
        self.periods = Some(Box::new(InlineDetector::new(cfg, unix_at_zero_ns)));
    }

    /// The API's snapshot at `now` as resexd publishes it: the core's, each VM's period
    /// verdict, the uptime.
    pub(crate) fn snapshot(&mut self, now: u64) -> Snapshot {
        let mut s = self.driver.snapshot(now);
        if let Some(p) = &mut self.periods {
            let verdicts = p.verdicts();
            for v in &mut s.vms {
                v.period = verdicts.get(&v.id).cloned();
            }
        }
        s.uptime_ms = now / 1_000_000;
        s
    }

    /// The result of a run moved by hand ([`crate::fabric`]).
    pub(crate) fn finish(mut self, duration_s: f64) -> LabResult {
        self.result(duration_s)
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
        let engine = self.driver.core().engine();
        for (g, vs) in self.guests.iter_mut().zip(&mut series.vms) {
            let d = g.counted - g.at_point;
            g.at_point = g.counted;
            #[allow(clippy::cast_precision_loss)]
            let (data, pkts) = (d.tx_bytes as f64 * 8.0, d.tx_packets as f64);
            bits += data + pkts * header * 8.0;
            let has = g.period.count > 0;
            vs.lat_mean_us.push(has.then(|| g.period.mean_ns / 1000.0));
            #[allow(clippy::cast_precision_loss)]
            vs.lat_p99_us
                .push(has.then(|| g.period.p99_ns as f64 / 1000.0));
            vs.cap
                .push(g.server.vcpu.cap().unwrap_or_else(|| g.info.full_cap()));
            #[allow(clippy::cast_precision_loss)]
            vs.tx_max_pct.push(
                self.hca
                    .tx_limit(g.vport)
                    .and_then(|t| t.max_bps)
                    .map_or(100.0, |m| 100.0 * m as f64 / self.link.bits_per_sec as f64),
            );
            vs.mbps.push(data / secs / 1e6);
            let rate = engine.and_then(|e| e.account(g.id)).map_or(1.0, |a| a.rate);
            vs.rate.push(rate);
        }
        #[allow(clippy::cast_precision_loss)]
        series
            .link_util
            .push(bits / (self.link.bits_per_sec as f64 * secs));
    }

    fn result(&mut self, duration_s: f64) -> LabResult {
        let us = |ns: f64| ns / 1000.0;
        let mut wire_bits = 0.0;
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
                if let Some(w) = self.hca.stats(g.server.qpn()) {
                    #[allow(clippy::cast_precision_loss)]
                    {
                        wire_bits += (w.tx_bytes as f64
                            + w.tx_packets as f64 * f64::from(self.link.header_bytes))
                            * 8.0;
                    }
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
                        g.info.full_cap()
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
                #[allow(clippy::cast_precision_loss)]
                link_util: self.link_sum / self.stepped.max(1) as f64,
                wire_util: wire_bits / capacity,
            },
            series: self.series.clone(),
            traffic: self.cfg.traffic.then(|| {
                self.guests
                    .iter()
                    .map(|g| VmTraffic {
                        name: g.name.clone(),
                        #[allow(clippy::cast_precision_loss)]
                        start_s: g.start_ns as f64 / 1e9,
                        interval_ns: self.cfg.interval_ns,
                        tx_bytes: g.traffic.clone(),
                    })
                    .collect()
            }),
        }
    }
}

#[cfg(test)]
mod tests;
