//! What a run records as it goes: every VM's bytes per interval (when asked for) and, for the
//! recorded links, each job's bytes per bucket; and the jobs' figures at the end. Shared by the
//! fluid run ([`crate::sim`]) and the run on whole lab hosts (`resex_lab::fabric`).

use crate::error::{FabricError, Limit};
use crate::job::{Flow, Job};
use crate::net::Net;
use crate::options::{RunOptions, MAX_CELLS};
use crate::result::{JobResult, LinkSeries, VmBytes};

/// The run's records.
#[derive(Debug)]
pub struct Recorder {
    traffic_on: bool,
    interval_ns: u64,
    bucket_ns: u64,
    buckets: usize,
    traffic: Vec<Vec<f64>>,
    /// Per recorded link: the jobs whose flows cross it.
    cols: Vec<Vec<u32>>,
    /// Per recorded link: bytes per bucket per job (bucket-major).
    rec: Vec<Vec<f64>>,
}

impl Recorder {
    /// Records for a run to `end_ns` of `vms` VMs; refused when they would be too large.
    pub fn new(
        net: &Net,
        flows: &[Flow],
        recorded: &[(u32, String)],
        vms: usize,
        end_ns: u64,
        opts: &RunOptions,
    ) -> Result<Self, FabricError> {
        if opts.interval_ns == 0 || opts.bucket_ns == 0 {
            return Err(FabricError::Interval {
                interval_ns: opts.interval_ns,
                bucket_ns: opts.bucket_ns,
            });
        }
        let intervals = usize::try_from(end_ns / opts.interval_ns + 1).unwrap_or(usize::MAX);
        let traffic: Vec<Vec<f64>> = if opts.traffic {
            let cells = intervals.saturating_mul(vms);
            if cells > MAX_CELLS {
                return Err(Limit::Traffic { vms, intervals }.into());
            }
            vec![vec![0.0; intervals]; vms]
        } else {
            Vec::new()
        };
        let buckets = usize::try_from(end_ns / opts.bucket_ns + 1).unwrap_or(usize::MAX);
        let mut cols: Vec<Vec<u32>> = vec![Vec::new(); recorded.len()];
        // Flows are stored job by job: a job is new to a link when it differs from the last.
        for f in flows {
            for &l in &f.path {
                if let Some(r) = net.links[l as usize].record {
                    if cols[r].last() != Some(&f.job) {
                        cols[r].push(f.job);
                    }
                }
            }
        }
        let rec_cells = cols
            .iter()
            .map(|c| buckets.saturating_mul(c.len()))
            .fold(0usize, usize::saturating_add);
        if rec_cells > MAX_CELLS {
            return Err(Limit::Recorded { buckets }.into());
        }
        let rec = cols.iter().map(|c| vec![0.0; buckets * c.len()]).collect();
        Ok(Self {
            traffic_on: opts.traffic,
            interval_ns: opts.interval_ns,
            bucket_ns: opts.bucket_ns,
            buckets,
            traffic,
            cols,
            rec,
        })
    }

    /// Flow `fl` sent `sent` bytes in the step that starts at `now`.
    #[inline]
    pub fn sent(&mut self, net: &Net, fl: &Flow, now: u64, sent: f64) {
        if self.traffic_on {
            let i = usize::try_from(now / self.interval_ns).unwrap_or(0);
            if let Some(c) = self.traffic[fl.vm as usize].get_mut(i) {
                *c += sent;
            }
        }
        if !fl.recorded {
            return;
        }
        for &l in &fl.path {
            if let Some(r) = net.links[l as usize].record {
                let b = usize::try_from(now / self.bucket_ns).unwrap_or(0);
                let w = self.cols[r].len();
                if let Some(col) = self.cols[r].iter().position(|&j| j == fl.job) {
                    if let Some(c) = self.rec[r].get_mut(b * w + col) {
                        *c += sent;
                    }
                }
            }
        }
    }

    /// The recorded links' utilisation per bucket and job.
    #[must_use]
    pub fn series(&self, net: &Net, jobs: &[Job], recorded: &[(u32, String)]) -> Vec<LinkSeries> {
        recorded
            .iter()
            .enumerate()
            .map(|(r, (l, name))| {
                let cap = net.links[*l as usize].cap * self.bucket_ns as f64 / 1e9;
                let w = self.cols[r].len();
                LinkSeries {
                    link: name.clone(),
                    bucket_ms: self.bucket_ns as f64 / 1e6,
                    jobs: self.cols[r]
                        .iter()
                        .map(|&j| jobs[j as usize].name.clone())
                        .collect(),
                    util: (0..self.buckets)
                        .map(|b| (0..w).map(|c| self.rec[r][b * w + c] / cap).collect())
                        .collect(),
                }
            })
            .collect()
    }

    /// Every VM's bytes per interval (empty unless asked for).
    #[must_use]
    pub fn traffic(self, vms: &[String], jobs: &[Job], flows: &[Flow]) -> Vec<VmBytes> {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        self.traffic
            .into_iter()
            .enumerate()
            .map(|(v, t)| VmBytes {
                vm: vms[v].clone(),
                job: jobs[flows[v].job as usize].name.clone(),
                bytes: t.into_iter().map(|b| b.round() as u64).collect(),
            })
            .collect()
    }
}

/// Every job's figures: `shapes` is [`crate::build::Built::shapes`].
#[must_use]
pub fn job_results(
    jobs: &[Job],
    flows: &[Flow],
    vms: &[String],
    shapes: &[(Option<String>, f64, f64)],
) -> Vec<JobResult> {
    jobs.iter()
        .enumerate()
        .map(|(j, job)| JobResult {
            name: job.name.clone(),
            preset: shapes[j].0.clone(),
            vms: job.flows.clone().map(|f| vms[f].clone()).collect(),
            compute_ms: job.compute_ns as f64 / 1e6,
            flow_bytes: shapes[j].1,
            alone_ms: shapes[j].2,
            iter_ms: job.iters.iter().map(|&t| t as f64 / 1e6).collect(),
            cnps: flows[job.flows.clone()].iter().map(|f| f.cc.cnps).sum(),
        })
        .collect()
}
