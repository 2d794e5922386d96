//! A fabric from its spec: the links (every host's NIC both ways, every ToR's uplink both ways,
//! the named links), each worker's flow and its path, checked.

use crate::dcqcn::{Dcqcn, DcqcnParams};
use crate::error::{FabricError, JobError, Limit};
use crate::job::{xorshift, Flow, Job, Phase};
use crate::net::{Link, Net};
use crate::spec::{check_gbps, FabricSpec, JobSpec, Pattern};
use std::collections::HashMap;

/// Caps on what a spec may ask for (a hostile or mistaken file cannot exhaust the machine).
pub const MAX_HOSTS: usize = 100_000;
/// The most flows (workers) a fabric may have.
pub const MAX_FLOWS: usize = 1_000_000;
/// The most links on a route.
pub const MAX_ROUTE: usize = 64;

/// The built fabric.
#[derive(Debug)]
pub struct Built {
    /// Links and queues.
    pub net: Net,
    /// Jobs.
    pub jobs: Vec<Job>,
    /// Flows, job by job.
    pub flows: Vec<Flow>,
    /// VM names (`job/wI@host`), by flow.
    pub vms: Vec<String>,
    /// Per job: the preset, the flow bytes, the alone time (ms).
    pub shapes: Vec<(Option<String>, f64, f64)>,
    /// Recorded links: (link index, name).
    pub recorded: Vec<(u32, String)>,
}

fn index<'a>(
    what: &'static str,
    names: impl Iterator<Item = &'a str>,
) -> Result<HashMap<&'a str, u32>, FabricError> {
    let mut m = HashMap::new();
    for (i, n) in names.enumerate() {
        let i = u32::try_from(i).map_err(|_| Limit::Names { what })?;
        if m.insert(n, i).is_some() {
            return Err(FabricError::Duplicate {
                what,
                name: n.into(),
            });
        }
    }
    Ok(m)
}

fn unknown<T>(what: &'static str, name: &str, m: &HashMap<&str, T>) -> FabricError {
    let mut known: Vec<&str> = m.keys().copied().collect();
    known.sort_unstable();
    known.truncate(12);
    FabricError::Unknown {
        what,
        name: name.into(),
        known: known.join(", "),
    }
}

/// Builds `spec`.
pub fn build(spec: &FabricSpec) -> Result<Built, FabricError> {
    spec.cc.dcqcn.check()?;
    spec.net.check()?;
    if spec.hosts.is_empty() || spec.hosts.len() > MAX_HOSTS {
        return Err(Limit::Hosts {
            hosts: spec.hosts.len(),
            max: MAX_HOSTS,
        }
        .into());
    }
    let hosts = index("host", spec.hosts.iter().map(|h| h.name.as_str()))?;
    let tors = index("tor", spec.tors.iter().map(|t| t.name.as_str()))?;
    let named = index("link", spec.links.iter().map(|l| l.name.as_str()))?;
    let (links, recorded, bases) = links_of(spec)?;
    let paths = Paths::of(spec, (&hosts, &tors, &named), bases)?;
    let mut jobs = Jobs::default();
    let mut seed = spec.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for (j, js) in spec.jobs.iter().enumerate() {
        seed = xorshift(seed);
        jobs.add(j, js, &spec.cc.dcqcn, seed, (&hosts, &paths, &links))?;
    }
    if jobs.classes > 8 {
        return Err(Limit::Priority {
            classes: jobs.classes,
        }
        .into());
    }
    let net = Net::new(links, jobs.classes, &spec.net);
    for f in &mut jobs.flows {
        f.slots = net.slots(&f.path, f.class);
        f.recorded = f
            .path
            .iter()
            .any(|&l| net.links[l as usize].record.is_some());
    }
    Ok(Built {
        net,
        jobs: jobs.jobs,
        flows: jobs.flows,
        vms: jobs.vms,
        shapes: jobs.shapes,
        recorded,
    })
}

/// The recorded links: (link index, name).
type Recorded = Vec<(u32, String)>;

/// Where the ToRs' links and the named links start among all links.
#[derive(Clone, Copy)]
struct Bases {
    tor: u32,
    named: u32,
}

/// Every link: each host's NIC (tx, rx), each ToR's uplink (up, down), then the named links;
/// the recorded ones (index, name) in the order recorded.
fn links_of(spec: &FabricSpec) -> Result<(Vec<Link>, Recorded, Bases), FabricError> {
    let mut links: Vec<Link> = Vec::new();
    let link = |name: String, cap: f64, prio: bool| Link {
        name,
        cap: cap / 8.0,
        prio,
        record: None,
    };
    let pq = spec.net.priority_queues;
    for h in &spec.hosts {
        let cap = check_gbps("host", &h.name, h.nic_gbps)?;
        links.push(link(format!("{}.tx", h.name), cap, pq));
        links.push(link(format!("{}.rx", h.name), cap, pq));
    }
    let tor = u32::try_from(links.len()).unwrap_or(u32::MAX);
    for t in &spec.tors {
        let cap = check_gbps("tor", &t.name, t.up_gbps)?;
        links.push(link(format!("{}.up", t.name), cap, pq));
        links.push(link(format!("{}.down", t.name), cap, pq));
    }
    let named = u32::try_from(links.len()).unwrap_or(u32::MAX);
    let mut recorded = Vec::new();
    for l in &spec.links {
        let cap = check_gbps("link", &l.name, l.gbps)?;
        if l.record {
            recorded.push((
                u32::try_from(links.len()).unwrap_or(u32::MAX),
                l.name.clone(),
            ));
        }
        links.push(link(l.name.clone(), cap, l.priority_queues.unwrap_or(pq)));
    }
    for (k, (i, _)) in recorded.iter().enumerate() {
        links[*i as usize].record = Some(k);
    }
    Ok((links, recorded, Bases { tor, named }))
}

/// Hosts, ToRs and named links, each by name.
type Names<'a, 'b> = (
    &'a HashMap<&'b str, u32>,
    &'a HashMap<&'b str, u32>,
    &'a HashMap<&'b str, u32>,
);

/// How a flow goes from host to host: a route, else through the two hosts' ToRs.
struct Paths {
    routes: HashMap<(u32, u32), Vec<u32>>,
    host_tor: Vec<Option<u32>>,
    tor_base: u32,
}

impl Paths {
    /// The paths over `spec`'s routes and ToRs; `(hosts, tors, named links)` by name.
    fn of(
        spec: &FabricSpec,
        (hosts, tors, named): Names<'_, '_>,
        bases: Bases,
    ) -> Result<Self, FabricError> {
        let host_tor: Vec<Option<u32>> = spec
            .hosts
            .iter()
            .map(|h| {
                h.tor
                    .as_deref()
                    .map(|t| tors.get(t).copied().ok_or_else(|| unknown("tor", t, tors)))
                    .transpose()
            })
            .collect::<Result<_, _>>()?;
        let host = |n: &str| {
            hosts
                .get(n)
                .copied()
                .ok_or_else(|| unknown("host", n, hosts))
        };
        let mut routes: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
        for r in &spec.routes {
            let (from, to) = (host(&r.from)?, host(&r.to)?);
            if r.links.len() > MAX_ROUTE {
                return Err(Limit::Route {
                    from: r.from.clone(),
                    to: r.to.clone(),
                    max: MAX_ROUTE,
                }
                .into());
            }
            let path = r
                .links
                .iter()
                .map(|l| {
                    named
                        .get(l.as_str())
                        .map(|&i| i + bases.named)
                        .ok_or_else(|| unknown("link", l, named))
                })
                .collect::<Result<Vec<u32>, _>>()?;
            if r.both_ways {
                routes.insert((to, from), path.clone());
            }
            routes.insert((from, to), path);
        }
        Ok(Self {
            routes,
            host_tor,
            tor_base: bases.tor,
        })
    }

    /// The links from host `a` to host `b`: `a`'s tx, the route or the ToRs, `b`'s rx.
    fn path(&self, a: u32, b: u32) -> Vec<u32> {
        let tor_link = |t: u32, down: bool| self.tor_base + 2 * t + u32::from(down);
        let mut p = vec![2 * a];
        if a != b {
            if let Some(r) = self.routes.get(&(a, b)) {
                p.extend_from_slice(r);
            } else if let (Some(ta), Some(tb)) =
                (self.host_tor[a as usize], self.host_tor[b as usize])
            {
                if ta != tb {
                    p.push(tor_link(ta, false));
                    p.push(tor_link(tb, true));
                }
            }
            p.push(2 * b + 1);
        }
        p
    }
}

/// The jobs, their workers' flows and VMs, as they are built.
struct Jobs<'s> {
    jobs: Vec<Job>,
    flows: Vec<Flow>,
    vms: Vec<String>,
    shapes: Vec<(Option<String>, f64, f64)>,
    classes: usize,
    names: HashMap<&'s str, usize>,
}

impl Default for Jobs<'_> {
    fn default() -> Self {
        Self {
            jobs: Vec::new(),
            flows: Vec::new(),
            vms: Vec::new(),
            shapes: Vec::new(),
            classes: 1,
            names: HashMap::new(),
        }
    }
}

/// What a job's flows are laid over: the hosts by name, the paths, the links.
type Fabric<'a, 'b> = (&'a HashMap<&'b str, u32>, &'a Paths, &'a [Link]);

impl<'s> Jobs<'s> {
    /// Adds job `j`: one flow per worker to the next (a ring), each on its path.
    fn add(
        &mut self,
        j: usize,
        js: &'s JobSpec,
        params: &DcqcnParams,
        seed: u64,
        (hosts, paths, links): Fabric<'_, '_>,
    ) -> Result<(), FabricError> {
        if self.names.insert(js.name.as_str(), j).is_some() {
            return Err(FabricError::Duplicate {
                what: "job",
                name: js.name.clone(),
            });
        }
        let (compute_ns, bytes, t_us) = check_job(js, params, self.flows.len())?;
        let hs = js
            .workers
            .iter()
            .map(|w| {
                hosts
                    .get(w.as_str())
                    .copied()
                    .ok_or_else(|| unknown("host", w, hosts))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        self.classes = self.classes.max(usize::from(js.priority) + 1);
        let first = self.flows.len();
        let n = hs.len();
        let mut slowest = f64::INFINITY;
        let senders = if js.pattern == Pattern::Pipeline {
            n - 1
        } else {
            n
        };
        for i in 0..senders {
            let path = paths.path(hs[i], hs[(i + 1) % n]);
            let line = links[path[0] as usize].cap;
            let narrow = path
                .iter()
                .map(|&l| links[l as usize].cap)
                .fold(f64::INFINITY, f64::min);
            slowest = slowest.min(narrow);
            let vm = u32::try_from(self.vms.len()).unwrap_or(u32::MAX);
            self.vms.push(format!("{}/w{i}@{}", js.name, js.workers[i]));
            self.flows.push(Flow {
                job: u32::try_from(j).unwrap_or(u32::MAX),
                vm,
                host: hs[i],
                path,
                class: js.priority,
                slots: Vec::new(),
                recorded: false,
                bytes,
                left: 0.0,
                cc: Dcqcn::new(params, t_us, line, 0),
                marks: 0.0,
            });
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let start = (js.start_ms * 1e6).round() as u64;
        let mut job = Job {
            name: js.name.clone(),
            compute_ns,
            flows: first..self.flows.len(),
            phase: Phase::Done,
            iter_start: start,
            iters: Vec::new(),
            target: js.iterations,
            jitter: js.jitter,
            rng: seed,
        };
        job.phase = Phase::Compute(job.compute_until(start));
        self.jobs.push(job);
        self.shapes.push((
            js.preset.clone(),
            bytes,
            compute_ns as f64 / 1e6 + bytes / slowest * 1e3,
        ));
        Ok(())
    }
}

/// A job's shape, checked: its compute time, the bytes each worker sends per iteration (its
/// pattern's share of the communication) and its DCQCN timer, with `flows` built so far.
fn check_job(
    js: &JobSpec,
    params: &DcqcnParams,
    flows: usize,
) -> Result<(u64, f64, f64), FabricError> {
    let (compute_ns, comm) = js.shape()?;
    let n = js.workers.len();
    let job_error = |problem: JobError| FabricError::Job {
        job: js.name.clone(),
        problem,
    };
    if n < 2 {
        return Err(job_error(JobError::TooFewWorkers { workers: n }));
    }
    if flows + n > MAX_FLOWS {
        return Err(Limit::Workers { max: MAX_FLOWS }.into());
    }
    if !(js.jitter.is_finite()
        && (0.0..=10.0).contains(&js.jitter)
        && js.start_ms.is_finite()
        && (0.0..1e9).contains(&js.start_ms))
    {
        return Err(job_error(JobError::Timing {
            jitter: js.jitter,
            start_ms: js.start_ms,
        }));
    }
    let t_us = js.t_us.unwrap_or(params.t_us);
    DcqcnParams { t_us, ..*params }
        .check()
        .map_err(|e| job_error(e.into()))?;
    let bytes = match js.pattern {
        #[allow(clippy::cast_precision_loss)]
        Pattern::Ring => comm * 2.0 * (n - 1) as f64 / n as f64,
        Pattern::Send | Pattern::Pipeline => comm,
    };
    Ok((compute_ns, bytes, t_us))
}
