//! A fabric from its spec: the links (every host's NIC both ways, every ToR's uplink both ways,
//! the named links), each worker's flow and its path, checked.

use crate::dcqcn::Dcqcn;
use crate::error::{FabricError, JobError, Limit};
use crate::job::{xorshift, Flow, Job, Phase};
use crate::net::{Link, Net};
use crate::spec::{check_gbps, FabricSpec, Pattern};
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
#[allow(clippy::too_many_lines)]
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
    let tor_base = links.len();
    for t in &spec.tors {
        let cap = check_gbps("tor", &t.name, t.up_gbps)?;
        links.push(link(format!("{}.up", t.name), cap, pq));
        links.push(link(format!("{}.down", t.name), cap, pq));
    }
    let named_base = links.len();
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
    let host_tor: Vec<Option<u32>> = spec
        .hosts
        .iter()
        .map(|h| {
            h.tor
                .as_deref()
                .map(|t| tors.get(t).copied().ok_or_else(|| unknown("tor", t, &tors)))
                .transpose()
        })
        .collect::<Result<_, _>>()?;
    let mut routes: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
    for r in &spec.routes {
        let from = *hosts
            .get(r.from.as_str())
            .ok_or_else(|| unknown("host", &r.from, &hosts))?;
        let to = *hosts
            .get(r.to.as_str())
            .ok_or_else(|| unknown("host", &r.to, &hosts))?;
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
                    .map(|&i| i + u32::try_from(named_base).unwrap_or(u32::MAX))
                    .ok_or_else(|| unknown("link", l, &named))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        if r.both_ways {
            routes.insert((to, from), path.clone());
        }
        routes.insert((from, to), path);
    }
    let tor_link =
        |t: u32, down: bool| u32::try_from(tor_base).unwrap_or(u32::MAX) + 2 * t + u32::from(down);
    let path_of = |a: u32, b: u32| -> Vec<u32> {
        let mut p = vec![2 * a];
        if a != b {
            if let Some(r) = routes.get(&(a, b)) {
                p.extend_from_slice(r);
            } else if let (Some(ta), Some(tb)) = (host_tor[a as usize], host_tor[b as usize]) {
                if ta != tb {
                    p.push(tor_link(ta, false));
                    p.push(tor_link(tb, true));
                }
            }
            p.push(2 * b + 1);
        }
        p
    };
    let params = &spec.cc.dcqcn;
    let mut jobs = Vec::new();
    let mut flows = Vec::new();
    let mut vms = Vec::new();
    let mut shapes = Vec::new();
    let mut classes = 1usize;
    let mut job_names = HashMap::new();
    let mut seed = spec.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for (j, js) in spec.jobs.iter().enumerate() {
        if job_names.insert(js.name.as_str(), j).is_some() {
            return Err(FabricError::Duplicate {
                what: "job",
                name: js.name.clone(),
            });
        }
        let (compute_ns, comm) = js.shape()?;
        let n = js.workers.len();
        if n < 2 {
            return Err(FabricError::Job {
                job: js.name.clone(),
                problem: JobError::TooFewWorkers { workers: n },
            });
        }
        if flows.len() + n > MAX_FLOWS {
            return Err(Limit::Workers { max: MAX_FLOWS }.into());
        }
        if !(js.jitter.is_finite()
            && (0.0..=10.0).contains(&js.jitter)
            && js.start_ms.is_finite()
            && (0.0..1e9).contains(&js.start_ms))
        {
            return Err(FabricError::Job {
                job: js.name.clone(),
                problem: JobError::Timing {
                    jitter: js.jitter,
                    start_ms: js.start_ms,
                },
            });
        }
        let t_us = js.t_us.unwrap_or(params.t_us);
        crate::dcqcn::DcqcnParams { t_us, ..*params }
            .check()
            .map_err(|e| FabricError::Job {
                job: js.name.clone(),
                problem: e.into(),
            })?;
        let bytes = match js.pattern {
            #[allow(clippy::cast_precision_loss)]
            Pattern::Ring => comm * 2.0 * (n - 1) as f64 / n as f64,
            Pattern::Send => comm,
        };
        let hs = js
            .workers
            .iter()
            .map(|w| {
                hosts
                    .get(w.as_str())
                    .copied()
                    .ok_or_else(|| unknown("host", w, &hosts))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        classes = classes.max(usize::from(js.priority) + 1);
        let first = flows.len();
        let mut slowest = f64::INFINITY;
        for i in 0..n {
            let path = path_of(hs[i], hs[(i + 1) % n]);
            let line = links[path[0] as usize].cap;
            let narrow = path
                .iter()
                .map(|&l| links[l as usize].cap)
                .fold(f64::INFINITY, f64::min);
            slowest = slowest.min(narrow);
            let vm = u32::try_from(vms.len()).unwrap_or(u32::MAX);
            vms.push(format!("{}/w{i}@{}", js.name, js.workers[i]));
            flows.push(Flow {
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
        seed = xorshift(seed);
        let mut job = Job {
            name: js.name.clone(),
            compute_ns,
            flows: first..flows.len(),
            phase: Phase::Done,
            iter_start: start,
            iters: Vec::new(),
            target: js.iterations,
            jitter: js.jitter,
            rng: seed,
        };
        job.phase = Phase::Compute(job.compute_until(start));
        jobs.push(job);
        shapes.push((
            js.preset.clone(),
            bytes,
            compute_ns as f64 / 1e6 + bytes / slowest * 1e3,
        ));
    }
    if classes > 8 {
        return Err(Limit::Priority { classes }.into());
    }
    let net = Net::new(links, classes, &spec.net);
    for f in &mut flows {
        f.slots = net.slots(&f.path, f.class);
        f.recorded = f
            .path
            .iter()
            .any(|&l| net.links[l as usize].record.is_some());
    }
    Ok(Built {
        net,
        jobs,
        flows,
        vms,
        shapes,
        recorded,
    })
}
