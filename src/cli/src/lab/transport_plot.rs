//! The transport lab's plots (plotters, SVG): a figure per experiment, one line per mechanism,
//! log-scaled sizes.

use anyhow::{Context, Result};
use plotters::prelude::*;
use resex_lab::transport::Results;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

struct Chart<'a> {
    file: &'a str,
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    xs: Vec<f64>,
    log_x: bool,
    lines: BTreeMap<String, Vec<f64>>,
}

/// Writes every plot under `dir`; returns the paths.
pub fn all(r: &Results, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut charts = paper_charts(r);
    charts.extend(hipower_charts(r));
    let mut out = Vec::new();
    for c in &charts {
        let path = dir.join(c.file);
        draw(c, &path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        out.push(path);
    }
    Ok(out)
}

/// The paper's figures (10-15 and 18).
fn paper_charts(r: &Results) -> Vec<Chart<'static>> {
    let sizes: Vec<f64> = r.msg_sizes.iter().map(|s| *s as f64).collect();
    vec![
        Chart {
            file: "transport-sync.svg",
            title: "Fig. 10: synchronisation time",
            x_desc: "blocks",
            y_desc: "us",
            xs: r.blocks.iter().map(|b| f64::from(*b)).collect(),
            log_x: true,
            lines: r.sync_us.clone(),
        },
        Chart {
            file: "transport-sync-series.svg",
            title: "Fig. 11: each synchronisation, messages back to back",
            x_desc: "synchronisation",
            y_desc: "us",
            xs: (1..=r.sync_series_us.values().map(Vec::len).max().unwrap_or(0))
                .map(|i| i as f64)
                .collect(),
            log_x: false,
            lines: r.sync_series_us.clone(),
        },
        Chart {
            file: "transport-latency.svg",
            title: "Fig. 12: latency of one block",
            x_desc: "bytes",
            y_desc: "us",
            xs: sizes.clone(),
            log_x: true,
            lines: r.latency_us.clone(),
        },
        Chart {
            file: "transport-throughput.svg",
            title: "Figs. 13-14: throughput",
            x_desc: "bytes",
            y_desc: "MB/s",
            xs: sizes.clone(),
            log_x: true,
            lines: r.throughput_mbps.clone(),
        },
        Chart {
            file: "transport-cpu.svg",
            title: "Fig. 15: sender CPU per message",
            x_desc: "bytes",
            y_desc: "ns",
            xs: sizes,
            log_x: true,
            lines: r.cpu_ns_per_msg.clone(),
        },
        Chart {
            file: "transport-hold.svg",
            title: "Fig. 18: receiver holds block 3",
            x_desc: "ms",
            y_desc: "MB/s",
            xs: (0..r.hold.mbps.values().next().map_or(0, Vec::len))
                .map(|i| (i as f64 + 0.5) * r.hold.bin_ms as f64)
                .collect(),
            log_x: false,
            lines: r.hold.mbps.clone(),
        },
    ]
}

/// HiPower's one-to-one and gather figures.
fn hipower_charts(r: &Results) -> Vec<Chart<'static>> {
    let hs: Vec<f64> = r.hipower.msg_sizes.iter().map(|s| *s as f64).collect();
    let hp = |f: fn(&resex_lab::transport::one::OneFigures) -> f64| {
        r.hipower
            .one_to_one
            .iter()
            .map(|(k, v)| (k.clone(), v.iter().map(f).collect()))
            .collect()
    };
    let g = &r.hipower.gather;
    vec![
        Chart {
            file: "transport-hipower-throughput.svg",
            title: "HiPower one-to-one: throughput",
            x_desc: "bytes",
            y_desc: "MB/s",
            xs: hs.clone(),
            log_x: true,
            lines: hp(|f| f.mbps),
        },
        Chart {
            file: "transport-hipower-cpu.svg",
            title: "HiPower one-to-one: requester CPU per message",
            x_desc: "bytes",
            y_desc: "ns",
            xs: hs.clone(),
            log_x: true,
            lines: hp(|f| f.tx_cpu_ns),
        },
        Chart {
            file: "transport-gather.svg",
            title: "HiPower gather: master CPU per message",
            x_desc: "bytes",
            y_desc: "ns",
            xs: hs.clone(),
            log_x: true,
            lines: BTreeMap::from([
                ("hipower".to_owned(), g.hipower_cpu.clone()),
                ("cpwr".to_owned(), g.cpwr_cpu.clone()),
            ]),
        },
        Chart {
            file: "transport-gather-throughput.svg",
            title: "HiPower gather: total throughput",
            x_desc: "bytes",
            y_desc: "MB/s",
            xs: hs,
            log_x: true,
            lines: BTreeMap::from([
                ("hipower".to_owned(), g.hipower_mbps.clone()),
                ("cpwr".to_owned(), g.cpwr_mbps.clone()),
            ]),
        },
    ]
}

fn draw(c: &Chart<'_>, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let tx = |x: f64| if c.log_x { x.max(1.0).log2() } else { x };
    let (x0, x1) = c.xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| {
        (a.min(tx(x)), b.max(tx(x)))
    });
    let (x0, x1) = if x0 < x1 { (x0, x1) } else { (0.0, 1.0) };
    let y1 = c.lines.values().flatten().fold(0.0f64, |m, &y| m.max(y)) * 1.1;
    let y1 = if y1 > 0.0 { y1 } else { 1.0 };
    let mut ch = ChartBuilder::on(&root)
        .caption(c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..y1)?;
    let log_x = c.log_x;
    ch.configure_mesh()
        .x_desc(if log_x {
            format!("{} (log2)", c.x_desc)
        } else {
            c.x_desc.to_owned()
        })
        .y_desc(c.y_desc)
        .x_label_formatter(&|x| {
            if log_x {
                format!("{:.0}", 2f64.powf(*x))
            } else {
                format!("{x:.0}")
            }
        })
        .draw()?;
    for (i, (name, ys)) in c.lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = c.xs.iter().zip(ys).map(|(x, y)| (tx(*x), *y)).collect();
        ch.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        ch.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    ch.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    root.present()?;
    Ok(())
}
