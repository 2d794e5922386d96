//! Runs one group of the paper's experiment and prints the row: `cargo run -p resex-fabric
//! --release --example pair -- vgg19 vgg19` (environment: `RAI` Mb/s, `GAIN`, `T_US`).
fn main() {
    let jobs: Vec<String> = std::env::args().skip(1).collect();
    let j: Vec<&str> = jobs.iter().map(String::as_str).collect();
    let mut cfg = resex_fabric::paper::PaperConfig::default();
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<f64>().ok());
    if let Some(x) = env("RAI") {
        cfg.dcqcn.rai_mbps = x;
    }
    if let Some(x) = env("GAIN") {
        cfg.dcqcn.adaptive_gain = x;
    }
    if let Some(x) = env("T_US") {
        cfg.dcqcn.t_us = x;
    }
    let (row, _) = resex_fabric::paper::group(&j, &cfg).expect("run");
    let r = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join("/")
    };
    println!(
        "{:?} score {:.2} alone {} fair {} unfair {} adaptive {} priority {}",
        row.jobs,
        row.compat_score.unwrap_or(f64::NAN),
        r(&row.alone_ms),
        r(&row.fair_iter_ms),
        r(&row.unfair_iter_ms),
        r(&row.adaptive_iter_ms),
        r(&row.priority_iter_ms)
    );
}
