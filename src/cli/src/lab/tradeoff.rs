//! The trade-off plot of `resex lab compare --plot DIR`: for every scenario and policy, the
//! worst victim's mean latency over its latency alone against the aggressors' work kept. A
//! policy on one lever slides along one curve (less latency, less work); a better policy sits
//! further down and to the right.

use anyhow::{Context, Result};
use plotters::prelude::*;
use resex_lab::compare::CompareRow;
use std::path::{Path, PathBuf};

const COLOURS: [RGBColor; 8] = [
    RGBColor(80, 80, 80),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];

/// Writes `dir/tradeoff.svg`; returns its path.
pub fn tradeoff(rows: &[CompareRow], dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("tradeoff.svg");
    draw(rows, &path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(path)
}

fn draw(rows: &[CompareRow], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let pts: Vec<(&CompareRow, f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r, r.aggressor_kept?, r.victim_mean_x?)))
        .collect();
    let top = pts.iter().map(|p| p.2).fold(2.0_f64, f64::max) * 1.3;
    let mut policies: Vec<&str> = rows.iter().map(|r| r.policy.as_str()).collect();
    policies.dedup();
    policies.sort_unstable();
    policies.dedup();
    let root = SVGBackend::new(path, (900, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            "Victim latency vs aggressor work kept (lab, one point per scenario and policy)",
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..1.08, (0.9f64..top).log_scale())?;
    c.configure_mesh()
        .x_desc("aggressors' throughput kept (1 = all of it)")
        .y_desc("worst victim's mean latency / alone (log)")
        .draw()?;
    for (k, pol) in policies.iter().enumerate() {
        let col = COLOURS[k % COLOURS.len()];
        let mine: Vec<&(&CompareRow, f64, f64)> =
            pts.iter().filter(|p| p.0.policy == *pol).collect();
        c.draw_series(
            mine.iter()
                .map(|p| Circle::new((p.1, p.2), 6, col.filled())),
        )?
        .label(*pol)
        .legend(move |(x, y)| Circle::new((x + 8, y), 5, col.filled()));
        c.draw_series(mine.iter().map(|p| {
            Text::new(
                p.0.scenario.clone(),
                (p.1 + 0.008, p.2 * 1.03),
                ("sans-serif", 11).into_font().color(&col),
            )
        }))?;
    }
    c.draw_series(LineSeries::new(
        [(0.0, 1.1), (1.08, 1.1)],
        ShapeStyle::from(&RGBColor(160, 160, 160)).stroke_width(1),
    ))?
    .label("1.10 x alone (the goal)")
    .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RGBColor(160, 160, 160)));
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
