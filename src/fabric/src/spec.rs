//! The fabric scenario, a TOML file:
//!
//! ```toml
//! name = "two-jobs"
//! duration_s = 3.0
//! [[host]]            # a host: its NIC is two links, "NAME.tx" and "NAME.rx"
//! name = "h1"
//! nic_gbps = 50.0
//! tor = "t1"          # optional: flows to hosts under another ToR cross "t1.up", "t2.down"
//! [[tor]]
//! name = "t1"
//! up_gbps = 100.0
//! [[link]]            # a named link, crossed by the routes that list it
//! name = "l1"
//! gbps = 50.0
//! [[route]]           # from one host to another: the links between the two NICs
//! from = "h1"
//! to = "h3"
//! links = ["l1"]
//! [[job]]
//! name = "j1"
//! preset = "vgg19"    # or compute_ms and comm_mb
//! workers = ["h1", "h3"]
//! ```
//!
//! A flow from host A to host B crosses `A.tx`, then the route's links if a route from A to B
//! is given, else `TA.up` and `TB.down` when A and B sit under different ToRs, then `B.rx`.
//! A flow between two VMs of one host crosses `A.tx` only (the NIC loops it back).

use crate::dcqcn::DcqcnParams;
use crate::error::{FabricError, JobError, NetError};
use serde::{Deserialize, Serialize};

fn one() -> f64 {
    1.0
}
fn fifty() -> f64 {
    50.0
}

/// The whole fabric scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSpec {
    /// Name.
    pub name: String,
    /// What it shows.
    #[serde(default)]
    pub description: String,
    /// Virtual seconds to run.
    pub duration_s: f64,
    /// The fluid model's step while flows are on the wire, µs.
    #[serde(default = "FabricSpec::default_dt_us")]
    pub dt_us: f64,
    /// Seeds the marking draws and the compute jitter.
    #[serde(default = "FabricSpec::default_seed")]
    pub seed: u64,
    /// Congestion control.
    #[serde(default)]
    pub cc: CcSpec,
    /// Queue and marking settings of every link that does not set its own.
    #[serde(default)]
    pub net: NetSpec,
    /// Hosts.
    #[serde(default, rename = "host")]
    pub hosts: Vec<HostSpec>,
    /// Top-of-rack switches (their uplinks).
    #[serde(default, rename = "tor")]
    pub tors: Vec<TorSpec>,
    /// Named links.
    #[serde(default, rename = "link")]
    pub links: Vec<FabricLink>,
    /// Routes between hosts.
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteSpec>,
    /// The jobs.
    #[serde(default, rename = "job")]
    pub jobs: Vec<JobSpec>,
    /// On lab hosts (`--lab-hosts`): each worker's WRITEs, KiB (default 256). Smaller WRITEs
    /// keep a sender's bytes in every 1 ms interval at low rates, as the live jobs demo's
    /// replies do; the fluid model has no WRITEs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_kib: Option<u64>,
}

impl FabricSpec {
    fn default_dt_us() -> f64 {
        5.0
    }
    fn default_seed() -> u64 {
        1
    }

    /// Parses a fabric scenario.
    pub fn from_toml(text: &str) -> Result<Self, FabricError> {
        Ok(toml::from_str(text)?)
    }

    /// Is this TOML a fabric scenario (it has hosts) rather than a single-host one?
    #[must_use]
    pub fn looks_like(text: &str) -> bool {
        text.lines().any(|l| l.trim_start().starts_with("[[host]]"))
    }
}

/// How flows' rates are controlled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CcMode {
    /// DCQCN: every flow the same `T` and `R_AI` unless its job sets its own `t_us` (the
    /// paper's unfairness).
    #[default]
    Dcqcn,
    /// The paper's adaptive unfairness: `R_AI (1 + progress)`, progress the fraction of its
    /// communication phase's bytes the flow has sent.
    Adaptive,
}

/// `[cc]`: congestion control.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CcSpec {
    /// Mode.
    #[serde(default)]
    pub mode: CcMode,
    /// The controller's parameters, `[cc.dcqcn]` (a job's `t_us` overrides `t_us`).
    #[serde(default)]
    pub dcqcn: DcqcnParams,
}

impl Default for CcSpec {
    fn default() -> Self {
        Self {
            mode: CcMode::Dcqcn,
            dcqcn: DcqcnParams::default(),
        }
    }
}

/// `[net]`: every link's queue and marking unless it sets its own.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetSpec {
    /// Marking starts at this queue, KB (RED's Kmin).
    #[serde(default = "NetSpec::kmin")]
    pub kmin_kb: f64,
    /// Marking probability reaches `pmax` here, KB (Kmax); every packet is marked beyond.
    #[serde(default = "NetSpec::kmax")]
    pub kmax_kb: f64,
    /// Marking probability at `kmax_kb`.
    #[serde(default = "NetSpec::pmax")]
    pub pmax: f64,
    /// Buffer per link, KB: beyond it the link pauses its senders (PFC), nothing is lost.
    #[serde(default = "NetSpec::buffer")]
    pub buffer_kb: f64,
    /// Serve strict-priority classes (a job's `priority`, 0 first); off: one FIFO.
    #[serde(default)]
    pub priority_queues: bool,
    /// Packet size of the marking draws, bytes.
    #[serde(default = "NetSpec::mtu")]
    pub mtu: f64,
}

impl NetSpec {
    fn kmin() -> f64 {
        5.0
    }
    fn kmax() -> f64 {
        200.0
    }
    fn pmax() -> f64 {
        0.01
    }
    fn buffer() -> f64 {
        1024.0
    }
    fn mtu() -> f64 {
        4096.0
    }
}

impl NetSpec {
    /// Checks the values: thresholds and buffer in KB, finite, `0 <= kmin < kmax`, at most
    /// 1 GB; `pmax` in [0, 1]; `mtu` 64..=65536 bytes.
    pub fn check(&self) -> Result<(), NetError> {
        let kb = |field: &'static str, value: f64| {
            if value.is_finite() && (0.0..=1e6).contains(&value) {
                Ok(())
            } else {
                Err(NetError::Kb { field, value })
            }
        };
        kb("kmin_kb", self.kmin_kb)?;
        kb("kmax_kb", self.kmax_kb)?;
        kb("buffer_kb", self.buffer_kb)?;
        if self.kmax_kb <= self.kmin_kb {
            return Err(NetError::Thresholds {
                kmin_kb: self.kmin_kb,
                kmax_kb: self.kmax_kb,
            });
        }
        if self.buffer_kb <= 0.0 {
            return Err(NetError::NoBuffer {
                buffer_kb: self.buffer_kb,
            });
        }
        if !(self.pmax.is_finite() && (0.0..=1.0).contains(&self.pmax)) {
            return Err(NetError::Pmax { pmax: self.pmax });
        }
        if !(self.mtu.is_finite() && (64.0..=65536.0).contains(&self.mtu)) {
            return Err(NetError::Mtu { mtu: self.mtu });
        }
        Ok(())
    }
}

impl Default for NetSpec {
    fn default() -> Self {
        Self {
            kmin_kb: Self::kmin(),
            kmax_kb: Self::kmax(),
            pmax: Self::pmax(),
            buffer_kb: Self::buffer(),
            priority_queues: false,
            mtu: Self::mtu(),
        }
    }
}

/// `[[host]]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Name.
    pub name: String,
    /// The NIC's rate, Gb/s (both directions).
    #[serde(default = "fifty")]
    pub nic_gbps: f64,
    /// The ToR it hangs under.
    #[serde(default)]
    pub tor: Option<String>,
}

/// `[[tor]]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorSpec {
    /// Name.
    pub name: String,
    /// Its uplink's rate (each direction), Gb/s.
    pub up_gbps: f64,
}

/// `[[link]]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricLink {
    /// Name.
    pub name: String,
    /// Rate, Gb/s.
    pub gbps: f64,
    /// Serve strict-priority classes (default: `[net]`'s).
    #[serde(default)]
    pub priority_queues: Option<bool>,
    /// Record its utilisation per job over time.
    #[serde(default)]
    pub record: bool,
}

/// `[[route]]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// Source host.
    pub from: String,
    /// Destination host.
    pub to: String,
    /// The links between the two NICs, in order.
    pub links: Vec<String>,
    /// Also the route back (the same links, `to` to `from`).
    #[serde(default)]
    pub both_ways: bool,
}

/// How a job's workers exchange their bytes each iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Ring all-reduce: worker i sends to worker i+1 (mod n), `2 (n-1)/n` times the bytes.
    #[default]
    Ring,
    /// Worker i sends the bytes to worker i+1 (mod n), once.
    Send,
    /// Worker i sends the bytes to worker i+1, the last worker none: one way, as a
    /// pipeline's stages pass activations (or a server its replies: the live jobs demo).
    Pipeline,
}

/// `[[job]]`: a periodic training job.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Name.
    pub name: String,
    /// A preset's shape (`resex_mlcompat::preset`); `compute_ms`/`comm_mb` override it.
    #[serde(default)]
    pub preset: Option<String>,
    /// Compute per iteration, ms.
    #[serde(default)]
    pub compute_ms: Option<f64>,
    /// Bytes each worker's all-reduce amounts to per iteration, MB (10^6).
    #[serde(default)]
    pub comm_mb: Option<f64>,
    /// The hosts of its workers, one VM each (a host may appear more than once).
    pub workers: Vec<String>,
    /// How the workers exchange.
    #[serde(default)]
    pub pattern: Pattern,
    /// When it starts, ms.
    #[serde(default)]
    pub start_ms: f64,
    /// Iterations to run (0: until the end).
    #[serde(default)]
    pub iterations: u64,
    /// Its flows' rate-increase period `T`, µs (default: `[cc]`'s): lower is more aggressive.
    #[serde(default)]
    pub t_us: Option<f64>,
    /// Its priority class on links with priority queues (0 is served first).
    #[serde(default)]
    pub priority: u8,
    /// Each compute phase is stretched by a uniform draw in `[0, jitter)` of itself.
    #[serde(default)]
    pub jitter: f64,
    /// Scales the preset's bytes (e.g. a larger batch).
    #[serde(default = "one")]
    pub comm_scale: f64,
}

impl JobSpec {
    /// A job of `preset` on `workers`.
    #[must_use]
    pub fn of_preset(name: &str, preset: &str, workers: &[&str]) -> Self {
        Self {
            name: name.into(),
            preset: Some(preset.into()),
            compute_ms: None,
            comm_mb: None,
            workers: workers.iter().map(|w| (*w).to_string()).collect(),
            pattern: Pattern::Ring,
            start_ms: 0.0,
            iterations: 0,
            t_us: None,
            priority: 0,
            jitter: 0.0,
            comm_scale: 1.0,
        }
    }

    /// Compute per iteration (ns) and the all-reduce's bytes per worker.
    pub fn shape(&self) -> Result<(u64, f64), FabricError> {
        let base = match &self.preset {
            Some(p) => {
                let p = resex_mlcompat::preset::preset(p).ok_or_else(|| FabricError::Unknown {
                    what: "preset",
                    name: p.clone(),
                    known: resex_mlcompat::preset::names().join(", "),
                })?;
                Some((p.compute_ns as f64 / 1e6, p.comm_bytes as f64 / 1e6))
            }
            None => None,
        };
        let compute_ms = self.compute_ms.or(base.map(|b| b.0));
        let comm_mb = self.comm_mb.or(base.map(|b| b.1));
        let (Some(c), Some(m)) = (compute_ms, comm_mb) else {
            return Err(FabricError::Job {
                job: self.name.clone(),
                problem: JobError::NoShape,
            });
        };
        let m = m * self.comm_scale;
        if !((0.0..1e9).contains(&c) && m > 0.0 && m < 1e9) {
            return Err(FabricError::Job {
                job: self.name.clone(),
                problem: JobError::Shape {
                    compute_ms: c,
                    comm_mb: m,
                },
            });
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(((c * 1e6).round() as u64, m * 1e6))
    }
}

/// Is `x` a usable rate in Gb/s?
pub(crate) fn check_gbps(what: &'static str, name: &str, x: f64) -> Result<f64, FabricError> {
    if x.is_finite() && x > 0.0 && x <= 100_000.0 {
        Ok(x * 1e9)
    } else {
        Err(FabricError::Rate {
            what,
            name: name.to_owned(),
            gbps: x,
        })
    }
}
