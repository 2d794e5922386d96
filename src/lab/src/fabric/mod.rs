//! The lab fabric on whole lab hosts (issue 20, item 1): every fabric host is a [`LabHost`]
//! (guests posting real mlx5 WRITEs through the shim, softhca and its per-vport transmit
//! scheduler, the monitor reading the rings, the host core and its policy), and the links
//! between the hosts are the fabric's (`resex_fabric`: fluid queues, RED marking, strict
//! priority, DCQCN per flow).
//!
//! Each worker of a job is a guest of its host whose orders come from the fabric: compute for
//! the job's compute time on its vCPU (under the core's cap), then send the worker's bytes as
//! 256 KiB WRITEs. Time moves in the fabric's steps (`dt`) while any flow is on the wire, and
//! jumps to the next host event otherwise. Every step:
//!
//! 1. each sending flow offers its DCQCN rate to the links of its path; the links serve
//!    (queues, pauses, marking); the flow's rate times its share becomes the ceiling of its
//!    guest's vport in its host's softhca (lowered further by the core's own transmit limit);
//! 2. the hosts move to the step's end: those with a sending flow visit it, the others only
//!    their own events (a compute phase ending, an interval's end);
//! 3. each flow's bytes on the wire in the step (softhca's per-packet count) drive its marks,
//!    CNPs and controller, and the recorded links; a flow is done when its guest sees its last
//!    completion, and a job's iteration ends with its last flow (the barrier), when the next
//!    compute phase is pushed to every worker.
//!
//! The per-VM traffic is what each host's monitor counted (IBMon over the rings), not the
//! fluid model's.

use crate::events::Events;
use crate::host::{LabConfig, LabError, LabHost};
use crate::result::LabResult;
use resex_fabric::build::{build, Built};
use resex_fabric::job::Phase;
use resex_fabric::record::{job_results, Recorder};
use resex_fabric::result::VmBytes;
use resex_fabric::spec::CcMode;
use resex_fabric::{FabricError, FabricResult, FabricSpec, RunOptions};
use resex_pricing::PolicyConfig;
use resex_scenario::Scenario;

mod fleet;
mod sim;
pub use fleet::{replay, FleetOptions, FleetRound, COORDINATOR, EPOCH_UNIX_MS};
use sim::Sim;

/// Bytes of each WRITE a worker posts, unless its fabric says (`chunk_kib`).
pub const CHUNK: u64 = 256 << 10;

/// The most workers (guests) a fabric on lab hosts may have: each is a whole guest.
pub const MAX_WORKERS: usize = 4096;

/// Settings of a run on lab hosts.
#[derive(Debug, Clone, Default)]
pub struct HostsOptions {
    /// Every host's policy (name, configuration); `None`: monitor only.
    pub policy: Option<(String, PolicyConfig)>,
    /// The hosts as one fleet under the coordinator's round (`None`: no fleet).
    pub fleet: Option<FleetOptions>,
}

/// A run on lab hosts: the fabric's figures and every host's own.
#[derive(Debug, Clone)]
pub struct HostsResult {
    /// Iteration times, links, and the per-VM traffic as the hosts' monitors counted it.
    pub fabric: FabricResult,
    /// Each host's lab result (its guests are the workers, named `wN` by flow).
    pub hosts: Vec<LabResult>,
    /// The fleet's rounds, in order (empty without a fleet).
    pub fleet: Vec<FleetRound>,
}

/// Why a fabric could not run on lab hosts.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// The fabric refused its spec.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A host refused.
    #[error("host {host}: {source}")]
    Host {
        /// Which host.
        host: String,
        /// Why.
        source: LabError,
    },
    /// A host's scenario could not be made (its link rate, say).
    #[error("host {host}: {source}")]
    Scenario {
        /// Which host.
        host: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The fleet's values could not cross as JSON, or were refused when read back.
    #[error("fleet, host {host}: {reason}")]
    Fleet {
        /// Which host.
        host: String,
        /// Why.
        reason: String,
    },
    /// A fabric the fluid run takes but whole lab hosts do not.
    #[error(transparent)]
    OnHosts(#[from] OnHostsError),
}

/// What whole lab hosts cannot run (the fluid run can).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OnHostsError {
    /// A step that does not divide the host core's 1 ms interval.
    #[error("dt_us {dt_us}: on lab hosts the step must divide the host core's 1 ms interval")]
    Step {
        /// The step given, µs.
        dt_us: f64,
    },
    /// An MTU other than softhca's 100g preset's.
    #[error("mtu {mtu}: lab hosts use softhca's 100g preset, whose MTU is 4096")]
    Mtu {
        /// The MTU given, bytes.
        mtu: f64,
    },
    /// A per-VM interval other than 1 ms, or a bucket of 0 ns.
    #[error(
        "on lab hosts the per-VM interval is the host core's 1 ms, and the bucket must be above \
         0 ns"
    )]
    Interval {
        /// The interval given, ns.
        interval_ns: u64,
        /// The bucket given, ns.
        bucket_ns: u64,
    },
    /// More workers than [`MAX_WORKERS`].
    #[error(
        "{workers} workers: on lab hosts at most {max} (each is a whole guest); the fluid run \
         (`resex lab fabric` without --lab-hosts) takes up to a million"
    )]
    Workers {
        /// Workers in the fabric.
        workers: usize,
        /// The most.
        max: usize,
    },
    /// Per-VM traffic too large to record.
    #[error("per-VM traffic of {vms} VMs over {seconds} virtual s is too large to record")]
    Traffic {
        /// VMs (workers).
        vms: usize,
        /// The run's duration, s.
        seconds: f64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for its job's next iteration.
    Idle,
    /// Its order is pushed: computing, not posted yet.
    Computing,
    /// On the wire.
    Sending,
}

/// A worker: where its guest is and what the fabric knows of it.
#[derive(Debug, Clone, Copy)]
struct Worker {
    node: usize,
    guest: usize,
    qpn: u32,
    state: State,
    /// softhca's wire bytes for its QP at the last step.
    wire: u64,
    /// Its server's answered orders when its order was pushed.
    done: u64,
    /// The marking probability on its path this step.
    mark: f64,
    /// The ceiling last set on its vport, bits/s (0: none).
    ceiling: u64,
}

struct Node {
    name: String,
    host: LabHost,
    ev: Events,
    /// Its workers (flow indices).
    flows: Vec<usize>,
    /// Of those, sending.
    sending: usize,
    /// Moved this step.
    moved: bool,
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn to_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

fn host_err(node: &Node) -> impl Fn(LabError) -> HostsError + '_ {
    move |source| HostsError::Host {
        host: node.name.clone(),
        source,
    }
}

/// Builds one lab host per fabric host with workers.
fn nodes(
    spec: &FabricSpec,
    b: &Built,
    dt_ns: u64,
    duration: f64,
    traffic: bool,
    opts: &HostsOptions,
) -> Result<(Vec<Node>, Vec<Worker>), HostsError> {
    let mut by_host: Vec<Vec<usize>> = vec![Vec::new(); spec.hosts.len()];
    for (f, fl) in b.flows.iter().enumerate() {
        by_host[fl.host as usize].push(f);
    }
    let mut nodes = Vec::new();
    let mut workers = vec![
        Worker {
            node: 0,
            guest: 0,
            qpn: 0,
            state: State::Idle,
            wire: 0,
            done: 0,
            mark: 0.0,
            ceiling: 0,
        };
        b.flows.len()
    ];
    for (h, flows) in by_host.into_iter().enumerate() {
        if flows.is_empty() {
            continue;
        }
        let hs = &spec.hosts[h];
        let chunk = spec.chunk_kib.map_or(CHUNK, |k| k.clamp(1, 1 << 20) << 10);
        let guests: Vec<serde_json::Value> = flows
            .iter()
            .map(|f| {
                serde_json::json!({
                    "name": format!("w{f}"),
                    "benchex": {"buffer": chunk, "chunk": chunk, "rate": 0.0, "compute": 0},
                })
            })
            .collect();
        let scenario: Scenario = serde_json::from_value(serde_json::json!({
            "name": hs.name,
            "duration_s": duration,
            "link": {"preset": "100g", "gbps": hs.nic_gbps},
            "guest": guests,
        }))
        .map_err(|source| HostsError::Scenario {
            host: hs.name.clone(),
            source,
        })?;
        let cfg = LabConfig {
            seed: spec.seed,
            dt_ns,
            policy: opts.policy.clone(),
            duration_s: Some(duration),
            traffic,
            external: true,
            ..LabConfig::default()
        };
        let host = LabHost::new(&scenario, cfg).map_err(|source| HostsError::Host {
            host: hs.name.clone(),
            source,
        })?;
        let node = nodes.len();
        for (k, &f) in flows.iter().enumerate() {
            workers[f].node = node;
            workers[f].guest = k;
            workers[f].qpn = host.guests[k].server.qpn();
        }
        let ev = Events::new(&host);
        nodes.push(Node {
            name: hs.name.clone(),
            host,
            ev,
            flows,
            sending: 0,
            moved: false,
        });
    }
    Ok((nodes, workers))
}

/// Runs `spec` with every host a whole lab host; `progress(now_ns, end_ns)` about a hundred
/// times along the way.
pub fn run_on_hosts(
    spec: &FabricSpec,
    run: &RunOptions,
    opts: &HostsOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<HostsResult, HostsError> {
    let (duration, dt) = check_run(spec, run)?;
    let mut b = build(spec)?;
    if b.flows.len() > MAX_WORKERS {
        return Err(OnHostsError::Workers {
            workers: b.flows.len(),
            max: MAX_WORKERS,
        }
        .into());
    }
    // Hosts step on the grid of `dt`: the run ends on it.
    let end = (to_ns(duration) / dt * dt).max(dt);
    let cells = usize::try_from(end / 1_000_000 + 1)
        .unwrap_or(usize::MAX)
        .saturating_mul(b.flows.len());
    if run.traffic && cells > resex_fabric::sim::MAX_CELLS {
        return Err(OnHostsError::Traffic {
            vms: b.flows.len(),
            seconds: duration,
        }
        .into());
    }
    let (mut nodes, mut workers) = nodes(spec, &b, dt, duration, run.traffic, opts)?;
    let no_traffic = RunOptions {
        traffic: false,
        ..*run
    };
    let rec = Recorder::new(&b.net, &b.flows, &b.recorded, b.vms.len(), end, &no_traffic)?;
    // Every job's first iteration: its workers compute from its start.
    for j in 0..b.jobs.len() {
        if let Phase::Compute(t0) = b.jobs[j].phase {
            let start = b.jobs[j].iter_start;
            push_iteration(&mut b, &mut nodes, &mut workers, j, start, t0 - start, dt);
        }
    }
    let fleet = opts
        .fleet
        .clone()
        .map(|f| fleet::LabFleet::new(f, &mut nodes));
    let mut sim = Sim {
        b,
        nodes,
        fleet,
        workers,
        rec,
        active: Vec::new(),
        params: spec.cc.dcqcn,
        adaptive: spec.cc.mode == CcMode::Adaptive,
        mtu: spec.net.mtu,
        dt,
    };
    let mut now = 0u64;
    let mut steps = 0u64;
    let tick = (end / 100).max(1);
    let mut next_tick = tick;
    while now < end {
        let stepping = !sim.active.is_empty();
        now = sim.step(now, end)?;
        steps += u64::from(stepping);
        if now >= next_tick {
            progress(now, end);
            next_tick = (now / tick + 1) * tick;
        }
    }
    for n in &mut sim.nodes {
        n.host.advance_events(&mut n.ev, end).map_err(host_err(n))?;
    }
    progress(end, end);
    let rounds = sim.fleet.map(fleet::LabFleet::into_rounds);
    let mut r = finish(spec, sim.b, sim.nodes, sim.rec, run, (duration, steps))?;
    r.fleet = rounds.unwrap_or_default();
    Ok(r)
}

/// The run's length (seconds) and step (ns), checked: what whole lab hosts can run.
fn check_run(spec: &FabricSpec, run: &RunOptions) -> Result<(f64, u64), HostsError> {
    let duration = run.duration_s.unwrap_or(spec.duration_s);
    if !(duration.is_finite() && duration > 0.0 && duration <= 1e4) {
        return Err(FabricError::Duration {
            seconds: duration,
            max: 1e4,
        }
        .into());
    }
    let dt = to_ns(spec.dt_us / 1e6);
    if dt == 0 || !1_000_000u64.is_multiple_of(dt) {
        return Err(OnHostsError::Step { dt_us: spec.dt_us }.into());
    }
    if (spec.net.mtu - 4096.0).abs() > f64::EPSILON {
        return Err(OnHostsError::Mtu { mtu: spec.net.mtu }.into());
    }
    if run.interval_ns != 1_000_000 || run.bucket_ns == 0 {
        return Err(OnHostsError::Interval {
            interval_ns: run.interval_ns,
            bucket_ns: run.bucket_ns,
        }
        .into());
    }
    Ok((duration, dt))
}

/// What a sending flow offers the links: its controller's rate, or less when its host's own
/// transmit limit (the core's, or the scenario's) is lower.
fn offer(host: &LabHost, guest: usize, rc: f64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    host.guests
        .get(guest)
        .and_then(|g| g.policy_tx.max_bps)
        .map_or(rc, |m| rc.min(m as f64 / 8.0))
}

/// Job `j`'s next iteration at `at`: every worker computes `compute_ns`, then sends its bytes.
fn push_iteration(
    b: &mut Built,
    nodes: &mut [Node],
    workers: &mut [Worker],
    j: usize,
    at: u64,
    compute_ns: u64,
    dt: u64,
) {
    let range = b.jobs[j].flows.clone();
    b.jobs[j].phase = Phase::Comm(range.len());
    for f in range {
        let w = &mut workers[f];
        let n = &mut nodes[w.node];
        let server = &mut n.host.guests[w.guest].server;
        w.done = server.done;
        w.state = State::Computing;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        server.push_order(at, compute_ns, b.flows[f].bytes.round() as u64);
        // Its server sees the order in the step after `at`.
        n.ev.wake_at(w.guest, at + dt, dt);
    }
}

/// The run's result: the fabric's figures, the monitors' traffic, each host's own.
fn finish(
    spec: &FabricSpec,
    b: Built,
    nodes: Vec<Node>,
    rec: Recorder,
    run: &RunOptions,
    (duration, steps): (f64, u64),
) -> Result<HostsResult, HostsError> {
    let mut traffic: Vec<Option<VmBytes>> = vec![None; b.flows.len()];
    let mut hosts = Vec::new();
    for n in nodes {
        let flows = n.flows;
        let r = n.host.finish(duration);
        if run.traffic {
            for (k, vm) in r.traffic.iter().flatten().enumerate() {
                let f = flows[k];
                // Counted per host-core interval from the guest's start (0 here); at the
                // fabric's interval when they are the same (1 ms).
                traffic[f] = Some(VmBytes {
                    vm: b.vms[f].clone(),
                    job: b.jobs[b.flows[f].job as usize].name.clone(),
                    bytes: vm.tx_bytes.clone(),
                });
            }
        }
        hosts.push(r);
    }
    let fabric = FabricResult {
        name: spec.name.clone(),
        duration_s: duration,
        hosts: spec.hosts.len(),
        links: b.net.links.len(),
        flows: b.flows.len(),
        steps,
        jobs: job_results(&b.jobs, &b.flows, &b.vms, &b.shapes),
        series: rec.series(&b.net, &b.jobs, &b.recorded),
        interval_ms: 1.0,
        traffic: traffic.into_iter().flatten().collect(),
    };
    Ok(HostsResult {
        fabric,
        hosts,
        fleet: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_external_order_waits_for_its_arrival_whoever_steps_the_guest() {
        let scenario: Scenario = serde_json::from_value(serde_json::json!({
            "name": "h",
            "link": {"preset": "100g"},
            "guest": [{"name": "w0", "benchex": {"buffer": CHUNK, "chunk": CHUNK, "rate": 0.0}}],
        }))
        .unwrap();
        let cfg = LabConfig {
            external: true,
            ..LabConfig::default()
        };
        let mut host = LabHost::new(&scenario, cfg).unwrap();
        let s = &mut host.guests[0].server;
        s.push_order(1_000_000, 0, 3 * CHUNK);
        assert_eq!(s.next_event(5_000, 5_000), Some(1_005_000));
        // Stepped early (as a cap or a vCPU period would): the order is not taken.
        s.step(10_000, 5_000).unwrap();
        assert!(!s.sending());
        s.step(1_000_000, 5_000).unwrap();
        assert!(!s.sending());
        // The first step that ends after it: computed (0 ns) and posted.
        s.step(1_005_000, 5_000).unwrap();
        assert!(s.sending() && s.posted);
    }
}
