//! The daemon's driver of the host core: what one tick of the real-time loop does, minus the
//! waiting. It applies what came in since the last tick (admin commands, the sampler's
//! domains, memories and CPU samples, the registrars' documents), steps the core at the
//! loop's `now`, hands the cap intents to the actuator, writes the journal and, every
//! `snapshot_ms`, publishes the API snapshot. It reads no clock for anything the core
//! decides: the same inputs at the same times give the same decisions as the lab's driver.

use crate::actuator::{Act, CapSink, Sink, TxSink};
use crate::api::{Admin, AdminError, Shared};
use crate::inbox::Inbox;
use crate::journal::{Journal, Row};
use crate::periods::PeriodFeed;
use crate::registrar::RegEvent;
use crate::sampler::Sample;
use resex_api::Snapshot;
use resex_common::{LatencyRecorder, LogLimiter, TxLimit, VmId};
use resex_core::{
    Cap, CoreError, HostCore, Intent, Intents, LeverKind, NamedPolicy, StepOutput, Tx,
};
use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::{Arc, TryLockError};

/// What the admin asks of the loop.
pub enum Command {
    /// Switch policy (every cap is first put back to its original setting).
    Reload(Box<Option<NamedPolicy>>),
    /// Pin (or unpin) one of a VM's levers; the answer goes back on the sender.
    Admin(Admin, Sender<Result<String, AdminError>>),
    /// The fleet's ceilings (VM name, bits per second), valid this long from now; `None`: lift
    /// them (the fleet was lost, or the coordinator allocated nothing to this host).
    Fleet(Option<FleetGrant>),
}

pub use resex_core::grant::FleetGrant;

/// Where the driver's inputs come from.
pub struct Inputs {
    /// The sampler.
    pub samples: Inbox<Sample>,
    /// The registrars.
    pub regs: Inbox<RegEvent>,
    /// The admin (API, signals).
    pub cmds: Inbox<Command>,
}

/// The loop's own figures, for the snapshot.
#[derive(Debug, Default)]
pub struct LoopStats {
    /// Ticks run.
    pub ticks: u64,
    /// Intervals skipped because the loop fell more than an interval behind.
    pub skipped: u64,
    /// Lateness since the last snapshot, and over the whole run.
    pub late_window: LatencyRecorder,
    /// Over the whole run.
    pub late_all: LatencyRecorder,
    /// p50, p99, max of the last window with ticks, us.
    pub last_window: (f64, f64, f64),
    /// Tick time (inputs, scan, pricing) since the last snapshot, ns.
    pub scan_ns: u64,
    /// Steps whose scan time was measured.
    pub scan_steps: u64,
    /// Snapshots published a tick or more late because a reader held the shared one (each
    /// counted once; none is replaced while it waits).
    pub publish_deferred: u64,
}

/// Where the driver's intents go.
pub struct Sinks {
    /// Caps.
    pub caps: Box<CapSink>,
    /// Transmit limits.
    pub tx: Box<TxSink>,
}

/// A lever the daemon actuates: the sink its changes go to (one path for every lever).
trait Routed: LeverKind {
    fn sink(s: &Sinks) -> &dyn Sink<Self::Set>;
}

impl Routed for Cap {
    fn sink(s: &Sinks) -> &dyn Sink<f64> {
        &*s.caps
    }
}

impl Routed for Tx {
    fn sink(s: &Sinks) -> &dyn Sink<TxLimit> {
        &*s.tx
    }
}

/// The driver.
pub struct Driver {
    /// The core.
    pub core: HostCore,
    inputs: Inputs,
    /// Registrations taken while the samples' inbox was held: applied once the samples that
    /// came before them are (a VM's `Added` is sent before its registrar starts).
    regs_waiting: Vec<RegEvent>,
    sinks: Sinks,
    /// Backend key and name of each VM (what the actuator sets caps by).
    keys: HashMap<VmId, (String, String)>,
    journal: Option<Journal>,
    /// Where the snapshot is published, how often (ns), and when it last was.
    shared: Option<(Shared, u64)>,
    /// A snapshot built while a reader held `shared`: published at the next tick that finds it
    /// free (the loop never waits for a reader).
    unpublished: Option<Arc<Snapshot>>,
    snap_at_ns: u64,
    /// The loop's figures.
    pub stats: LoopStats,
    backend: &'static str,
    /// The priority the loop's thread got (empty until it runs).
    priority: String,
    log_step: LogLimiter,
    /// The period detector's feed, when it runs.
    periods: Option<PeriodFeed>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Driver({:?})", self.core)
    }
}

impl Driver {
    /// A driver over `core`, fed by `inputs`, actuating through `sinks`.
    pub fn new(
        core: HostCore,
        inputs: Inputs,
        sinks: Sinks,
        journal: Option<Journal>,
        backend: &'static str,
    ) -> Self {
        Self {
            core,
            inputs,
            regs_waiting: Vec::new(),
            sinks,
            keys: HashMap::new(),
            journal,
            shared: None,
            unpublished: None,
            snap_at_ns: 0,
            stats: LoopStats::default(),
            backend,
            priority: String::new(),
            log_step: LogLimiter::default(),
            periods: None,
        }
    }

    /// Hand every step's transmitted bytes to the period detector through `feed`.
    pub fn feed_periods(&mut self, feed: PeriodFeed) {
        self.periods = Some(feed);
    }

    /// Publish a snapshot into `shared` every `every_ns`.
    pub fn publish_to(&mut self, shared: Shared, every_ns: u64) {
        self.shared = Some((shared, every_ns.max(1)));
    }

    fn act<K: Routed>(&self, i: &Intent<K>) {
        let Some((key, name)) = self.keys.get(&i.vm) else {
            return;
        };
        K::sink(&self.sinks).act(match K::to_set(i.value) {
            Some(value) => Act::Set {
                key: key.clone(),
                name: name.clone(),
                value,
            },
            None => Act::Restore { key: key.clone() },
        });
    }

    fn act_all(&self, intents: &Intents) {
        for i in &intents.caps {
            self.act(i);
        }
        for i in &intents.tx {
            self.act(i);
        }
    }

    /// The admin's pin (or unpin) of one lever, actuated; what was done, for people.
    fn pin<K: Routed>(&mut self, name: &str, set: Option<K::Set>) -> Result<String, CoreError> {
        let (msg, intent) = self.core.pin::<K>(name, set)?;
        self.act(&intent);
        Ok(msg)
    }

    /// Applies a policy now (its restores go to the actuators).
    pub fn set_policy(&mut self, p: Option<NamedPolicy>, now_ns: u64) {
        let intents = self.core.set_policy(p, now_ns);
        self.act_all(&intents);
    }

    /// Everything that came in since the last tick.
    fn apply_inputs(&mut self, now_ns: u64) {
        for c in self.inputs.cmds.take() {
            match c {
                Command::Reload(p) => self.set_policy(*p, now_ns),
                Command::Admin(a, reply) => {
                    let r = match a {
                        Admin::Pin(name, pct) => self.pin::<Cap>(&name, pct),
                        Admin::Rate(name, tx) => self.pin::<Tx>(&name, tx),
                    };
                    let _ = reply.send(r.map_err(AdminError::from));
                }
                Command::Fleet(f) => {
                    let c = f.map(|g| g.at(now_ns));
                    let lifting = c.is_none();
                    let (intents, done) = self.core.set_fleet(c);
                    if !intents.is_empty() || lifting {
                        tracing::debug!(
                            "fleet: {} ceilings changed ({} in force, {} skipped)",
                            intents.tx.len(),
                            done.applied,
                            done.skipped
                        );
                    }
                    self.act_all(&intents);
                }
            }
        }
        // Registrations first, samples second: every VM a registration names was added before
        // its registrar started, so its `Added` is in the samples taken after them.
        self.regs_waiting.extend(self.inputs.regs.take());
        let Some(samples) = self.inputs.samples.take_ready() else {
            // A sender holds the samples: the registrations wait for the next tick.
            return;
        };
        for s in samples {
            match s {
                Sample::Added { id, key, info } => {
                    let name = info.name.clone();
                    if let Err(e) = self.core.add_vm(id, info) {
                        tracing::error!("{name}: {e}");
                        continue;
                    }
                    self.keys.insert(id, (key, name));
                }
                Sample::Memory { id, mem } => {
                    let _ = self.core.set_memory(id, mem);
                }
                Sample::Removed { id } => {
                    self.core.remove_vm(id);
                    if let Some((key, _)) = self.keys.remove(&id) {
                        self.sinks.caps.act(Act::Forget { key: key.clone() });
                        self.sinks.tx.act(Act::Forget { key });
                    }
                }
                Sample::Cpu(batch) => {
                    for (id, s) in batch {
                        // A VM removed since the batch was read: nothing to do.
                        let _ = self.core.cpu_sample(id, s);
                    }
                }
            }
        }
        for ev in std::mem::take(&mut self.regs_waiting) {
            let r = match ev {
                RegEvent::Accepted { id, doc, layout } => self.core.register(id, &doc, *layout),
                RegEvent::Rejected { id, error } => self.core.registration_refused(id, error),
            };
            if let Err(e) = r {
                if !matches!(e, CoreError::UnknownVm(_)) {
                    tracing::warn!("registration: {e}");
                }
            }
        }
    }

    /// One tick at `now_ns` (ns on the loop's clock): inputs, step, actuation, journal, and
    /// the snapshot when one is due. Returns the step's output (None when the core refused
    /// the time: an interval already stepped).
    pub fn tick(&mut self, now_ns: u64) -> Option<&StepOutput> {
        self.apply_inputs(now_ns);
        let skipped = self
            .core
            .last_interval()
            .map_or(0, |l| self.core.interval_at(now_ns).saturating_sub(l + 1));
        self.stats.skipped += skipped;
        self.stats.ticks += 1;
        let stepped = match self.core.step(now_ns) {
            Ok(_) => true,
            Err(e) => {
                if let Some(n) = self.log_step.hit() {
                    tracing::warn!("step: {e} [{n}]");
                }
                false
            }
        };
        // A snapshot that waited for a reader goes out first (its figures are kept: the next
        // one is built only once it is out).
        if self.unpublished.is_some() {
            self.try_publish();
        }
        if !stepped {
            return None;
        }
        self.act_all(&self.core_output().intents);
        if let Some(p) = &mut self.periods {
            p.tick(now_ns, self.core.last_output());
        }
        self.write_journal();
        if let Some((_, every)) = &self.shared {
            if self.unpublished.is_none() && now_ns.saturating_sub(self.snap_at_ns) >= *every {
                self.publish(now_ns);
            }
        }
        Some(self.core_output())
    }

    /// The last step's output.
    fn core_output(&self) -> &StepOutput {
        self.core.last_output()
    }

    fn write_journal(&mut self) {
        let Some(j) = &mut self.journal else {
            return;
        };
        let out = self.core.last_output();
        for (row, vm) in out.rows.iter().zip(self.core.vms()) {
            let info = vm.info();
            let _ = j.write(&Row {
                interval: out.interval,
                vm: &info.name,
                id: vm.id(),
                vcpus: info.vcpus,
                cpu_pct: row.cpu_pct,
                mtus: row.delta.mtus,
                bytes: row.delta.tx_bytes,
                report: row.report,
                link_util: Some(out.link_util),
                weight: info.weight,
                priced: row.priced.map(|p| (p.balance, p.rate, p.cap)),
                cap_set: row.cap_set.map(|c| {
                    (
                        c.value.unwrap_or_else(|| info.full_cap()),
                        c.cause.to_string(),
                    )
                }),
                tx_set: row.tx_set.map(|t| (t.value, t.cause.to_string())),
            });
        }
        if out.interval.is_multiple_of(1000) {
            let _ = j.flush();
        }
    }

    /// Records the priority the loop's thread got (published in every snapshot).
    pub fn set_priority(&mut self, priority: String) {
        self.priority = priority;
    }

    /// Builds the snapshot now and publishes it, or, while a reader holds the shared one,
    /// at the next tick that finds it free (never waiting: a reader preempted while it clones
    /// the snapshot's `Arc` would otherwise hold the real-time loop up).
    pub fn publish(&mut self, now_ns: u64) {
        if self.shared.is_none() {
            return;
        }
        self.unpublished = Some(Arc::new(self.snapshot(now_ns)));
        if !self.try_publish() {
            self.stats.publish_deferred += 1;
        }
    }

    /// Publishes the snapshot waiting, unless a reader holds the shared one right now; true
    /// when nothing waits any more.
    fn try_publish(&mut self) -> bool {
        let (Some((shared, _)), Some(snap)) = (&self.shared, self.unpublished.take()) else {
            return true;
        };
        let mut held = match shared.try_write() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.unpublished = Some(snap);
                return false;
            }
        };
        // The old snapshot is dropped after the lock is let go (its buffers freed outside it).
        let old = std::mem::replace(&mut *held, snap);
        drop(held);
        drop(old);
        true
    }

    /// The core's snapshot with the loop's own figures.
    pub fn snapshot(&mut self, now_ns: u64) -> Snapshot {
        self.snap_at_ns = now_ns;
        let mut s = self.core.snapshot(now_ns);
        let st = &mut self.stats;
        let w = st.late_window.take_interval();
        if w.count > 0 {
            st.last_window = (
                w.p50_ns as f64 / 1000.0,
                w.p99_ns as f64 / 1000.0,
                w.max_ns as f64 / 1000.0,
            );
        }
        if let Some(p) = &mut self.periods {
            let verdicts = p.verdicts();
            for v in &mut s.vms {
                v.period = verdicts.get(&v.id).cloned();
            }
        }
        s.uptime_ms = now_ns / 1_000_000;
        s.host.backend = self.backend.into();
        s.host.loop_priority.clone_from(&self.priority);
        s.host.tick_late_p50_us = st.last_window.0;
        s.host.tick_late_p99_us = st.last_window.1;
        s.host.tick_late_max_us = st.last_window.2;
        s.host.ticks = st.ticks;
        s.host.ticks_skipped = st.skipped;
        s.host.scan_us = st.scan_ns as f64 / 1000.0 / st.scan_steps.max(1) as f64;
        st.scan_ns = 0;
        st.scan_steps = 0;
        s
    }

    /// Every cap and transmit limit back to its original setting (the loop is stopping);
    /// returns how many of each were in force.
    pub fn restore_all(&mut self) -> (usize, usize) {
        let intents = self.core.restore_all();
        self.act_all(&intents);
        if let Some(j) = &mut self.journal {
            let _ = j.flush();
        }
        (intents.caps.len(), intents.tx.len())
    }

    /// Records how late a tick started and how long it took.
    pub fn record(&mut self, late_ns: u64, took_ns: u64) {
        self.stats.late_window.record(0, late_ns);
        self.stats.late_all.record(0, late_ns);
        self.stats.scan_ns += took_ns;
        self.stats.scan_steps += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::inbox;
    use resex_core::{CoreConfig, VmInfo};
    use resex_guestmem::{GuestMemory, VecMemory};
    use resex_ibmon::registry::{validate, Limits};
    use resex_ibmon::synth::{SynthConfig, SynthGuest};

    struct Null;
    impl<V> Sink<V> for Null {
        fn act(&self, _: Act<V>) {}
    }

    #[test]
    fn a_registration_waits_for_the_samples_a_sender_holds() {
        const RAM: u64 = 1 << 20;
        let (stx, samples) = inbox();
        let (rtx, regs) = inbox();
        let (_ctx, cmds) = inbox();
        let mut d = with_inputs(Inputs {
            samples,
            regs,
            cmds,
        });
        let mem = Arc::new(VecMemory::new(1 << 20));
        let guest = SynthGuest::new(&*mem, &SynthConfig::default()).unwrap();
        let id = VmId(1);
        let added = Sample::Added {
            id,
            key: "k".into(),
            info: VmInfo::new("vm", 1, RAM),
        };
        stx.send(added).unwrap();
        let memory: Arc<dyn GuestMemory> = mem.clone();
        stx.send(Sample::Memory { id, mem: memory }).unwrap();
        let held = stx.hold();
        let layout = validate(guest.registration(), RAM, &Limits::default()).unwrap();
        rtx.send(RegEvent::Accepted {
            id,
            doc: Box::new(guest.registration().clone()),
            layout: Box::new(layout),
        })
        .unwrap();
        // The sampler holds its queue: nothing is applied, the registration is kept.
        d.apply_inputs(0);
        assert!(d.core.vm(id).is_none());
        drop(held);
        d.apply_inputs(0);
        let vm = d.core.vm(id).expect("added");
        assert_eq!(vm.qps(), guest.registration().qps.len(), "registered");
    }

    /// A driver with no inputs and null sinks.
    fn bare() -> Driver {
        let (_s, samples) = inbox();
        let (_r, regs) = inbox();
        let (_c, cmds) = inbox();
        with_inputs(Inputs {
            samples,
            regs,
            cmds,
        })
    }

    /// A driver on `inputs` with null sinks.
    fn with_inputs(inputs: Inputs) -> Driver {
        Driver::new(
            HostCore::new(CoreConfig::default()),
            inputs,
            Sinks {
                caps: Box::new(Null),
                tx: Box::new(Null),
            },
            None,
            "test",
        )
    }

    #[test]
    fn a_snapshot_waits_for_a_reader_instead_of_the_loop() {
        let mut d = bare();
        let shared: Shared = Arc::default();
        d.publish_to(shared.clone(), 1_000_000);
        d.publish(5_000_000);
        assert_eq!(shared.read().unwrap().uptime_ms, 5);
        // A reader holds the snapshot (as one preempted while cloning it would): the loop
        // builds the next and does not wait.
        let reader = shared.read().unwrap();
        d.publish(7_000_000);
        assert_eq!(reader.uptime_ms, 5);
        assert_eq!(d.stats.publish_deferred, 1);
        drop(reader);
        // The next tick that finds it free publishes it.
        assert!(d.try_publish());
        assert_eq!(shared.read().unwrap().uptime_ms, 7);
        assert!(d.try_publish(), "nothing waits");
        assert_eq!(d.stats.publish_deferred, 1);
    }
}
