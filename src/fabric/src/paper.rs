//! The paper's experiments on the fabric (issue 20, item 6): jobs sharing one bottleneck
//! link `l1` (50 Gb/s, NICs 50 Gb/s), each job two workers on either side of it (a ring of two:
//! each worker sends its bytes across `l1`, one each way), run four ways:
//!
//! - **fair**: DCQCN with the same `T` (125 µs) everywhere;
//! - **unfair**: the paper's static unfairness, the first job most aggressive: `T` = 100 µs for
//!   the first, rising evenly to 125 µs for the last (two jobs: 100 and 125 µs, as the paper);
//! - **adaptive**: every flow `T` = 125 µs with `R_AI (1 + gain progress)` ([`ADAPTIVE_GAIN`]);
//! - **priority**: strict-priority queues, the first job in class 0, the next in class 1, ...
//!
//! Each row gives the mean iteration time after the first `warmup` iterations (the sliding
//! the paper shows in Fig. 2 happens in those), and the group's compatibility score on the
//! circle of the link (`resex_mlcompat`).

use crate::error::FabricError;
use crate::result::FabricResult;
use crate::sim::{run, RunOptions};
use crate::spec::{CcMode, CcSpec, FabricLink, FabricSpec, HostSpec, JobSpec, NetSpec, RouteSpec};
use serde::Serialize;

/// The bottleneck's rate, b/s.
pub const LINK_BPS: f64 = 50e9;

/// Job `i` starts `i` times this after the first (ms): the paper starts its jobs together;
/// a perfectly symmetric start would leave nothing for unfairness to work on in a
/// deterministic model, and real jobs never start to the microsecond.
pub const STAGGER_MS: f64 = 1.0;

/// The adaptive scheme's gain in the experiments: `R_AI (1 + 10 progress)`. The paper's
/// `R_AI (1 + progress)` (gain 1) moves compatible jobs apart too slowly in this model to
/// matter (two DLRM jobs: 1363 ms against 1376 ms fair; gain 10: 1050 ms); see
/// `docs/mlcompat.md`.
pub const ADAPTIVE_GAIN: f64 = 10.0;

/// How a group is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Same `T` for all.
    Fair,
    /// First job most aggressive.
    Unfair,
    /// `R_AI (1 + progress)`.
    Adaptive,
    /// Strict priority, first job first.
    Priority,
}

impl Scheme {
    /// All of them, in the rows' order.
    pub const ALL: [Scheme; 4] = [Self::Fair, Self::Unfair, Self::Adaptive, Self::Priority];
}

/// Settings of the experiments.
#[derive(Debug, Clone, Copy)]
pub struct PaperConfig {
    /// Iterations of the slowest job alone to run for.
    pub iterations: u64,
    /// Iterations left out of each mean.
    pub warmup: usize,
    /// Seed.
    pub seed: u64,
    /// Step, µs.
    pub dt_us: f64,
    /// The controller's parameters.
    pub dcqcn: crate::dcqcn::DcqcnParams,
}

impl Default for PaperConfig {
    fn default() -> Self {
        Self {
            iterations: 30,
            warmup: 5,
            seed: 1,
            dt_us: 5.0,
            dcqcn: crate::dcqcn::DcqcnParams {
                adaptive_gain: ADAPTIVE_GAIN,
                ..crate::dcqcn::DcqcnParams::default()
            },
        }
    }
}

/// One group's row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// The jobs (presets), the first most favoured by `unfair` and `priority`.
    pub jobs: Vec<String>,
    /// Compatibility on the link's circle, 0-1 (`None`: the circle could not be built).
    pub compat_score: Option<f64>,
    /// Why there is no score.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compat_error: Option<String>,
    /// Each job alone, ms.
    pub alone_ms: Vec<f64>,
    /// Mean iteration times per scheme, ms.
    pub fair_iter_ms: Vec<f64>,
    /// Static unfairness.
    pub unfair_iter_ms: Vec<f64>,
    /// Adaptive unfairness.
    pub adaptive_iter_ms: Vec<f64>,
    /// Strict priority.
    pub priority_iter_ms: Vec<f64>,
    /// fair / unfair, per job.
    pub unfair_speedup: Vec<f64>,
    /// fair / adaptive, per job.
    pub adaptive_speedup: Vec<f64>,
    /// Iterations each mean is over (the fewest of any job and scheme).
    pub iterations: usize,
}

/// The groups of Table 1 (batch sizes are not modelled: one preset per model), and the two
/// VGG19 jobs of Fig. 1.
#[must_use]
pub fn table1() -> Vec<Vec<&'static str>> {
    vec![
        vec!["vgg19", "vgg19"],
        vec!["bert", "vgg19"],
        vec!["dlrm", "dlrm"],
        vec!["bert", "vgg19", "wideresnet"],
        vec!["wideresnet", "vgg16"],
        vec!["vgg19", "vgg16", "resnet50"],
    ]
}

/// The fabric of a group run under `scheme`.
pub fn group_spec(
    jobs: &[&str],
    scheme: Scheme,
    cfg: &PaperConfig,
) -> Result<FabricSpec, FabricError> {
    let mut slowest = 0.0f64;
    for j in jobs {
        let p = resex_mlcompat::preset::preset(j).ok_or_else(|| FabricError::Unknown {
            what: "preset",
            name: (*j).to_string(),
            known: resex_mlcompat::preset::names().join(", "),
        })?;
        slowest = slowest.max(p.iteration_ns(LINK_BPS) as f64 / 1e9);
    }
    let mut hosts = Vec::new();
    let mut routes = Vec::new();
    let mut job_specs = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let (a, b) = (format!("a{i}"), format!("b{i}"));
        for h in [&a, &b] {
            hosts.push(HostSpec {
                name: h.clone(),
                nic_gbps: LINK_BPS / 1e9,
                tor: None,
            });
        }
        routes.push(RouteSpec {
            from: a.clone(),
            to: b.clone(),
            links: vec!["l1".into()],
            both_ways: false,
        });
        routes.push(RouteSpec {
            from: b.clone(),
            to: a.clone(),
            links: vec!["l1r".into()],
            both_ways: false,
        });
        let mut js = JobSpec::of_preset(&format!("{j}-{}", i + 1), j, &[&a, &b]);
        js.start_ms = STAGGER_MS * i as f64;
        match scheme {
            Scheme::Unfair => {
                js.t_us = Some(100.0 + 25.0 * i as f64 / (jobs.len() - 1).max(1) as f64);
            }
            Scheme::Priority => js.priority = u8::try_from(i).unwrap_or(7).min(7),
            Scheme::Fair | Scheme::Adaptive => {}
        }
        job_specs.push(js);
    }
    let link = |name: &str, record: bool| FabricLink {
        name: name.into(),
        gbps: LINK_BPS / 1e9,
        priority_queues: None,
        record,
    };
    Ok(FabricSpec {
        name: format!("{} ({scheme:?})", jobs.join(" + ")),
        description: "jobs sharing one 50 Gb/s bottleneck".into(),
        duration_s: slowest * cfg.iterations as f64,
        dt_us: cfg.dt_us,
        seed: cfg.seed,
        cc: CcSpec {
            dcqcn: cfg.dcqcn,
            mode: if scheme == Scheme::Adaptive {
                CcMode::Adaptive
            } else {
                CcMode::Dcqcn
            },
        },
        net: NetSpec {
            priority_queues: scheme == Scheme::Priority,
            ..NetSpec::default()
        },
        hosts,
        tors: Vec::new(),
        links: vec![link("l1", true), link("l1r", false)],
        routes,
        jobs: job_specs,
        chunk_kib: None,
    })
}

/// The circle settings of the experiments: the default's, with room for the LCM of three
/// presets' periods (VGG19, VGG16 and ResNet50 need 6 120 slots of 8.25 ms).
#[must_use]
pub fn circle_config() -> resex_mlcompat::CircleConfig {
    resex_mlcompat::CircleConfig {
        max_slots: 1 << 14,
        ..resex_mlcompat::CircleConfig::default()
    }
}

/// Why a group of jobs has no compatibility score.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompatError {
    /// A job that is no preset.
    #[error("no preset {0}")]
    NoPreset(String),
    /// The circle cannot hold them.
    #[error(transparent)]
    Circle(#[from] resex_mlcompat::CircleError),
}

/// The compatibility score of `jobs` on the link's circle, or why there is none.
pub fn compat_score(jobs: &[&str]) -> Result<f64, CompatError> {
    let circle: Vec<_> = jobs
        .iter()
        .map(|j| {
            resex_mlcompat::preset::preset(j)
                .map(|p| p.job(LINK_BPS))
                .ok_or_else(|| CompatError::NoPreset((*j).to_owned()))
        })
        .collect::<Result<_, _>>()?;
    Ok(resex_mlcompat::compatibility(&circle, &circle_config())?.score)
}

/// Runs `jobs` under every scheme: the row and the four runs (in [`Scheme::ALL`]'s order).
pub fn group(jobs: &[&str], cfg: &PaperConfig) -> Result<(Row, Vec<FabricResult>), FabricError> {
    group_with(jobs, cfg, |spec| run(spec, &RunOptions::default()))
}

/// [`group`] with another runner of each scheme's fabric (the fluid model's [`run`], or the
/// run on whole lab hosts).
pub fn group_with<E: From<FabricError>>(
    jobs: &[&str],
    cfg: &PaperConfig,
    mut runner: impl FnMut(&FabricSpec) -> Result<FabricResult, E>,
) -> Result<(Row, Vec<FabricResult>), E> {
    let mut runs = Vec::new();
    for s in Scheme::ALL {
        runs.push(runner(&group_spec(jobs, s, cfg)?)?);
    }
    let means = |r: &FabricResult| -> Vec<f64> {
        r.jobs
            .iter()
            .map(|j| j.mean_after(cfg.warmup).unwrap_or(f64::NAN))
            .collect()
    };
    let iterations = runs
        .iter()
        .flat_map(|r| {
            r.jobs
                .iter()
                .map(|j| j.iter_ms.len().saturating_sub(cfg.warmup))
        })
        .min()
        .unwrap_or(0);
    let ratio = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x / y).collect();
    let fair = means(&runs[0]);
    let unfair = means(&runs[1]);
    let adaptive = means(&runs[2]);
    let score = compat_score(jobs);
    let row = Row {
        jobs: jobs.iter().map(|j| (*j).to_string()).collect(),
        compat_score: score.as_ref().ok().copied(),
        compat_error: score.err().map(|e| e.to_string()),
        alone_ms: runs[0].jobs.iter().map(|j| j.alone_ms).collect(),
        unfair_speedup: ratio(&fair, &unfair),
        adaptive_speedup: ratio(&fair, &adaptive),
        priority_iter_ms: means(&runs[3]),
        fair_iter_ms: fair,
        unfair_iter_ms: unfair,
        adaptive_iter_ms: adaptive,
        iterations,
    };
    Ok((row, runs))
}
