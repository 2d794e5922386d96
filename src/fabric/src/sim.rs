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
use crate::error::FabricError;
use crate::job::Phase;
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
#[allow(clippy::too_many_lines)]
pub fn run_with_progress(
    spec: &FabricSpec,
    opts: &RunOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<FabricResult, FabricError> {
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
    let Built {
        mut net,
        mut jobs,
        mut flows,
        vms,
        shapes,
        recorded,
    } = build(spec)?;
    let end = to_ns(duration);
    let dt = to_ns(spec.dt_us / 1e6).max(1);
    let params = spec.cc.dcqcn;
    let adaptive = spec.cc.mode == CcMode::Adaptive;
    let mtu = spec.net.mtu.max(64.0);
    let mut rec = Recorder::new(&net, &flows, &recorded, vms.len(), end, opts)?;
    let mut wake: BinaryHeap<Reverse<(u64, usize)>> = jobs
        .iter()
        .enumerate()
        .filter_map(|(j, job)| match job.phase {
            Phase::Compute(t) => Some(Reverse((t, j))),
            _ => None,
        })
        .collect();
    let mut active: Vec<usize> = Vec::new();
    let mut finish: Vec<u64> = vec![0; jobs.len()];
    let mut now = 0u64;
    let mut steps = 0u64;
    let tick = (end / 100).max(1);
    let mut next_tick = tick;
    loop {
        while let Some(&Reverse((t, j))) = wake.peek() {
            if t > now {
                break;
            }
            wake.pop();
            if jobs[j].phase != Phase::Compute(t) {
                continue;
            }
            let range = jobs[j].flows.clone();
            jobs[j].phase = Phase::Comm(range.len());
            finish[j] = t;
            for f in range {
                let fl = &mut flows[f];
                fl.left = fl.bytes;
                fl.cc.advance(&params, now, 0.0);
                active.push(f);
            }
        }
        if now >= next_tick {
            progress(now, end);
            next_tick = (now / tick + 1) * tick;
        }
        let next_wake = wake.peek().map_or(u64::MAX, |r| r.0 .0);
        if active.is_empty() {
            let next = next_wake.min(end);
            if next >= end {
                break;
            }
            now = next;
            continue;
        }
        let h = dt.min(next_wake.saturating_sub(now).max(1)).min(end - now);
        if h == 0 {
            break;
        }
        for &f in &active {
            let fl = &flows[f];
            net.offer_slots(&fl.slots, fl.cc.rc);
        }
        net.serve(h);
        let hs = h as f64 / 1e9;
        let after = now + h;
        let mut k = 0;
        while k < active.len() {
            let f = active[k];
            let fl = &mut flows[f];
            let (share, p) = net.share_and_marking(&fl.slots);
            let x = fl.cc.rc * share;
            let sent = (x * hs).min(fl.left);
            fl.left -= sent;
            rec.sent(&net, fl, now, sent);
            if p > 0.0 {
                // Expected marks, not a draw: flows that see the same queue are treated alike.
                fl.marks += p * sent / mtu;
                if fl.marks >= 1.0 && fl.cc.can_notify(after) {
                    fl.cc.on_cnp(&params, after);
                    fl.marks = 0.0;
                }
            }
            let prog = if adaptive {
                1.0 - fl.left / fl.bytes
            } else {
                0.0
            };
            fl.cc.advance(&params, after, prog);
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
                finish[j] = finish[j].max(at);
                active.swap_remove(k);
                if let Phase::Comm(n) = jobs[j].phase {
                    if n <= 1 {
                        if let Some(t) = jobs[j].finish_iteration(finish[j]) {
                            wake.push(Reverse((t, j)));
                        }
                    } else {
                        jobs[j].phase = Phase::Comm(n - 1);
                    }
                }
            } else {
                k += 1;
            }
        }
        now = after;
        steps += 1;
        if now >= end {
            break;
        }
    }
    progress(end, end);
    let job_results = job_results(&jobs, &flows, &vms, &shapes);
    let series = rec.series(&net, &jobs, &recorded);
    let traffic = rec.traffic(&vms, &jobs, &flows);
    Ok(FabricResult {
        name: spec.name.clone(),
        duration_s: duration,
        hosts: spec.hosts.len(),
        links: net.links.len(),
        flows: flows.len(),
        steps,
        jobs: job_results,
        series,
        interval_ms: opts.interval_ns as f64 / 1e6,
        traffic,
    })
}
