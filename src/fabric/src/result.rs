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

    /// Mean iteration time once settled: over the iterations that began after the first
    /// third of a `duration_s` run (a detector needs a few periods, a fleet a few rounds), ms
    /// (`None`: none began then).
    #[must_use]
    pub fn mean_settled(&self, duration_s: f64) -> Option<f64> {
        let from = duration_s * 1e3 / 3.0;
        let mut began = 0.0;
        let (mut sum, mut n) = (0.0, 0usize);
        for t in &self.iter_ms {
            if began >= from {
                sum += t;
                n += 1;
            }
            began += t;
        }
        (n > 0).then(|| sum / n as f64)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settled_mean_counts_the_iterations_begun_after_the_first_third() {
        let j = JobResult {
            name: "a".into(),
            preset: None,
            vms: vec![],
            compute_ms: 1.0,
            flow_bytes: 0.0,
            alone_ms: 1.0,
            // Begun at 0, 400, 800 (the first third of 3 s ends at 1000), 1000, 1300 ms.
            iter_ms: vec![400.0, 400.0, 200.0, 300.0, 500.0],
            cnps: 0,
        };
        assert_eq!(j.mean_settled(3.0), Some(400.0));
        assert_eq!(j.mean_settled(30.0), None, "none begun after 10 s");
        assert_eq!(j.mean_after(3), Some(400.0));
    }
}
