//! One VM as the daemon tracks it: its memory, its monitors, its mailbox, its counters.
//!
//! Registrations arrive again whenever the guest creates queue pairs. QPs already monitored
//! keep their cursors; new QPs get a monitor of their own, starting from the indices the guest
//! gave (0 for fresh rings), so nothing is counted twice. A new QP that shares a CQ with a
//! monitored one cannot be split off: then every ring is re-attached from its present position
//! (counts in flight at that moment are lost, never doubled) and the event is logged.

use resex_guestmem::GuestMemory;
use resex_ibmon::registry::{validate, Layout, Limits, MailboxLayout, RegistrationError};
use resex_ibmon::{Counters, VmMonitor};
use resex_pricing::LatencyReport;
use resex_proto::{QpRegistration, Registration};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

struct Watch {
    cq_dbrecs: HashSet<u64>,
    mon: VmMonitor,
}

/// A tracked VM.
pub struct Vm {
    /// Backend key.
    pub key: String,
    /// Engine id.
    pub engine_id: u32,
    /// Name.
    pub name: String,
    /// vCPUs.
    pub vcpus: u32,
    /// RAM size.
    pub ram_size: u64,
    /// Its memory, once mapped.
    pub mem: Option<Arc<dyn GuestMemory>>,
    watches: Vec<Watch>,
    known: HashMap<u32, QpRegistration>,
    /// The mailbox, once registered.
    pub mailbox: Option<MailboxLayout>,
    retired: Counters,
    prev_total: Counters,
    /// CPU time at the last read, ns, and when it was read.
    pub cpu_prev: Option<(u64, std::time::Instant)>,
    /// The registrar's stop flag.
    pub registrar_stop: Arc<AtomicBool>,
    /// Registrations accepted.
    pub registrations: u64,
    /// Registrations rejected.
    pub rejections: u64,
    /// The last rejection.
    pub last_error: Option<String>,
    /// Reports accepted.
    pub reports: u64,
    /// Mailbox blocks refused.
    pub bad_reports: u64,
    /// The last report.
    pub last_report: Option<LatencyReport>,
    /// Requests, count x mean and count x p99 summed over all reports (ns).
    pub lat_totals: (u64, f64, f64),
    /// Re-attachments that may have lost counts.
    pub reattached: u64,
    /// Cap in force set by the daemon (None: the original setting).
    pub cap: Option<f64>,
    /// A cap the admin pinned (`resex cap`): policy decisions leave it alone.
    pub pinned: Option<f64>,
    /// Why the cap last changed.
    pub cap_reason: Option<String>,
    /// How caps are enforced.
    pub cap_mechanism: String,
    /// CPU percent of the last tick.
    pub cpu_pct: f64,
    /// The VM's quiet latency, learned from its reports whatever the policy (the mean of its
    /// first ten reports, then lowered by any faster one), handed to each new policy.
    pub baseline: Option<resex_pricing::Baseline>,
    learner: resex_pricing::BaselineLearner,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vm({})", self.name)
    }
}

fn cq_dbrecs(q: &QpRegistration) -> impl Iterator<Item = u64> + '_ {
    std::iter::once(q.send_cq.dbrec).chain(q.recv_cq.as_ref().map(|c| c.dbrec))
}

impl Vm {
    /// A VM not registered yet.
    pub fn new(key: String, engine_id: u32, name: String, vcpus: u32, ram_size: u64) -> Self {
        Self {
            key,
            engine_id,
            name,
            vcpus,
            ram_size,
            mem: None,
            watches: Vec::new(),
            known: HashMap::new(),
            mailbox: None,
            retired: Counters::default(),
            prev_total: Counters::default(),
            cpu_prev: None,
            registrar_stop: Arc::new(AtomicBool::new(false)),
            registrations: 0,
            rejections: 0,
            last_error: None,
            reports: 0,
            bad_reports: 0,
            last_report: None,
            lat_totals: (0, 0.0, 0.0),
            reattached: 0,
            cap: None,
            pinned: None,
            cap_reason: None,
            cap_mechanism: String::new(),
            cpu_pct: 0.0,
            baseline: None,
            learner: resex_pricing::BaselineLearner::default(),
        }
    }

    /// Learns the baseline from a report.
    pub fn learn(&mut self, r: &LatencyReport) {
        self.learner.learn(r);
        self.baseline = self.learner.baseline();
    }

    /// Queue pairs monitored.
    pub fn qps(&self) -> usize {
        self.known.len()
    }

    /// Installs a registration with its validation against this VM's RAM (`full`, done by the
    /// registrar off the control loop). Only the QPs new to this VM are validated again, as a
    /// document of their own, to give them a monitor.
    pub fn install(
        &mut self,
        doc: &Registration,
        full: Layout,
        limits: &Limits,
    ) -> Result<(), RegistrationError> {
        self.mailbox = full.mailbox.clone();
        self.registrations += 1;
        let new: Vec<&QpRegistration> = doc
            .qps
            .iter()
            .filter(|q| self.known.get(&q.qpn) != Some(*q))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let watched: HashSet<u64> = self
            .watches
            .iter()
            .flat_map(|w| w.cq_dbrecs.iter().copied())
            .collect();
        let clash = new
            .iter()
            .any(|q| self.known.contains_key(&q.qpn) || cq_dbrecs(q).any(|d| watched.contains(&d)));
        if clash {
            for w in self.watches.drain(..) {
                self.retired += w.mon.total();
            }
            let mut mon = VmMonitor::new(full);
            if let Some(m) = &self.mem {
                mon.skip_to_now(&**m);
            }
            self.reattached += 1;
            tracing::info!(
                "{}: rings re-attached from their present position",
                self.name
            );
            self.watches.push(Watch {
                cq_dbrecs: doc.qps.iter().flat_map(cq_dbrecs).collect(),
                mon,
            });
            self.known = doc.qps.iter().map(|q| (q.qpn, q.clone())).collect();
            return Ok(());
        }
        let sub = Registration {
            version: doc.version,
            vm: None,
            path_mtu: doc.path_mtu,
            qps: new.iter().map(|q| (*q).clone()).collect(),
            mailbox: None,
        };
        let layout = validate(&sub, self.ram_size, limits)?;
        self.watches.push(Watch {
            cq_dbrecs: sub.qps.iter().flat_map(cq_dbrecs).collect(),
            mon: VmMonitor::new(layout),
        });
        for q in sub.qps {
            self.known.insert(q.qpn, q);
        }
        Ok(())
    }

    /// Brings in what the next [`Self::scan`] reads first (see `VmMonitor::prefetch`).
    pub fn prefetch(&self) {
        if let Some(mem) = &self.mem {
            for w in &self.watches {
                w.mon.prefetch(&**mem);
            }
        }
    }

    /// Scans every monitor (the budget split between them) and returns what happened since
    /// the last scan.
    pub fn scan(&mut self, budget: u32) -> Counters {
        let Some(mem) = &self.mem else {
            return Counters::default();
        };
        let n = u32::try_from(self.watches.len()).unwrap_or(u32::MAX).max(1);
        let each = (budget / n).max(64);
        let mut total = self.retired;
        for w in &mut self.watches {
            w.mon.scan(&**mem, each);
            total += w.mon.total();
        }
        let delta = total - self.prev_total;
        self.prev_total = total;
        delta
    }

    /// Everything counted so far.
    pub fn total(&self) -> Counters {
        self.prev_total
    }
}
