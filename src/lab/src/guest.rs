//! One lab guest: its memory, its BenchEx server model on a vCPU, its latency mailbox and
//! registration, and the figures the run reports about it.

use crate::error::LabError;
use crate::server::{compute_ns, Server, Work};
use resex_common::{LatencySummary, VmId};
use resex_core::VmInfo;
use resex_guestmem::{GuestMemory, VecMemory};
use resex_ibmon::Counters;
use resex_proto::{Registration, REGISTRATION_VERSION};
use resex_scenario::GuestSpec;
use resex_shim::mailbox::{Mailbox, DEFAULT_BLOCKS, DEFAULT_BLOCK_SIZE};
use resex_shim::provider::{QpAddr, RemoteAddr};
use resex_shim::{QueuePair, SoftProvider};
use resex_softhca::mr::GuestId;
use resex_softhca::{PortId, SoftHca};
use std::sync::Arc;

/// First byte of a guest's RAM the shim allocates from; the mailbox sits below it.
pub(crate) const HEAP: u64 = 1 << 20;
/// The mailbox's guest-physical address (as the agent places it).
const MAILBOX_GPA: u64 = 0x10000;
const PAGE: u64 = 4096;

/// One guest.
pub(crate) struct Guest {
    pub(crate) name: String,
    pub(crate) id: VmId,
    pub(crate) info: VmInfo,
    pub(crate) report_scale: f64,
    pub(crate) lie_from_ns: u64,
    pub(crate) start_ns: u64,
    pub(crate) mem: Arc<VecMemory>,
    /// Its port in softhca's transmit scheduler.
    pub(crate) vport: GuestId,
    /// The transmit limit the scenario and the core set (without the fabric's ceiling).
    pub(crate) policy_tx: resex_common::TxLimit,
    /// The lab fabric's ceiling on it (its flow's rate), bits/s.
    pub(crate) fabric_max: Option<u64>,
    pub(crate) server: Server,
    pub(crate) mailbox: Option<Mailbox>,
    pub(crate) doc: Registration,
    /// Sink-side QP, kept alive for the run.
    pub(crate) _peer: Box<dyn QueuePair>,
    /// Handed to the core (the guest started).
    pub(crate) started: bool,
    /// CPU time used so far, ns.
    pub(crate) cpu_total_ns: u64,
    pub(crate) intervals: u64,
    pub(crate) cpu_sum: f64,
    pub(crate) cap_sum: f64,
    pub(crate) cap_min: f64,
    pub(crate) balance_min: Option<f64>,
    pub(crate) counted: Counters,
    /// The latency of the last report period.
    pub(crate) period: LatencySummary,
    /// Counted at the last series point.
    pub(crate) at_point: Counters,
    /// Bytes sent in each interval since it started (with `LabConfig::traffic`).
    pub(crate) traffic: Vec<u64>,
    /// Bytes counted at the last interval's end.
    pub(crate) at_traffic: u64,
}

/// What a guest is built with besides its scenario entry.
pub(crate) struct Build<'a> {
    pub(crate) hca: &'a SoftHca,
    pub(crate) peer: Box<dyn QueuePair>,
    pub(crate) reply_to: RemoteAddr,
    pub(crate) path_mtu: u32,
    pub(crate) phase_ns: u64,
    pub(crate) measure_from_ns: u64,
    /// Orders come from the lab fabric ([`crate::server::Work::external`]).
    pub(crate) external: bool,
}

fn shim(guest: &str) -> impl Fn(resex_shim::ShimError) -> LabError + '_ {
    move |source| LabError::Shim {
        guest: guest.to_owned(),
        source,
    }
}

impl Guest {
    /// Builds guest number `i` (its id is `i + 1`).
    pub(crate) fn new(i: usize, g: &GuestSpec, b: Build<'_>) -> Result<Guest, LabError> {
        let w = &g.benchex;
        let most = g.turns.map_or(w.buffer.0, |t| t.buffer.0.max(w.buffer.0));
        let ram = HEAP + most.div_ceil(PAGE) * PAGE + (2 << 20);
        let mem = Arc::new(VecMemory::new(usize::try_from(ram).unwrap_or(usize::MAX)));
        let dynmem: Arc<dyn GuestMemory> = mem.clone();
        let port = b.hca.add_guest(dynmem.clone(), PortId(0));
        // Its VF: its port in softhca's scheduler, with the scenario's own setting.
        let vport = port.guest();
        if !g.tx().is_none() {
            b.hca.set_tx_limit(vport, g.tx(), 0);
        }
        let p =
            SoftProvider::new(dynmem.clone(), HEAP, ram, Arc::new(port)).map_err(shim(&g.name))?;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let start_ns = (g.start_s * 1e9) as u64;
        let work = Work {
            buffer: w.buffer.0,
            rate: w.rate,
            compute_ns: compute_ns(w.compute, w.buffer.0),
            start_ns: start_ns + b.phase_ns,
            chunk: w.chunk.0,
            external: b.external,
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            turn: g.turns.map(|t| crate::server::Turn {
                at_ns: (t.at_s * 1e9) as u64,
                buffer: t.buffer.0,
                rate: t.rate,
                compute_ns: compute_ns(w.compute, t.buffer.0),
            }),
        };
        let mut peer = b.peer;
        let (mut server, qpn) =
            Server::new(&p, work, b.path_mtu, QpAddr::qpn(peer.qpn()), b.reply_to)
                .map_err(shim(&g.name))?;
        server.vcpu.set_cap(g.cap);
        server.measure_from_ns = b.measure_from_ns;
        peer.connect(QpAddr::qpn(qpn)).map_err(shim("sink"))?;
        let mailbox = if g.reports {
            Some(
                Mailbox::new(dynmem, MAILBOX_GPA, DEFAULT_BLOCKS, DEFAULT_BLOCK_SIZE).map_err(
                    |source| LabError::Mailbox {
                        guest: g.name.clone(),
                        source,
                    },
                )?,
            )
        } else {
            None
        };
        let doc = Registration {
            rings: Vec::new(),
            version: REGISTRATION_VERSION,
            vm: Some(g.name.clone()),
            path_mtu: b.path_mtu,
            qps: p.registration(qpn).into_iter().collect(),
            mailbox: mailbox.as_ref().map(Mailbox::registration),
        };
        let vcpus = g.vcpus.max(1);
        Ok(Guest {
            name: g.name.clone(),
            id: VmId(u32::try_from(i + 1).unwrap_or(u32::MAX)),
            info: VmInfo {
                name: g.name.clone(),
                vcpus,
                ram_size: ram,
                weight: g.weight,
                sla_threshold: g.sla_threshold,
                cap_mechanism: "lab vCPU (credit2-like, 10 ms)".into(),
                tx_lever: Some(format!("softhca vport {} (lab)", vport.0)),
                entitlement: resex_pricing::Entitlement {
                    tx_bps: g.entitlement().0,
                    cpu_floor_pct: g.entitlement().1,
                },
            },
            report_scale: g.report_scale,
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            lie_from_ns: (g.report_scale_from_s * 1e9) as u64,
            start_ns,
            mem,
            vport,
            policy_tx: g.tx(),
            fabric_max: None,
            server,
            mailbox,
            doc,
            _peer: peer,
            started: false,
            cpu_total_ns: 0,
            intervals: 0,
            cpu_sum: 0.0,
            cap_sum: 0.0,
            cap_min: f64::INFINITY,
            balance_min: None,
            counted: Counters::default(),
            at_point: Counters::default(),
            traffic: Vec::new(),
            at_traffic: 0,
            period: LatencySummary::default(),
        })
    }

    /// The limit in force on its vport: the core's (or the scenario's), its ceiling lowered to
    /// the fabric's when there is one.
    pub(crate) fn tx_in_force(&self) -> resex_common::TxLimit {
        match self.fabric_max {
            None => self.policy_tx,
            Some(f) => resex_common::TxLimit {
                max_bps: Some(self.policy_tx.max_bps.map_or(f, |m| m.min(f))),
                ..self.policy_tx
            },
        }
    }

    /// The end of a report period: the server's latency summary becomes the period's and,
    /// for a reporting guest that measured anything, a report in its mailbox (scaled from
    /// `lie_from_ns` on by `report_scale`: a guest that lies).
    pub(crate) fn report(&mut self, now_ns: u64, period_ns: u64) {
        let s = self.server.interval.take_interval();
        self.period = s;
        let Some(mb) = &mut self.mailbox else {
            return;
        };
        if s.count == 0 {
            return;
        }
        let k = if now_ns > self.lie_from_ns {
            self.report_scale
        } else {
            1.0
        };
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let scale = |x: u64| (x as f64 * k) as u64;
        let r = LatencySummary {
            count: s.count,
            mean_ns: s.mean_ns * k,
            stddev_ns: s.stddev_ns * k,
            min_ns: scale(s.min_ns),
            max_ns: scale(s.max_ns),
            p50_ns: scale(s.p50_ns),
            p99_ns: scale(s.p99_ns),
            p999_ns: scale(s.p999_ns),
        };
        // The host drains every interval: the mailbox is never full; a full one drops the
        // report, as the agent's does.
        let _ = mb.report(&r, period_ns);
    }
}
