//! `resex lab mlcompat place FILE.toml`: the placement advisor (`resex_mlcompat::place`) on
//! jobs and links from a TOML file: which jobs should share which link, beside the naive
//! round-robin assignment.
//!
//! ```toml
//! link_gbps = 50.0                 # optional, default 50: the rate presets are timed at
//! [[job]]
//! name = "vgg19-a"
//! preset = "vgg19"                 # a resex_mlcompat::preset job at link_gbps
//! [[job]]
//! name = "custom"
//! period_ms = 100.0                # or: the iteration time ...
//! comm_ms = 40.0                   # ... and the communication at its end
//! demand = 1.0                     # optional, default 1: fraction of the link while sending
//! [[link]]
//! name = "l1"
//! max_jobs = 2
//! ```

use anyhow::{bail, Context, Result};
use clap::Args;
use resex_mlcompat::place::{place, Link, NamedJob, Placement, Start};
use resex_mlcompat::{preset, Job};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Options of `resex lab mlcompat place`.
#[derive(Debug, Args)]
pub struct PlaceArgs {
    /// The jobs and links (e.g. tools/scenarios/mlcompat/place.toml).
    pub file: PathBuf,
    /// Print the placement as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The file's contents.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlaceFile {
    /// The links' rate, Gb/s: presets are timed at it.
    #[serde(default = "default_gbps")]
    link_gbps: f64,
    #[serde(default)]
    job: Vec<JobEntry>,
    #[serde(default)]
    link: Vec<Link>,
}

fn default_gbps() -> f64 {
    50.0
}

/// One `[[job]]`: a preset, or a period with its communication at the end.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobEntry {
    name: String,
    preset: Option<String>,
    period_ms: Option<f64>,
    comm_ms: Option<f64>,
    demand: Option<f64>,
}

impl JobEntry {
    fn job(&self, bits_per_s: f64) -> Result<Job> {
        match (&self.preset, self.period_ms, self.comm_ms) {
            (Some(name), None, None) => {
                if self.demand.is_some() {
                    bail!("a preset job takes no demand (it sends at the link's rate)");
                }
                let p = preset::preset(name).with_context(|| {
                    format!(
                        "unknown preset {name:?}; known presets: {}",
                        preset::names().join(", ")
                    )
                })?;
                Ok(p.job(bits_per_s))
            }
            (None, Some(period), Some(comm)) => {
                // 1 us to an hour: shorter periods cannot be slotted (the circle wants 20 slots
                // of at least 1 ns), longer ones are not training iterations.
                if !(period.is_finite() && (1e-3..=3.6e6).contains(&period)) {
                    bail!("period_ms {period} is not in [0.001, 3.6e6]");
                }
                if !(comm.is_finite() && comm > 0.0 && comm <= period) {
                    bail!("comm_ms {comm} is not in (0, period_ms]");
                }
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let period_ns = (period * 1e6).round() as u64;
                // The library refuses a bad demand (NaN, negative, huge) by name.
                let demand = self.demand.unwrap_or(1.0);
                Ok(Job::single(period_ns, 1.0 - comm / period, 1.0, demand))
            }
            _ => bail!("give either preset, or period_ms and comm_ms"),
        }
    }
}

/// Reads `path` into the advisor's jobs and links.
fn load(path: &Path) -> Result<(Vec<NamedJob>, Vec<Link>)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let f: PlaceFile =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if !(f.link_gbps.is_finite() && f.link_gbps > 0.0) {
        bail!("link_gbps {} is not a positive rate", f.link_gbps);
    }
    let bits = f.link_gbps * 1e9;
    let jobs = f
        .job
        .iter()
        .map(|j| {
            Ok(NamedJob {
                name: j.name.clone(),
                job: j.job(bits).with_context(|| format!("job {:?}", j.name))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((jobs, f.link))
}

pub fn run(a: &PlaceArgs) -> Result<()> {
    let (jobs, links) = load(&a.file)?;
    let p = place(&jobs, &links).with_context(|| format!("placing {}", a.file.display()))?;
    if a.json {
        println!("{}", serde_json::to_string(&p)?);
        return Ok(());
    }
    print_text(&p);
    Ok(())
}

fn print_text(p: &Placement) {
    let width = p
        .links
        .iter()
        .map(|l| l.link.len())
        .max()
        .unwrap_or(4)
        .max(4);
    for l in &p.links {
        #[allow(clippy::cast_precision_loss)]
        let jobs: Vec<String> = if l.shifts_ns.len() == l.jobs.len() {
            l.jobs
                .iter()
                .zip(&l.shifts_ns)
                .map(|(j, s)| format!("{j} +{:.1} ms", *s as f64 / 1e6))
                .collect()
        } else {
            l.jobs.clone()
        };
        let jobs = if jobs.is_empty() {
            "-".to_string()
        } else {
            jobs.join(", ")
        };
        print!("{:<width$}  score {:.3}  {jobs}", l.link, l.score);
        match &l.score_error {
            Some(e) => println!("  (circle refused: {e})"),
            None => println!(),
        }
    }
    let start = match p.start {
        Start::Greedy => "greedy + swaps",
        Start::Baseline => "round-robin + swaps",
    };
    println!(
        "advisor ({start}): mean {:.3}, worst {:.3}   baseline (round-robin in input order): \
         mean {:.3}, worst {:.3}",
        p.mean_score, p.worst_score, p.baseline.mean_score, p.baseline.worst_score
    );
}
