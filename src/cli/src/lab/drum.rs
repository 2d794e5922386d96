//! `resex lab drum`: the DRUM paper's simulations (ADMM, the dual-decomposition baseline, the
//! certified optimum) as a table, JSON, and SVG convergence plots.

use super::emit::emit;
use anyhow::{bail, Context, Result};
use clap::Args;
use resex_drum::experiment::{run, Config, Outcome, Progress};
use resex_drum::penalty::PenaltyRule;
use resex_drum::Selection;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

/// Options of `resex lab drum`.
#[derive(Debug, Args)]
pub struct DrumArgs {
    /// Hosts (n).
    #[arg(long, default_value_t = 100)]
    pub hosts: usize,
    /// Applications per host (m).
    #[arg(long, default_value_t = 50)]
    pub apps: usize,
    /// Run the paper's grid: n in {1e2, 1e3, 1e4} x m in {50, 500, 5000} (ignores --hosts/--apps).
    #[arg(long)]
    pub all: bool,
    /// Seed of the a_j draw.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A fixed ADMM penalty rho (the paper's: 0.001). Without it rho starts at 0.1 and moves
    /// by residual balancing (Boyd et al. 2011, 3.4.1: mu = 10, tau = 2).
    #[arg(long)]
    pub rho: Option<f64>,
    /// Iterations of each method (the paper plots 60).
    #[arg(long, default_value_t = 60)]
    pub iterations: u64,
    /// k: applications per host that earn utility.
    #[arg(long, default_value_t = 20)]
    pub k: usize,
    /// The paper's log-capacity of the WQE rates (q_i).
    #[arg(long, default_value_t = 25.0)]
    pub q: f64,
    /// The paper's log-capacity of the CQE polling rates (c_i).
    #[arg(long, default_value_t = 15.0)]
    pub c: f64,
    /// Fairness exponent, 0 < alpha < 1.
    #[arg(long, default_value_t = 0.5)]
    pub alpha: f64,
    /// Weight of the CQ latency utility.
    #[arg(long, default_value_t = 1.0)]
    pub beta: f64,
    /// The x-step's choice of the k applications: `rates` (the last z-step's largest rates) or
    /// `exact` (every x-step's exact minimiser).
    #[arg(long, default_value = "rates", value_parser = ["rates", "exact"])]
    pub selection: String,
    /// Print the figures (with the traces) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the convergence plots (objective and residual per iteration, both methods) as
    /// DIR/drum-nN-mM.svg.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// The JSON of one run: the simulation's figures plus wall time and memory.
fn config(a: &DrumArgs, hosts: usize, apps: usize) -> Config {
    let mut c = match a.rho {
        Some(rho) => {
            let mut c = Config::paper(hosts, apps, a.seed);
            c.setup.rho = rho;
            c
        }
        None => Config::adaptive(hosts, apps, a.seed),
    };
    c.setup.k = a.k;
    c.setup.q = a.q;
    c.setup.c = a.c;
    c.setup.alpha = a.alpha;
    c.setup.beta = a.beta;
    c.setup.selection = if a.selection == "exact" {
        Selection::Exact
    } else {
        Selection::Rates
    };
    c.iterations = a.iterations;
    c.dd_iterations = a.iterations;
    c
}

pub fn drum(a: &DrumArgs) -> Result<()> {
    if a.hosts == 0 || a.apps == 0 || a.iterations == 0 {
        bail!("--hosts, --apps and --iterations must be at least 1");
    }
    if a.apps < a.k {
        bail!("--apps ({}) must be at least k ({})", a.apps, a.k);
    }
    if a.rho.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        bail!("--rho must be a positive number");
    }
    let sizes: Vec<(usize, usize)> = if a.all {
        [100, 1000, 10_000]
            .iter()
            .flat_map(|&n| [50, 500, 5000].map(|m| (n, m)))
            .collect()
    } else {
        vec![(a.hosts, a.apps)]
    };
    let tty = std::io::stderr().is_terminal();
    let mut out = Vec::new();
    for (i, &(n, m)) in sizes.iter().enumerate() {
        let start = Instant::now();
        let cfg = config(a, n, m);
        let mut o = run(&cfg, &mut || start.elapsed().as_secs_f64(), &mut |p| {
            if tty {
                let what = match p {
                    Progress::Reference => "reference".to_owned(),
                    Progress::Admm(k, of) => format!("ADMM {k}/{of}"),
                    Progress::Dual(k, of) => format!("dual decomposition {k}/{of}"),
                };
                eprint!(
                    "\r\x1b[Klab drum [{}/{}] n={n} m={m}: {what}",
                    i + 1,
                    sizes.len()
                );
            }
        })
        .with_context(|| format!("n = {n}, m = {m}"))?;
        o.peak_rss_mib = resex_rt::peak_rss_mib();
        if let Some(dir) = &a.plot {
            let path = dir.join(format!("drum-n{n}-m{m}.svg"));
            super::drum_plot::convergence(&o, &path)?;
            if tty {
                eprint!("\r\x1b[K");
            }
            eprintln!("lab drum: wrote {}", path.display());
        }
        out.push(o);
    }
    if tty {
        eprint!("\r\x1b[K");
    }
    if a.all {
        emit(a.json, &out, |w| table(w, &out))
    } else {
        emit(a.json, &out[0], |w| table(w, &out))
    }
}

/// The penalty rule for the table's first line.
fn penalty(o: &Outcome) -> String {
    match o.penalty {
        PenaltyRule::Fixed => format!("rho {} (fixed)", o.params.rho),
        PenaltyRule::Adaptive => format!(
            "rho adaptive (residual balancing from {}{})",
            o.params.rho,
            o.balancing
                .map_or(String::new(), |b| format!(", mu {} tau {}", b.mu, b.tau))
        ),
    }
}

fn it(v: Option<u64>) -> String {
    v.map_or("-".to_owned(), |v| v.to_string())
}

fn table(w: &mut dyn Write, rows: &[Outcome]) -> std::io::Result<()> {
    if let Some(o) = rows.first() {
        writeln!(
            w,
            "DRUM (Shen et al.): k {} alpha {} beta {} {} seed {}; capacities per host Q = m e^(q/m), C = m e^(c/m)",
            o.params.k, o.params.alpha, o.params.beta, penalty(o), o.seed
        )?;
    }
    writeln!(
        w,
        "{:>6} {:>5} {:>7} {:>8} {:>9} {:>16} {:>11} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "hosts",
        "apps",
        "stop at",
        "to 99.5%",
        "feas 99.5",
        "optimum",
        "ADMM/opt",
        "DD/opt",
        "ADMM/DD",
        "res @10",
        "s/iter",
        "peak MiB",
        "final rho"
    )?;
    for o in rows {
        let best = o.reference_objective;
        let dd = o.dual_decomposition.objective_at_60;
        let res10 = o
            .admm
            .primal_residual
            .get(9)
            .map_or("-".into(), |r| format!("{r:.2e}"));
        writeln!(
            w,
            "{:>6} {:>5} {:>7} {:>8} {:>9} {:>16.6e} {:>11.6} {:>11.6} {:>10.4} {:>10} {:>9.3} {:>9} {:>9.3e}",
            o.hosts,
            o.apps,
            it(o.admm.iterations),
            it(o.admm.iterations_to_995),
            it(o.admm.iterations_to_995_recovered),
            best,
            o.admm.objective / best,
            dd / best,
            o.objective_ratio,
            res10,
            o.admm.seconds_per_iteration,
            o.peak_rss_mib.map_or("-".into(), |m| format!("{m:.0}")),
            o.final_rho,
        )?;
    }
    writeln!(
        w,
        "stop at: the stopping rule (primal residual <= 1e-3 |z|, objective change <= 1e-4); to 99.5%: \
         the objective stays within 0.5% of the certified optimum from there on; feas: the same for \
         the feasible schedule recovered from z; X/opt and ADMM/DD at the last iteration (objectives \
         are negative when the latency term dominates: closer to 1 is better); res @10: the paper's \
         primal residual sum_i ||A x_i - z_i||^2 after 10 iterations; final rho: the penalty of ADMM's \
         last iteration"
    )?;
    Ok(())
}
