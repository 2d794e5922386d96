//! The transport lab: the shim's transports (the same state machines the real shim runs) on
//! softhca in virtual time, with a NIC model and a CPU model from a testbed preset, reproducing
//! the status-byte paper's Figs. 10, 12-15 and 18 and HiPower's one-to-one, broadcast and
//! gather experiments. Deterministic: nothing in the model is random (the seed is recorded;
//! no figure depends on it), so one seed, indeed any, gives the same bytes.
//!
//! - [`preset`]: every constant, with its source; [`sim`]: the virtual-time driver;
//! - [`actors`]: the guest threads; [`one`]: one connection's latency, throughput and CPU;
//! - [`sb_paper`]: sync time vs blocks, holding a block; [`hp_paper`]: broadcast and gather.
//! - [`sync_dist`]: each synchronisation's time over a run, and its distribution (Fig. 11).

pub mod actors;
pub mod hp_paper;
pub mod one;
pub mod preset;
pub mod sb_paper;
pub mod sim;
pub mod sync_dist;

pub use preset::Testbed;
use sim::context;
pub use sim::SimError;

use one::{measure, OneFigures, Setup};
use resex_shim::transport::Kind;
use serde::Serialize;
use std::collections::BTreeMap;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The status-byte experiments' testbed.
    pub sb_bed: Testbed,
    /// HiPower's experiments' testbed.
    pub hp_bed: Testbed,
    /// Fewer sizes and messages.
    pub quick: bool,
    /// Charge payload copies to the CPU.
    pub charge_copies: bool,
    /// The seed (recorded; nothing in the model is random).
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            sb_bed: preset::STATUS_BYTE,
            hp_bed: preset::HIPOWER,
            quick: false,
            charge_copies: false,
            seed: 1,
        }
    }
}

/// Fig. 18's series.
#[derive(Debug, Clone, Serialize)]
pub struct HoldFigures {
    /// Bin width, ms.
    pub bin_ms: u64,
    /// The block is held from/to, ms.
    pub hold_ms: [u64; 2],
    /// Message size.
    pub msg_size: u64,
    /// MB/s per bin, by mechanism.
    pub mbps: BTreeMap<String, Vec<f64>>,
    /// Mean MB/s while held over before, percent drop, by mechanism.
    pub drop_pct: BTreeMap<String, f64>,
}

/// HiPower's figures, per message size.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HipowerFigures {
    /// Message sizes.
    pub msg_sizes: Vec<u64>,
    /// Buffers per connection (C).
    pub buffers: u32,
    /// One-to-one, by mechanism: throughput, latency, requester and responder CPU per message.
    pub one_to_one: BTreeMap<String, Vec<OneFigures>>,
    /// Broadcast (1 master, 4 workers), by mechanism.
    pub broadcast: BTreeMap<String, Vec<hp_paper::Incast>>,
    /// Gather (4 workers, 1 master).
    pub gather: GatherFigures,
}

/// Gather in the shape.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GatherFigures {
    /// Master CPU per message, ns.
    pub hipower_cpu: Vec<f64>,
    /// Master CPU per message, ns.
    pub cpwr_cpu: Vec<f64>,
    /// Total MB/s.
    pub hipower_mbps: Vec<f64>,
    /// Total MB/s.
    pub cpwr_mbps: Vec<f64>,
    /// Mean latency under load, us.
    pub hipower_latency_us: Vec<f64>,
    /// Mean latency under load, us.
    pub cpwr_latency_us: Vec<f64>,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// The testbeds (status-byte, HiPower).
    pub testbeds: [Testbed; 2],
    /// Seed.
    pub seed: u64,
    /// Copies charged.
    pub charge_copies: bool,
    /// Block counts of Fig. 10.
    pub blocks: Vec<u32>,
    /// Fig. 10: sync time, us, by mechanism, per block count.
    pub sync_us: BTreeMap<String, Vec<f64>>,
    /// Fig. 11: messages of this size sent back to back (3 blocks) ...
    pub sync_series_size: u64,
    /// ... and each synchronisation's time over the run, us, in order, by mechanism ...
    pub sync_series_us: BTreeMap<String, Vec<f64>>,
    /// ... and their distribution.
    pub sync_dist_us: BTreeMap<String, sync_dist::Dist>,
    /// Message sizes of Figs. 12-15.
    pub msg_sizes: Vec<u64>,
    /// Fig. 12: latency, us.
    pub latency_us: BTreeMap<String, Vec<f64>>,
    /// Figs. 13-14: MB/s.
    pub throughput_mbps: BTreeMap<String, Vec<f64>>,
    /// Fig. 15: sender-side CPU per message (the ACK thread included), ns.
    pub cpu_ns_per_msg: BTreeMap<String, Vec<f64>>,
    /// Receiver CPU per message, ns.
    pub rx_cpu_ns_per_msg: BTreeMap<String, Vec<f64>>,
    /// Sender-side busy-polling, percent of one CPU.
    pub tx_busy_pct: BTreeMap<String, Vec<f64>>,
    /// Fig. 18.
    pub hold: HoldFigures,
    /// HiPower's experiments.
    pub hipower: HipowerFigures,
}

fn sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![64, 256, 4096, 65536, 1 << 20]
    } else {
        vec![
            64,
            256,
            1024,
            4096,
            16384,
            65536,
            262_144,
            1 << 20,
            4 << 20,
            8 << 20,
        ]
    }
}

fn counts(size: u64, quick: bool) -> (u64, u64) {
    let tput = ((256u64 << 20) / size).clamp(16, 1000);
    if quick {
        (20, (tput / 4).max(8))
    } else {
        (100, tput)
    }
}

/// The progress callback and how far along it is.
struct Ticker<'a> {
    done: usize,
    total: usize,
    progress: &'a mut dyn FnMut(usize, usize, &str),
}

impl Ticker<'_> {
    /// One more experiment done.
    fn tick(&mut self, what: &str) {
        self.done += 1;
        (self.progress)(self.done, self.total, what);
    }
}

fn setup(cfg: &Config, bed: Testbed, blocks: u32, size: u64) -> Setup {
    Setup {
        bed,
        blocks,
        size,
        charge_copies: cfg.charge_copies,
    }
}

const SB_KINDS: [Kind; 2] = [Kind::StatusByte, Kind::SlidingWindow];
const HP_KINDS: [Kind; 2] = [Kind::Hipower, Kind::Cpwr];

fn block_counts(quick: bool) -> Vec<u32> {
    if quick {
        vec![1, 3, 16, 255]
    } else {
        vec![1, 2, 3, 4, 8, 16, 32, 64, 128, 255]
    }
}

fn hp_sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![512, 4096, 65536]
    } else {
        vec![256, 512, 1024, 4096, 16384, 65536, 262_144, 1 << 20]
    }
}

/// Runs every experiment; `progress(done, of, what)` after each.
pub fn run(
    cfg: &Config,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Results, SimError> {
    let blocks = block_counts(cfg.quick);
    let msg_sizes = sizes(cfg.quick);
    let hp_sizes = hp_sizes(cfg.quick);
    let total = blocks.len() * 2
        + 2
        + msg_sizes.len() * SB_KINDS.len()
        + 2
        + hp_sizes.len() * HP_KINDS.len() * 3;
    let mut t = Ticker {
        done: 0,
        total,
        progress,
    };
    let _ = cfg.seed;

    let sync_us = sync_vs_blocks(cfg, &blocks, &mut t)?;
    let sync_series_size = 4096;
    let sync_series_us = sync_series(cfg, sync_series_size, &mut t)?;
    let sync_dist_us = sync_series_us
        .iter()
        .map(|(k, v)| (k.clone(), sync_dist::Dist::of(v)))
        .collect();
    let figs = one_connection(cfg, &msg_sizes, &mut t)?;
    let pick = |f: fn(&OneFigures) -> f64| -> BTreeMap<String, Vec<f64>> {
        figs.iter()
            .map(|(k, v)| (k.clone(), v.iter().map(f).collect()))
            .collect()
    };
    let hold = hold_a_block(cfg, &mut t)?;
    let hipower = hipower(cfg, hp_sizes, &mut t)?;

    Ok(Results {
        testbeds: [cfg.sb_bed, cfg.hp_bed],
        seed: cfg.seed,
        charge_copies: cfg.charge_copies,
        blocks,
        sync_us,
        sync_series_size,
        sync_series_us,
        sync_dist_us,
        msg_sizes,
        latency_us: pick(|f| f.latency_us),
        throughput_mbps: pick(|f| f.mbps),
        cpu_ns_per_msg: pick(|f| f.tx_cpu_ns),
        rx_cpu_ns_per_msg: pick(|f| f.rx_cpu_ns),
        tx_busy_pct: pick(|f| f.tx_busy_pct),
        hold,
        hipower,
    })
}

/// Fig. 10: sync time per block count, by mechanism.
fn sync_vs_blocks(
    cfg: &Config,
    blocks: &[u32],
    t: &mut Ticker<'_>,
) -> Result<BTreeMap<String, Vec<f64>>, SimError> {
    let mut sync_us: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for &b in blocks {
        let s = setup(cfg, cfg.sb_bed, b, 64);
        let v = context(
            sb_paper::status_byte_sync_us(&s, if cfg.quick { 20 } else { 200 }),
            || format!("sync, status-byte, {b} blocks"),
        )?;
        sync_us
            .entry(Kind::StatusByte.to_string())
            .or_default()
            .push(v);
        t.tick(&format!("sync, status-byte, {b} blocks"));
        let v = context(
            sb_paper::window_sync_us(&s, if cfg.quick { 20 } else { 100 }),
            || format!("sync, window, {b} blocks"),
        )?;
        sync_us
            .entry(Kind::SlidingWindow.to_string())
            .or_default()
            .push(v);
        t.tick(&format!("sync, sliding window, {b} blocks"));
    }
    Ok(sync_us)
}

/// Fig. 11: each synchronisation's time over a run of `size`-byte messages, by mechanism.
fn sync_series(
    cfg: &Config,
    size: u64,
    t: &mut Ticker<'_>,
) -> Result<BTreeMap<String, Vec<f64>>, SimError> {
    let mut sync_series_us: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for kind in SB_KINDS {
        let n = if cfg.quick { 60 } else { 1000 };
        let v = context(
            sync_dist::sync_series(kind, &setup(cfg, cfg.sb_bed, 3, size), n),
            || format!("sync series, {kind}"),
        )?;
        sync_series_us.insert(kind.to_string(), v);
        t.tick(&format!("sync series, {kind}"));
    }
    Ok(sync_series_us)
}

/// Figs. 12-15: one connection per message size, by mechanism.
fn one_connection(
    cfg: &Config,
    msg_sizes: &[u64],
    t: &mut Ticker<'_>,
) -> Result<BTreeMap<String, Vec<OneFigures>>, SimError> {
    let mut figs: BTreeMap<String, Vec<OneFigures>> = BTreeMap::new();
    for &size in msg_sizes {
        for kind in SB_KINDS {
            let (lat_n, tput_n) = counts(size, cfg.quick);
            let f = context(
                measure(kind, &setup(cfg, cfg.sb_bed, 3, size), lat_n, tput_n),
                || format!("{kind}, {size} B"),
            )?;
            figs.entry(kind.to_string()).or_default().push(f);
            t.tick(&format!("{kind}, {size} B"));
        }
    }
    Ok(figs)
}

/// Fig. 18: throughput while a block is held, by mechanism.
fn hold_a_block(cfg: &Config, t: &mut Ticker<'_>) -> Result<HoldFigures, SimError> {
    let hold = sb_paper::Hold {
        from_ns: if cfg.quick { 10_000_000 } else { 100_000_000 },
        to_ns: if cfg.quick { 20_000_000 } else { 200_000_000 },
        end_ns: if cfg.quick { 30_000_000 } else { 300_000_000 },
        block: 2,
    };
    let bin_ns = hold.end_ns / 30;
    let hold_size = 256 * 1024;
    let mut hold_figs = HoldFigures {
        bin_ms: bin_ns / 1_000_000,
        hold_ms: [hold.from_ns / 1_000_000, hold.to_ns / 1_000_000],
        msg_size: hold_size,
        mbps: BTreeMap::new(),
        drop_pct: BTreeMap::new(),
    };
    for kind in SB_KINDS {
        let v = context(
            sb_paper::hold_series(kind, &setup(cfg, cfg.sb_bed, 3, hold_size), hold, bin_ns),
            || format!("hold, {kind}"),
        )?;
        let mean = |a: usize, b: usize| v[a..b].iter().sum::<f64>() / (b - a).max(1) as f64;
        let (before, during) = (mean(1, 10), mean(11, 20));
        let drop = if before > 0.0 {
            (1.0 - during / before) * 100.0
        } else {
            0.0
        };
        hold_figs.drop_pct.insert(kind.to_string(), drop);
        hold_figs.mbps.insert(kind.to_string(), v);
        t.tick(&format!("hold a block, {kind}"));
    }
    Ok(hold_figs)
}

/// HiPower's one-to-one, broadcast and gather per message size, by mechanism.
fn hipower(
    cfg: &Config,
    hp_sizes: Vec<u64>,
    t: &mut Ticker<'_>,
) -> Result<HipowerFigures, SimError> {
    let buffers = 16;
    let mut hp = HipowerFigures {
        msg_sizes: hp_sizes.clone(),
        buffers,
        ..HipowerFigures::default()
    };
    for &size in &hp_sizes {
        let (lat_n, tput_n) = counts(size, cfg.quick);
        let s = setup(cfg, cfg.hp_bed, buffers, size);
        for kind in HP_KINDS {
            let f = context(measure(kind, &s, lat_n, tput_n), || {
                format!("one-to-one, {kind}, {size} B")
            })?;
            hp.one_to_one.entry(kind.to_string()).or_default().push(f);
            t.tick(&format!("one-to-one, {kind}, {size} B"));
            let b = context(hp_paper::incast(kind, &s, tput_n / 2 + 4, false), || {
                format!("broadcast, {kind}, {size} B")
            })?;
            hp.broadcast.entry(kind.to_string()).or_default().push(b);
            t.tick(&format!("broadcast, {kind}, {size} B"));
            let g = context(hp_paper::incast(kind, &s, tput_n / 2 + 4, true), || {
                format!("gather, {kind}, {size} B")
            })?;
            hp.gather.push(kind, &g);
            t.tick(&format!("gather, {kind}, {size} B"));
        }
    }
    Ok(hp)
}

impl GatherFigures {
    /// One gather's figures, under its mechanism.
    fn push(&mut self, kind: Kind, g: &hp_paper::Incast) {
        if kind == Kind::Hipower {
            self.hipower_cpu.push(g.master_cpu_ns);
            self.hipower_mbps.push(g.mbps);
            self.hipower_latency_us.push(g.latency_us);
        } else {
            self.cpwr_cpu.push(g.master_cpu_ns);
            self.cpwr_mbps.push(g.mbps);
            self.cpwr_latency_us.push(g.latency_us);
        }
    }
}
