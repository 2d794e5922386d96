//! The run: jump over times when no flow is on the wire (everyone computing), step the fluid
//! model every `dt` (or to the next phase change, if sooner) while flows are.
//!
//! A step: every active flow offers its controller's rate; the links serve (queues, pauses,
//! marking); each flow sends its share and adds up its expected marked packets (its packets
//! this step times the worst marking probability on its path: the mean-field fluid model,
//! so flows that see the same queue are treated alike); once a whole packet's worth is marked
//! it gets a CNP (paced by the controller), and its controller's timers run. A flow that finishes inside a step finishes at its exact time; a
//! job's iteration ends with its last flow.

use crate::build::{build, Built};
use crate::dcqcn::DcqcnParams;
use crate::error::FabricError;
use crate::job::{Flow, Job, Phase};
use crate::net::Net;
pub use crate::options::{RunOptions, MAX_CELLS, MAX_ITERS};
use crate::record::{job_results, Recorder};
use crate::result::FabricResult;
use crate::spec::{CcMode, FabricSpec};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Runs `spec`.
pub fn run(spec: &FabricSpec, opts: &RunOptions) -> Result<FabricResult, FabricError> {
    run_with_progress(spec, opts, |_, _| {})
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn to_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

/// Runs `spec`, calling `progress(now_ns, end_ns)` about a hundred times along the way.
pub fn run_with_progress(
    spec: &FabricSpec,
    opts: &RunOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<FabricResult, FabricError> {
    let duration = checked_duration(spec, opts)?;
    let end = to_ns(duration);
    let dt = to_ns(spec.dt_us / 1e6).max(1);
    let mut sim = Sim::new(spec, opts, end)?;
    let mut steps = 0u64;
    let tick = (end / 100).max(1);
    let mut next_tick = tick;
    loop {
        sim.wake_due();
        if sim.now >= next_tick {
            progress(sim.now, end);
            next_tick = (sim.now / tick + 1) * tick;
        }
        let next_wake = sim.next_wake();
        if sim.active.is_empty() {
            let next = next_wake.min(end);
            if next >= end {
                break;
            }
            sim.now = next;
            continue;
        }
        let h = dt
            .min(next_wake.saturating_sub(sim.now).max(1))
            .min(end - sim.now);
        if h == 0 {
            break;
        }
        sim.step(h);
        steps += 1;
        if sim.now >= end {
            break;
        }
    }
    progress(end, end);
    Ok(sim.result(spec, opts, duration, steps))
}

/// The run's duration, seconds, once the spec's step and the options' periods are checked.
fn checked_duration(spec: &FabricSpec, opts: &RunOptions) -> Result<f64, FabricError> {
    let duration = opts.duration_s.unwrap_or(spec.duration_s);
    if !(duration.is_finite() && duration > 0.0 && duration <= 1e5) {
        return Err(FabricError::Duration {
            seconds: duration,
            max: 1e5,
        });
    }
    if !(spec.dt_us.is_finite() && (0.1..=1000.0).contains(&spec.dt_us)) {
        return Err(FabricError::Step { dt_us: spec.dt_us });
    }
    if opts.interval_ns == 0 || opts.bucket_ns == 0 {
        return Err(FabricError::Interval {
            interval_ns: opts.interval_ns,
            bucket_ns: opts.bucket_ns,
        });
    }
    Ok(duration)
}

/// The state of a run: the built fabric, the recorder, the jobs' wake-ups and the active flows.
struct Sim {
    net: Net,
    jobs: Vec<Job>,
    flows: Vec<Flow>,
    vms: Vec<String>,
    shapes: Vec<(Option<String>, f64, f64)>,
    recorded: Vec<(u32, String)>,
    rec: Recorder,
    params: DcqcnParams,
    adaptive: bool,
    mtu: f64,
    /// Jobs' next communication starts: (time, job).
    wake: BinaryHeap<Reverse<(u64, usize)>>,
    /// Flows on the wire.
    active: Vec<usize>,
    /// Per job: when its current iteration's last flow finished (so far).
    finish: Vec<u64>,
    now: u64,
}

impl Sim {
    /// Builds `spec` for a run to `end` ns.
    fn new(spec: &FabricSpec, opts: &RunOptions, end: u64) -> Result<Self, FabricError> {
        let Built {
            net,
            jobs,
            flows,
            vms,
            shapes,
            recorded,
        } = build(spec)?;
        let rec = Recorder::new(&net, &flows, &recorded, vms.len(), end, opts)?;
        let wake: BinaryHeap<Reverse<(u64, usize)>> = jobs
            .iter()
            .enumerate()
            .filter_map(|(j, job)| match job.phase {
                Phase::Compute(t) => Some(Reverse((t, j))),
                _ => None,
            })
            .collect();
        let finish = vec![0; jobs.len()];
        Ok(Self {
            net,
            jobs,
            flows,
            vms,
            shapes,
            recorded,
            rec,
            params: spec.cc.dcqcn,
            adaptive: spec.cc.mode == CcMode::Adaptive,
            mtu: spec.net.mtu.max(64.0),
            wake,
            active: Vec::new(),
            finish,
            now: 0,
        })
    }

    /// The next job wake-up, or `u64::MAX`.
    #[inline]
    fn next_wake(&self) -> u64 {
        self.wake.peek().map_or(u64::MAX, |r| r.0 .0)
    }

    /// Starts the communication of every job whose compute phase ends by now.
    fn wake_due(&mut self) {
        while let Some(&Reverse((t, j))) = self.wake.peek() {
            if t > self.now {
                break;
            }
            self.wake.pop();
            if self.jobs[j].phase != Phase::Compute(t) {
                continue;
            }
            let range = self.jobs[j].flows.clone();
            self.jobs[j].phase = Phase::Comm(range.len());
            self.finish[j] = t;
            for f in range {
                let fl = &mut self.flows[f];
                fl.left = fl.bytes;
                fl.cc.advance(&self.params, self.now, 0.0);
                self.active.push(f);
            }
        }
    }

    /// One step of `h` ns: the flows offer, the links serve, each flow sends.
    fn step(&mut self, h: u64) {
        for &f in &self.active {
            let fl = &self.flows[f];
            self.net.offer_slots(&fl.slots, fl.cc.rc);
        }
        self.net.serve(h);
        let hs = h as f64 / 1e9;
        let after = self.now + h;
        let mut k = 0;
        while k < self.active.len() {
            if self.send(self.active[k], h, hs, after) {
                self.active.swap_remove(k);
            } else {
                k += 1;
            }
        }
        self.now = after;
    }

    /// Flow `f` sends its share of a step of `h` ns (`hs` s) ending at `after`, takes its
    /// marks and runs its controller; true when it finished inside the step.
    #[inline]
    fn send(&mut self, f: usize, h: u64, hs: f64, after: u64) -> bool {
        let now = self.now;
        let fl = &mut self.flows[f];
        let (share, p) = self.net.share_and_marking(&fl.slots);
        let x = fl.cc.rc * share;
        let sent = (x * hs).min(fl.left);
        fl.left -= sent;
        self.rec.sent(&self.net, fl, now, sent);
        if p > 0.0 {
            // Expected marks, not a draw: flows that see the same queue are treated alike.
            fl.marks += p * sent / self.mtu;
            if fl.marks >= 1.0 && fl.cc.can_notify(after) {
                fl.cc.on_cnp(&self.params, after);
                fl.marks = 0.0;
            }
        }
        let prog = if self.adaptive {
            1.0 - fl.left / fl.bytes
        } else {
            0.0
        };
        fl.cc.advance(&self.params, after, prog);
        if fl.left <= fl.bytes * 1e-9 {
            // Finished inside the step: at its exact time.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let at = now
                + if x > 0.0 {
                    ((sent / x) * 1e9).ceil() as u64
                } else {
                    h
                }
                .min(h);
            let j = fl.job as usize;
            self.flow_done(j, at);
            true
        } else {
            false
        }
    }

    /// A flow of job `j` finished at `at`: the iteration ends with its last flow.
    #[inline]
    fn flow_done(&mut self, j: usize, at: u64) {
        self.finish[j] = self.finish[j].max(at);
        if let Phase::Comm(n) = self.jobs[j].phase {
            if n <= 1 {
                if let Some(t) = self.jobs[j].finish_iteration(self.finish[j]) {
                    self.wake.push(Reverse((t, j)));
                }
            } else {
                self.jobs[j].phase = Phase::Comm(n - 1);
            }
        }
    }

    /// What the run measured.
    fn result(
        self,
        spec: &FabricSpec,
        opts: &RunOptions,
        duration: f64,
        steps: u64,
    ) -> FabricResult {
        let job_results = job_results(&self.jobs, &self.flows, &self.vms, &self.shapes);
        let series = self.rec.series(&self.net, &self.jobs, &self.recorded);
        let traffic = self.rec.traffic(&self.vms, &self.jobs, &self.flows);
        FabricResult {
            name: spec.name.clone(),
            duration_s: duration,
            hosts: spec.hosts.len(),
            links: self.net.links.len(),
            flows: self.flows.len(),
            steps,
            jobs: job_results,
            series,
            interval_ms: opts.interval_ns as f64 / 1e6,
            traffic,
        }
    }
}
