//! The DRUM convergence plot (plotters, SVG): the objective of both methods against the
//! certified optimum (and its 99.5 % band), and the primal residual, per iteration.

use anyhow::{Context, Result};
use plotters::prelude::*;
use resex_drum::experiment::Outcome;
use resex_drum::penalty::PenaltyRule;
use std::path::Path;

/// Writes `path` (two panels: objective, residual).
pub fn convergence(o: &Outcome, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    draw(o, path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn series(v: &[f64]) -> Vec<(f64, f64)> {
    #[allow(clippy::cast_precision_loss)]
    v.iter()
        .enumerate()
        .filter(|(_, y)| y.is_finite())
        .map(|(i, &y)| ((i + 1) as f64, y))
        .collect()
}

fn draw(o: &Outcome, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1000, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "DRUM: n = {}, m = {}, {} (ADMM) vs dual decomposition (1e-3/sqrt k)",
            o.hosts,
            o.apps,
            match o.penalty {
                PenaltyRule::Fixed => format!("rho = {}", o.params.rho),
                PenaltyRule::Adaptive =>
                    format!("rho adaptive from {} to {:.3}", o.params.rho, o.final_rho),
            }
        ),
        ("sans-serif", 20),
    )?;
    let (top, bottom) = root.split_vertically(440);
    #[allow(clippy::cast_precision_loss)]
    let k = o
        .admm
        .objective_trace
        .len()
        .max(o.dual_decomposition.objective_trace.len()) as f64;
    objective_panel(&top, o, k)?;
    residual_panel(&bottom, o, k)?;
    root.present()?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// The objective per iteration against the certified optimum.
fn objective_panel(top: &Area<'_>, o: &Outcome, k: f64) -> Result<(), Box<dyn std::error::Error>> {
    let best = o.reference_objective;
    // The objective panel: within +-50 % of the optimum (early iterates can be far off).
    let span = best.abs() * 0.5;
    let mut c = ChartBuilder::on(top)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(80)
        .build_cartesian_2d(1f64..k, (best - span)..(best + span))?;
    c.configure_mesh()
        .x_desc("iteration")
        .y_desc("objective (clipped to optimum +-50%)")
        .draw()?;
    let clip = |v: &[f64]| -> Vec<(f64, f64)> {
        series(v)
            .into_iter()
            .map(|(x, y)| (x, y.clamp(best - span, best + span)))
            .collect()
    };
    let lines: [(&str, &[f64], RGBColor); 4] = [
        ("ADMM", &o.admm.objective_trace, RGBColor(31, 119, 180)),
        (
            "ADMM, feasible schedule",
            &o.admm.recovered_trace,
            RGBColor(44, 160, 44),
        ),
        (
            "dual decomposition",
            &o.dual_decomposition.objective_trace,
            RGBColor(214, 39, 40),
        ),
        (
            "dual decomposition, feasible schedule",
            &o.dual_decomposition.recovered_trace,
            RGBColor(255, 127, 14),
        ),
    ];
    for (name, v, colour) in lines {
        c.draw_series(LineSeries::new(clip(v), colour.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour));
    }
    for (name, y) in [
        ("optimum (certified)", best),
        ("99.5 %", best - 0.005 * best.abs()),
    ] {
        c.draw_series(LineSeries::new([(1.0, y), (k, y)], BLACK.stroke_width(1)))?
            .label(name)
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    Ok(())
}

/// The primal residual per iteration (log scale).
fn residual_panel(
    bottom: &Area<'_>,
    o: &Outcome,
    k: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let res: Vec<(f64, f64)> = series(&o.admm.primal_residual)
        .into_iter()
        .chain(series(&o.dual_decomposition.primal_residual))
        .filter(|(_, y)| *y > 0.0)
        .collect();
    let lo = res
        .iter()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .max(1e-30);
    let hi = res.iter().map(|p| p.1).fold(1.0, f64::max);
    let mut c = ChartBuilder::on(bottom)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(80)
        .build_cartesian_2d(1f64..k, (lo / 2.0..hi * 2.0).log_scale())?;
    c.configure_mesh()
        .x_desc("iteration")
        .y_desc("sum_i ||A x_i - z_i||^2")
        .draw()?;
    let pos = |v: &[f64]| -> Vec<(f64, f64)> {
        series(v).into_iter().filter(|(_, y)| *y > 0.0).collect()
    };
    for (name, v, colour) in [
        ("ADMM", &o.admm.primal_residual, RGBColor(31, 119, 180)),
        (
            "dual decomposition",
            &o.dual_decomposition.primal_residual,
            RGBColor(214, 39, 40),
        ),
    ] {
        c.draw_series(LineSeries::new(pos(v), colour.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
