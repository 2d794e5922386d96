//! The paper's Fig. 2 shape (plotters, SVG): the bottleneck's utilisation by each job over
//! the first iterations, one panel per scheme (fair, unfair, adaptive, priority).

use anyhow::{Context, Result};
use plotters::prelude::*;
use resex_fabric::FabricResult;
use std::path::Path;

const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
];

/// Writes `path`: one panel per run, `window_ms` of each from the start.
pub fn utilisation(runs: &[(String, &FabricResult)], window_ms: f64, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    draw(runs, window_ms, path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn draw(
    runs: &[(String, &FabricResult)],
    window_ms: f64,
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let height = 40 + 220 * u32::try_from(runs.len()).unwrap_or(1);
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = runs
        .first()
        .map_or_else(String::new, |(_, r)| r.name.clone());
    let title = title.split(" (").next().unwrap_or_default().to_string();
    let root = root.titled(
        &format!("{title}: utilisation of the 50 Gb/s bottleneck by job (1 ms buckets)"),
        ("sans-serif", 20),
    )?;
    let panels = root.split_evenly((runs.len().max(1), 1));
    for ((label, r), area) in runs.iter().zip(panels.iter()) {
        let Some(s) = r.series.first() else { continue };
        let mut c = ChartBuilder::on(area)
            .caption(label, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..window_ms, 0f64..1.05)?;
        c.configure_mesh()
            .x_desc("time (ms)")
            .y_desc("share of link")
            .draw()?;
        for (k, job) in s.jobs.iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let pts: Vec<(f64, f64)> = s
                .util
                .iter()
                .enumerate()
                .map(|(b, v)| (b as f64 * s.bucket_ms, v.get(k).copied().unwrap_or(0.0)))
                .take_while(|(t, _)| *t <= window_ms)
                .collect();
            let colour = COLOURS[k % COLOURS.len()];
            c.draw_series(LineSeries::new(pts, colour.stroke_width(2)))?
                .label(job.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
