//! `resex ibmon scan`: one scan of a guest RAM file.

use super::output::Report;
use super::{load, ScanArgs};
use anyhow::Context;
use resex_ibmon::MonitorState;

/// Upper bound on scans in one invocation: a guest that keeps producing work cannot keep a
/// one-shot scan going for ever.
const MAX_ROUNDS: u32 = 4096;

pub fn run(a: &ScanArgs) -> anyhow::Result<()> {
    let mut g = load::open(&a.target)?;
    if let Some(path) = &a.state {
        if path.exists() {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let st: MonitorState = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a resex ibmon state file", path.display()))?;
            g.restore(&st)
                .with_context(|| format!("in {}", path.display()))?;
        }
    }
    let before = g.rows();
    for round in 1..=MAX_ROUNDS {
        if !g.scan(a.target.budget) {
            break;
        }
        if round == MAX_ROUNDS {
            tracing::warn!(
                "stopped after {MAX_ROUNDS} scans with work still pending; run again to continue"
            );
        }
    }
    let qps = g
        .rows()
        .into_iter()
        .zip(&before)
        .map(|(now, then)| now.since(then))
        .collect();
    let report = Report::new(qps);
    if a.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = &a.state {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&g.state())?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot replace {}", path.display()))?;
    }
    Ok(())
}
