//! What a fabric run reports.

use serde::Serialize;

/// A job's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JobResult {
    /// Name.
    pub name: String,
    /// Its preset, if any.
    pub preset: Option<String>,
    /// Its workers' VMs (`job/wI@host`).
    pub vms: Vec<String>,
    /// Compute per iteration, ms.
    pub compute_ms: f64,
    /// Bytes each worker's flow carries per iteration.
    pub flow_bytes: f64,
    /// Iteration time alone on the fabric (compute plus its flows at the slowest link of
    /// their paths), ms.
    pub alone_ms: f64,
    /// Every finished iteration's time, ms.
    pub iter_ms: Vec<f64>,
    /// CNPs its flows received.
    pub cnps: u64,
}

impl JobResult {
    /// Mean iteration time after the first `skip` iterations (`None`: too few).
    #[must_use]
    pub fn mean_after(&self, skip: usize) -> Option<f64> {
        let v = self.iter_ms.get(skip..)?;
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }
}

/// A recorded link's utilisation over time, per job.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LinkSeries {
    /// The link.
    pub link: String,
    /// Width of a bucket, ms.
    pub bucket_ms: f64,
    /// The jobs, in the order of each bucket's values.
    pub jobs: Vec<String>,
    /// Per bucket, per job: the fraction of the link's rate it carried.
    pub util: Vec<Vec<f64>>,
}

/// A VM's transmitted bytes per interval (what the host's monitor would count exactly).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VmBytes {
    /// The VM.
    pub vm: String,
    /// Its job.
    pub job: String,
    /// Bytes per interval.
    pub bytes: Vec<u64>,
}

impl FabricResult {
    /// Iterations finished, all jobs.
    #[must_use]
    pub fn iterations(&self) -> usize {
        self.jobs.iter().map(|j| j.iter_ms.len()).sum()
    }

    /// The mean over jobs of (mean iteration after the first) / (alone): how much the fabric
    /// slowed its jobs (jobs without two iterations left out).
    #[must_use]
    pub fn mean_slowdown(&self) -> f64 {
        let slow: Vec<f64> = self
            .jobs
            .iter()
            .filter_map(|j| Some(j.mean_after(1)? / j.alone_ms))
            .collect();
        slow.iter().sum::<f64>() / slow.len().max(1) as f64
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FabricResult {
    /// The scenario.
    pub name: String,
    /// Virtual seconds run.
    pub duration_s: f64,
    /// Hosts, links, flows.
    pub hosts: usize,
    /// Links (NICs both ways, ToR uplinks, named links).
    pub links: usize,
    /// Flows (one per worker).
    pub flows: usize,
    /// Fluid steps taken (time jumps over compute phases are not steps).
    pub steps: u64,
    /// Per job.
    pub jobs: Vec<JobResult>,
    /// Recorded links.
    pub series: Vec<LinkSeries>,
    /// Width of the per-VM intervals, ms.
    pub interval_ms: f64,
    /// Per VM bytes per interval (when asked for).
    pub traffic: Vec<VmBytes>,
}
