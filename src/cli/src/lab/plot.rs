//! SVG plots (plotters, SVG backend: no system library): for `resex lab paper`, per figure, the
//! reporting VM's mean latency for each case beside its latency alone; for `resex lab run
//! --plot`, a run's time series (latency, cap and throughput per VM).

use anyhow::{Context, Result};
use plotters::prelude::*;
use resex_lab::paper::Row;
use resex_lab::LabResult;
use std::path::{Path, PathBuf};

/// Writes one SVG per figure into `dir`; returns their paths.
pub fn paper(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let alone = rows
        .iter()
        .find(|r| r.figure == "1" && r.case == "alone")
        .and_then(|r| r.victim_mean_us);
    let mut figures: Vec<&str> = rows.iter().map(|r| r.figure).collect();
    figures.dedup();
    let mut out = Vec::new();
    for fig in figures {
        let pts: Vec<&Row> = rows.iter().filter(|r| r.figure == fig).collect();
        let path = dir.join(format!("fig{}.svg", fig.replace('/', "-")));
        bars(fig, &pts, alone, &path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        out.push(path);
    }
    Ok(out)
}

fn label(r: &Row) -> String {
    let mut l: String = r.case.chars().take(24).collect();
    match r.policy.as_str() {
        "none" => {}
        "freemarket" => l.push_str(" FM"),
        "ioshares" => l.push_str(" IOS"),
        p => l.push_str(&format!(" {p}")),
    }
    l
}

fn bars(
    fig: &str,
    pts: &[&Row],
    alone: Option<f64>,
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let n = u32::try_from(pts.len()).unwrap_or(u32::MAX);
    let top = pts
        .iter()
        .filter_map(|r| r.victim_mean_us)
        .chain(alone)
        .fold(1.0_f64, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (160 + 110 * n.max(2), 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            if fig == "2" {
                "Fig. 2: mean latency of N 64 KiB servers: queued (grey), computing (green), \
                 waiting for the completion (blue)"
                    .to_owned()
            } else {
                format!("Fig. {fig}: the 64 KiB reporting VM's mean latency (lab)")
            },
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(120)
        .y_label_area_size(60)
        .build_cartesian_2d((0u32..n).into_segmented(), 0f64..top)?;
    let labels: Vec<String> = pts.iter().map(|r| label(r)).collect();
    c.configure_mesh()
        .disable_x_mesh()
        .y_desc("mean latency, us")
        .x_labels(pts.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_label_style(
            ("sans-serif", 11)
                .into_font()
                .transform(FontTransform::Rotate90),
        )
        .draw()?;
    // Fig. 2 stacks the split (queued, computing, waiting); the others draw the mean.
    let stacked = fig == "2";
    c.draw_series(pts.iter().enumerate().flat_map(|(i, r)| {
        let mut bars = Vec::new();
        let Ok(i) = u32::try_from(i) else {
            return bars;
        };
        let parts: Vec<(f64, RGBAColor)> = match (stacked, r.split_us) {
            (true, Some([q, c, w])) => {
                vec![(q, BLACK.mix(0.5)), (c, GREEN.mix(0.7)), (w, BLUE.mix(0.7))]
            }
            _ => r
                .victim_mean_us
                .map(|y| vec![(y, BLUE.mix(0.7))])
                .unwrap_or_default(),
        };
        let mut y0 = 0.0;
        for (h, colour) in parts {
            let mut b = Rectangle::new(
                [
                    (SegmentValue::Exact(i), y0),
                    (SegmentValue::Exact(i + 1), y0 + h),
                ],
                colour.filled(),
            );
            b.set_margin(0, 0, 8, 8);
            bars.push(b);
            y0 += h;
        }
        bars
    }))?;
    if let Some(a) = alone {
        c.draw_series(LineSeries::new(
            [(SegmentValue::Exact(0), a), (SegmentValue::Exact(n), a)],
            RED.stroke_width(2),
        ))?
        .label(format!("alone: {a:.1} us"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Writes a run's time series as one SVG (three panels: mean latency, cap, throughput per VM);
/// the run must have recorded its series. At most six VMs are drawn (the first six).
pub fn series(r: &LabResult, path: &Path) -> Result<()> {
    let s = r
        .series
        .as_ref()
        .context("the run recorded no time series")?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    draw_series(r, s, path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

type Pick = fn(&resex_lab::VmSeries, usize) -> Option<f64>;

/// One line per VM, and the legend.
fn lines<'a, X, Y>(
    c: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    s: &resex_lab::Series,
    vms: &[&resex_lab::VmSeries],
    pick: Pick,
) -> Result<(), Box<dyn std::error::Error>>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (k, v) in vms.iter().enumerate() {
        let colour = PALETTE[k % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s
            .t_s
            .iter()
            .enumerate()
            .filter_map(|(i, &t)| pick(v, i).map(|y| (t, y)))
            .collect();
        c.draw_series(LineSeries::new(pts, colour.stroke_width(1)))?
            .label(v.name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

fn draw_series(
    r: &LabResult,
    s: &resex_lab::Series,
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1000, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "{}: policy {}, seed {} (lab, virtual time)",
            r.scenario, r.policy, r.seed
        ),
        ("sans-serif", 20),
    )?;
    let panels = root.split_evenly((3, 1));
    let t_end = s.t_s.last().copied().unwrap_or(1.0).max(1e-3);
    let vms: Vec<_> = s.vms.iter().take(PALETTE.len()).collect();
    let picks: [(&str, Pick); 3] = [
        ("mean latency per period, us", |v, i| {
            v.lat_mean_us.get(i).copied().flatten()
        }),
        ("cap, % of a CPU", |v, i| v.cap.get(i).copied()),
        ("reply throughput, Mb/s", |v, i| v.mbps.get(i).copied()),
    ];
    for (k, (area, (desc, pick))) in panels.iter().zip(picks).enumerate() {
        let (lo, hi) = vms
            .iter()
            .flat_map(|v| (0..s.t_s.len()).filter_map(move |i| pick(v, i)))
            .fold((f64::INFINITY, 1.0_f64), |(lo, hi), y| {
                (lo.min(y), hi.max(y))
            });
        let mut b = ChartBuilder::on(area);
        b.margin(10).x_label_area_size(30).y_label_area_size(60);
        if k == 0 {
            // Latencies of different VMs differ by orders of magnitude: a log axis.
            let lo = if lo.is_finite() && lo > 0.0 {
                lo / 1.5
            } else {
                1.0
            };
            let mut c = b.build_cartesian_2d(0f64..t_end, (lo..hi * 1.5).log_scale())?;
            c.configure_mesh()
                .x_desc("virtual time, s")
                .y_desc(desc)
                .draw()?;
            lines(&mut c, s, &vms, pick)?;
        } else {
            let mut c = b.build_cartesian_2d(0f64..t_end, 0f64..hi * 1.1)?;
            c.configure_mesh()
                .x_desc("virtual time, s")
                .y_desc(desc)
                .draw()?;
            lines(&mut c, s, &vms, pick)?;
        }
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(figure: &'static str, case: &str, policy: &str, mean: f64) -> Row {
        Row {
            figure,
            case: case.into(),
            policy: policy.into(),
            victim_mean_us: Some(mean),
            victim_p99_us: Some(mean),
            other_mbps: None,
            other_cap_mean: None,
            other_balance_min: None,
            split_us: None,
        }
    }

    #[test]
    fn one_svg_per_figure_with_a_bar_per_case_and_the_base_line() {
        let rows = vec![
            row("1", "alone", "none", 97.0),
            row("1", "interfered (2 MiB)", "none", 154.0),
            row("9", "interferer 256 KiB", "freemarket", 125.0),
            row("9", "interferer 256 KiB", "ioshares", 117.0),
            row("9", "interferer 512 KiB", "ioshares", 111.0),
        ];
        let dir = tempfile::tempdir().unwrap();
        let files = paper(&rows, dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        let fig9 = std::fs::read_to_string(dir.path().join("fig9.svg")).unwrap();
        assert!(fig9.starts_with("<svg"), "{}", &fig9[..40]);
        assert!(fig9.contains("Fig. 9"));
        assert!(fig9.contains("interferer 256 KiB IOS") && fig9.contains("interferer 256 KiB FM"));
        assert!(fig9.contains("alone: 97.0 us"));
        let bars = fig9.matches("opacity=\"0.7\" fill=\"#0000FF\"").count();
        assert_eq!(bars, 3, "one bar per case");
    }
}
