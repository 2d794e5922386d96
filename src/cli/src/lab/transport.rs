//! `resex lab transport`: the shim's transports in virtual time on a testbed model, the
//! status-byte paper's Figs. 10, 12-15 and 18 and HiPower's one-to-one, broadcast and gather
//! experiments, as a table, JSON and SVG plots.

use super::emit::emit;
use anyhow::{anyhow, Result};
use clap::Args;
use resex_lab::transport::{run, Config, Results, Testbed};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// Options of `resex lab transport`.
#[derive(Debug, Args)]
pub struct TransportArgs {
    /// Testbed of the status-byte experiments (cx5-100g, cx3-40g, cx6-200g).
    #[arg(long, default_value = "cx5-100g")]
    pub testbed: String,
    /// Testbed of HiPower's experiments.
    #[arg(long, default_value = "cx3-40g")]
    pub hipower_testbed: String,
    /// Fewer sizes, block counts and messages (seconds instead of minutes).
    #[arg(long)]
    pub quick: bool,
    /// Charge payload copies to the CPU (the status-byte paper left filling and processing out).
    #[arg(long)]
    pub charge_copies: bool,
    /// Seed (recorded; nothing in the model is random).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print every figure as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the plots as DIR/transport-*.svg.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

fn bed(name: &str) -> Result<Testbed> {
    Testbed::preset(name).ok_or_else(|| {
        anyhow!(
            "unknown testbed {name:?}: one of {}",
            Testbed::names().join(", ")
        )
    })
}

pub fn transport(a: &TransportArgs) -> Result<()> {
    let cfg = Config {
        sb_bed: bed(&a.testbed)?,
        hp_bed: bed(&a.hipower_testbed)?,
        quick: a.quick,
        charge_copies: a.charge_copies,
        seed: a.seed,
    };
    let tty = std::io::stderr().is_terminal();
    let r = run(&cfg, &mut |done, of, what| {
        if tty {
            let width = 30;
            let filled = done * width / of.max(1);
            eprint!(
                "\r\x1b[Klab transport [{}{}] {done}/{of} {what}",
                "#".repeat(filled),
                ".".repeat(width - filled)
            );
        }
    })?;
    if tty {
        eprint!("\r\x1b[K");
    }
    if let Some(dir) = &a.plot {
        for p in super::transport_plot::all(&r, dir)? {
            eprintln!("lab transport: wrote {}", p.display());
        }
    }
    emit(a.json, &r, |w| table(w, &r))
}

fn row(w: &mut dyn Write, label: &str, v: &[f64]) -> std::io::Result<()> {
    write!(w, "{label:<34}")?;
    for x in v {
        write!(w, " {x:>9.2}")?;
    }
    writeln!(w)
}

fn size(s: u64) -> String {
    if s >= 1 << 20 {
        format!("{}M", s >> 20)
    } else if s >= 1024 {
        format!("{}K", s >> 10)
    } else {
        s.to_string()
    }
}

fn header(w: &mut dyn Write, label: &str, xs: &[String]) -> std::io::Result<()> {
    write!(w, "{label:<34}")?;
    for x in xs {
        write!(w, " {x:>9}")?;
    }
    writeln!(w)
}

fn table(w: &mut dyn Write, r: &Results) -> std::io::Result<()> {
    let [sb, hp] = &r.testbeds;
    writeln!(w, "status-byte experiments on {} ({})", sb.name, sb.about)?;
    let blocks: Vec<String> = r.blocks.iter().map(u32::to_string).collect();
    header(w, "Fig. 10 sync time (us), blocks", &blocks)?;
    for (k, v) in &r.sync_us {
        row(w, &format!("  {k}"), v)?;
    }
    writeln!(
        w,
        "Fig. 11 each sync, {} messages back to back, 3 blocks (us)",
        size(r.sync_series_size)
    )?;
    let stats = ["n", "mean", "stddev", "min", "p50", "p99", "max"].map(String::from);
    header(w, "", &stats)?;
    for (k, d) in &r.sync_dist_us {
        #[allow(clippy::cast_precision_loss)]
        let v = [d.n as f64, d.mean, d.stddev, d.min, d.p50, d.p99, d.max];
        row(w, &format!("  {k}"), &v)?;
    }
    let sizes: Vec<String> = r.msg_sizes.iter().map(|s| size(*s)).collect();
    for (title, m) in [
        ("Fig. 12 latency (us), size", &r.latency_us),
        ("Figs. 13-14 throughput (MB/s)", &r.throughput_mbps),
        ("Fig. 15 sender CPU per msg (ns)", &r.cpu_ns_per_msg),
        ("receiver CPU per msg (ns)", &r.rx_cpu_ns_per_msg),
        ("sender threads busy-polling (%)", &r.tx_busy_pct),
    ] {
        header(w, title, &sizes)?;
        for (k, v) in m {
            row(w, &format!("  {k}"), v)?;
        }
    }
    writeln!(
        w,
        "Fig. 18 holding block 3 from {} to {} ms ({} B messages): throughput drop while held",
        r.hold.hold_ms[0],
        r.hold.hold_ms[1],
        size(r.hold.msg_size)
    )?;
    for (k, d) in &r.hold.drop_pct {
        writeln!(w, "  {k:<32} {d:>8.1} %")?;
    }
    writeln!(
        w,
        "HiPower experiments on {} ({}), C = {} buffers",
        hp.name, hp.about, r.hipower.buffers
    )?;
    let hs: Vec<String> = r.hipower.msg_sizes.iter().map(|s| size(*s)).collect();
    header(w, "one-to-one, size", &hs)?;
    for (k, v) in &r.hipower.one_to_one {
        row(
            w,
            &format!("  {k} MB/s"),
            &v.iter().map(|f| f.mbps).collect::<Vec<_>>(),
        )?;
        row(
            w,
            &format!("  {k} latency us"),
            &v.iter().map(|f| f.latency_us).collect::<Vec<_>>(),
        )?;
        row(
            w,
            &format!("  {k} requester ns/msg"),
            &v.iter().map(|f| f.tx_cpu_ns).collect::<Vec<_>>(),
        )?;
        row(
            w,
            &format!("  {k} responder ns/msg"),
            &v.iter().map(|f| f.rx_cpu_ns).collect::<Vec<_>>(),
        )?;
    }
    header(w, "broadcast (1 master, 4 workers)", &hs)?;
    for (k, v) in &r.hipower.broadcast {
        row(
            w,
            &format!("  {k} MB/s"),
            &v.iter().map(|f| f.mbps).collect::<Vec<_>>(),
        )?;
        row(
            w,
            &format!("  {k} master ns/msg"),
            &v.iter().map(|f| f.master_cpu_ns).collect::<Vec<_>>(),
        )?;
    }
    let g = &r.hipower.gather;
    header(w, "gather (4 workers, 1 master)", &hs)?;
    row(w, "  hipower MB/s", &g.hipower_mbps)?;
    row(w, "  cpwr MB/s", &g.cpwr_mbps)?;
    row(w, "  hipower master ns/msg", &g.hipower_cpu)?;
    row(w, "  cpwr master ns/msg", &g.cpwr_cpu)?;
    row(w, "  hipower latency us", &g.hipower_latency_us)?;
    row(w, "  cpwr latency us", &g.cpwr_latency_us)
}
